"""dedupe_key (SPEC section 3) and dedupe_for (section 9) hold under concurrent enqueue
from many processes."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue.models import Job
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8
KEYS = 20

# Each child sets Django up on the test database, connects, says "ready", waits for
# "go" on stdin (so that all of them start together), enqueues every key in its own
# random order and prints which job each key returned.
CHILD = """
import datetime as dt, json, random, sys
import django

django.setup()
from django.db import connection
from django_cronqueue import jobs

keys = [f"key-{i}" for i in range(int(sys.argv[1]))]
span = dt.timedelta(seconds=float(sys.argv[2])) if sys.argv[2] != "none" else None
random.shuffle(keys)
connection.ensure_connection()
print("ready", flush=True)
sys.stdin.readline()
returned = {}
for key in keys:
    job = jobs.enqueue("testapp.record", {"key": key}, dedupe_key=key, dedupe_for=span)
    returned[key] = job.pk
print(json.dumps(returned), flush=True)
"""


def enqueue_concurrently(span: str) -> list[dict[str, int]]:
    """Run PROCESSES children enqueueing the KEYS keys at once; what each got back."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
    }
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(KEYS), span],
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
    return results


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("span", ["none", "3600"])
def test_concurrent_enqueues_of_the_same_keys_create_one_job_per_key(span):
    results = enqueue_concurrently(span)
    rows = {row.dedupe_key: row for row in Job.objects.all()}
    assert Job.objects.count() == KEYS
    assert sorted(rows) == sorted(f"key-{i}" for i in range(KEYS))
    for key, row in rows.items():
        assert (row.name, row.status, row.payload) == ("testapp.record", "pending", {"key": key})
        # every process got back the one job of that key
        assert {returned[key] for returned in results} == {row.pk}


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_after_a_span_ended_create_one_new_job_per_key():
    """Every key's last job ended and its span has passed: eight processes race to free
    the key and create the next job; exactly one new job per key comes out of it."""
    past = timezone.now() - dt.timedelta(hours=2)
    old = {
        f"key-{i}": JobFactory(
            status="succeeded",
            dedupe_key=f"key-{i}",
            window_dedupe_key=f"key-{i}",
            dedupe_until=past + dt.timedelta(hours=1),
            created_at=past,
            finished_at=past,
        ).pk
        for i in range(KEYS)
    }
    results = enqueue_concurrently("3600")
    new = Job.objects.exclude(pk__in=old.values())
    assert new.count() == KEYS
    for row in new:
        assert (row.status, row.window_dedupe_key) == ("pending", row.dedupe_key)
        assert {returned[row.dedupe_key] for returned in results} == {row.pk}
    assert not Job.objects.filter(pk__in=old.values(), window_dedupe_key__isnull=False).exists()
