"""dedupe_key holds under concurrent enqueue from many processes (SPEC section 3)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_cronqueue.models import Job

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8
KEYS = 20

# Each child sets Django up on the test database, connects, says "ready", waits for
# "go" on stdin (so that all of them start together), enqueues every key in its own
# random order and prints which job each key returned.
CHILD = """
import json, random, sys
import django

django.setup()
from django.db import connection
from django_cronqueue import jobs

keys = [f"key-{i}" for i in range(int(sys.argv[1]))]
random.shuffle(keys)
connection.ensure_connection()
print("ready", flush=True)
sys.stdin.readline()
returned = {}
for key in keys:
    job = jobs.enqueue("testapp.record", {"key": key}, dedupe_key=key)
    returned[key] = job.pk
print(json.dumps(returned), flush=True)
"""


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_of_the_same_keys_create_one_job_per_key():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
    }
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(KEYS)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for child in children:
            line = child.stdout.readline()
            assert line == "ready\n", child.communicate(timeout=60)[1]
        for child in children:  # all at once
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    rows = {row.dedupe_key: row for row in Job.objects.all()}
    assert Job.objects.count() == KEYS
    assert sorted(rows) == sorted(f"key-{i}" for i in range(KEYS))
    for key, row in rows.items():
        assert (row.name, row.status, row.payload) == ("testapp.record", "pending", {"key": key})
        # every process got back the one job of that key
        assert {returned[key] for returned in results} == {row.pk}
