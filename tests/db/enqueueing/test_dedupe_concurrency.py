"""dedupe_key (SPEC section 3) and dedupe_for (section 9) hold under concurrent enqueue
from many processes."""

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django import db
from django.db import connection, transaction
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[3]
PROCESSES = 8
KEYS = 20
HOUR = dt.timedelta(hours=1)

# Each child sets Django up on the test database, connects, says "ready", waits for
# "go" on stdin (so that all of them start together), enqueues every key in its own
# random order and prints which job each key returned.
CHILD = """
import datetime as dt, json, random, sys
import django

django.setup()
from django.db import connection, transaction
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


THREADS = 6
ROUNDS = 12


def race_for_one_key(key: str, *, in_transaction: bool) -> tuple[list[int], list[BaseException]]:
    """THREADS threads enqueue ``key`` at once; the job each got back, and the errors."""
    barrier = threading.Barrier(THREADS)
    returned: list[int] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            barrier.wait(timeout=30)
            with transaction.atomic() if in_transaction else contextlib.nullcontext():
                job = jobs.enqueue("testapp.record", {"key": key}, dedupe_key=key, dedupe_for=HOUR)
            returned.append(job.pk)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.connections.close_all()

    threads = [threading.Thread(target=enqueue) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return returned, errors


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_transaction", [True, False], ids=["in_atomic", "autocommit"])
def test_threads_racing_for_a_key_whose_span_ended_all_get_the_one_new_job(in_transaction):
    """Six threads enqueue one key whose last job ended and whose span has passed, twelve
    rounds, inside their own transactions or not: each round creates one new job and every
    thread gets it back, never a database error (on MariaDB the losers of the race used to
    deadlock on the key)."""
    past = timezone.now() - 2 * HOUR
    for round_ in range(ROUNDS):
        key = f"race-{round_}"
        old = JobFactory(
            status="succeeded",
            dedupe_key=key,
            window_dedupe_key=key,
            dedupe_until=past + HOUR,
            created_at=past,
            finished_at=past,
        )
        returned, errors = race_for_one_key(key, in_transaction=in_transaction)
        assert errors == []
        new = Job.objects.filter(dedupe_key=key).exclude(pk=old.pk)
        assert [row.pk for row in new] == [returned[0]]
        assert set(returned) == {returned[0]} and len(returned) == THREADS
