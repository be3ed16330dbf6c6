"""Controlling running work with real ``runjobs`` processes (SPEC section 8): cancel of
a running job (sync and async handlers, during a SIGTERM drain, and a handler that
finishes anyway), snooze, progress written by the heartbeat, pauses.

The handlers are in tests/reliability/jobs.py (``rel.ctl.*``); the workers run with
tests.reliability.worker_settings, which installs that module as an app's jobs.py.
A handler records the instant it saw its cancel with this host's ``time.time()``, the
clock the test reads before asking for the cancel: one clock, no database time involved.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.db.notify import CANCEL_CHANNEL, STOP_CHECK_INTERVAL
from django_cronqueue.models import Job, Pause
from tests.processes import ROOT, Runjobs, wait_until
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WORKER_SETTINGS = "tests.reliability.worker_settings"
POSTGRES = connection.vendor == "postgresql"
postgres_only = pytest.mark.skipif(not POSTGRES, reason="LISTEN/NOTIFY is PostgreSQL's")

# On PostgreSQL a cancel reaches the handler by NOTIFY: a lease of 30 s (a heartbeat every
# 10 s) leaves no other way to see it within the bound. Elsewhere the heartbeat brings
# it, every LEASE / 3 = 1 s.
LEASE = 30.0 if POSTGRES else 3.0
SETTINGS = {"LEASE": LEASE, "POLL_INTERVAL": 0.2}
# The handler polls every 5 ms; the margin covers that and a busy machine's scheduling.
MARGIN = 1.0
NOTICE_BOUND = (1.0 if POSTGRES else LEASE / 3) + MARGIN
CANCELLED = "django_cronqueue.exceptions.JobCancelled"


@pytest.fixture
def runjobs(tmp_path):
    runner = Runjobs(tmp_path, WORKER_SETTINGS)
    yield runner
    runner.stop_all()


def marks(kind: str) -> list[tuple[str, int, dt.datetime]]:
    """(key, pid, created_at) of every ``<kind>:<key>`` mark, oldest first."""
    prefix = f"{kind}:"
    return [
        (key[len(prefix) :], pid, created_at)
        for key, pid, created_at in SideEffect.objects.filter(key__startswith=prefix)
        .order_by("id")
        .values_list("key", "pid", "created_at")
    ]


def started(*keys: str) -> bool:
    return {key for key, _, _ in marks("start")} >= set(keys)


def seen_at(key: str) -> float | None:
    """When the handler of ``key`` saw its cancel (``time.time()``), or None."""
    for mark, _, _ in marks("seen"):
        mark_key, _, at = mark.rpartition("@")
        if mark_key == key:
            return float(at)
    return None


def listening(count: int) -> bool:
    """``count`` worker listeners wait on the cancel channel of this database (the
    listener's last statement is its LISTEN)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s",
            [f"LISTEN {CANCEL_CHANNEL}"],
        )
        return cursor.fetchone()[0] >= count


def start_worker(runjobs: Runjobs, *args: str, settings: dict | None = None, **kwargs: Any):
    worker = runjobs.start(*args, settings=settings or SETTINGS, **kwargs)
    if POSTGRES:
        wait_until(lambda: listening(len(runjobs.processes)), timeout=30)
    return worker


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def assert_cancelled_by(row: Job, by: str, reason: str) -> None:
    """Cancelled while running, once: no retry, no on_failed, last_error says who and when."""
    assert row.status == "cancelled", (row.status, row.last_error)
    assert row.attempts == 1
    assert row.locked_until is None and row.lock_token is None
    assert row.cancel_requested_by == by
    assert row.last_error == (
        f"cancelled while running: cancel requested by {by} at "
        f"{row.cancel_requested_at.isoformat()}: {reason}"
    )
    assert row.exception_class_path == CANCELLED
    assert "JobCancelled" in row.traceback
    assert not marks("on_failed")
    assert not marks("end")  # the handler stopped early


# --- cancel of a running job ------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "pool"),
    [(rel.cooperative, "threads"), (rel.async_sleeper, "threads"), (rel.cooperative, "processes")],
    ids=["sync", "async", "sync-processes"],
)
def test_a_running_job_whose_cancel_is_requested_ends_cancelled_without_retry(
    runjobs, handler, pool
):
    worker = start_worker(runjobs, "--concurrency", "1", "--pool", pool)
    job = jobs.enqueue(handler, {"key": "victim"})
    wait_until(lambda: started("victim"), timeout=30)

    asked = time.time()
    result = jobs.cancel(job.pk, reason="no longer needed", by="operator alice")
    assert result.outcome == "requested", result.message
    wait_until(lambda: status(job) == "cancelled", timeout=30)

    latency = seen_at("victim") - asked  # type: ignore[operator]
    assert 0 <= latency <= NOTICE_BOUND, latency
    assert_cancelled_by(Job.objects.get(pk=job.pk), "operator alice", "no longer needed")
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
    assert "cancelled while running (requested by operator alice)" in runjobs.log(worker)


def test_a_cancel_during_the_sigterm_drain_reaches_the_running_handler(runjobs):
    worker = start_worker(runjobs, "--concurrency", "1", "--shutdown-timeout", "120")
    job = jobs.enqueue(rel.cooperative, {"key": "draining"})
    wait_until(lambda: started("draining"), timeout=30)
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: "got SIGTERM" in runjobs.log(worker), timeout=30)
    # Long enough for every helper that stops at the signal to have stopped (the
    # listener looks every STOP_CHECK_INTERVAL): the cancel must come by a path that
    # lasts the whole drain.
    time.sleep(2 * STOP_CHECK_INTERVAL + 0.5)
    assert worker.poll() is None  # draining: the handler still runs

    asked = time.time()
    assert jobs.cancel(job.pk, reason="shutting down", by="deploy").outcome == "requested"
    assert worker.wait(60) == 0, runjobs.log(worker)  # not the 120 s of the shutdown timeout
    latency = seen_at("draining") - asked  # type: ignore[operator]
    assert 0 <= latency <= NOTICE_BOUND, latency
    assert_cancelled_by(Job.objects.get(pk=job.pk), "deploy", "shutting down")


def test_a_handler_that_returns_normally_after_a_cancel_request_succeeds(runjobs):
    worker = start_worker(runjobs, "--concurrency", "1")
    job = jobs.enqueue(rel.finishes_anyway, {"key": "stubborn"})
    wait_until(lambda: started("stubborn"), timeout=30)
    assert jobs.cancel(job.pk, by="operator bob").outcome == "requested"
    wait_until(lambda: status(job) == "succeeded", timeout=30)

    row = Job.objects.get(pk=job.pk)
    assert row.result == {"saw_cancel": True}
    assert row.attempts == 1
    assert row.last_error == "" and row.exception_class_path == ""
    assert row.cancel_requested_by == "operator bob"  # the request stays on record
    assert seen_at("stubborn") is not None
    assert not marks("on_failed")
    assert runjobs.stop(worker) == 0, runjobs.log(worker)


@postgres_only
def test_cancel_latency_on_postgresql_p95_within_one_second(runjobs):
    """50 cancels of running jobs, each from the moment before ``jobs.cancel()`` (so
    including its own statements) to the instant the handler saw ``cancel_requested``."""
    workers = [start_worker(runjobs, "--concurrency", "5") for _ in range(2)]
    latencies = []
    for batch in range(5):
        keys = [f"b{batch}-{i}" for i in range(10)]
        rows = jobs.enqueue_many(rel.cooperative, [{"key": key} for key in keys])
        wait_until(lambda keys=keys: started(*keys), timeout=60)
        for key, row in zip(keys, rows, strict=True):
            asked = time.time()
            assert jobs.cancel(row.pk, by="latency test").outcome == "requested"
            seen = wait_until(lambda key=key: seen_at(key), timeout=30, interval=0.01)
            latencies.append(seen - asked)
        ids = [row.pk for row in rows]
        wait_until(lambda ids=ids: Job.objects.filter(pk__in=ids, status="cancelled").count() == 10)

    assert not Job.objects.exclude(status="cancelled").exists()
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    ordered = sorted(latencies)
    p50 = ordered[math.ceil(0.50 * len(ordered)) - 1]
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
    figures = (
        f"PostgreSQL cancel latency over {len(ordered)} running jobs: "
        f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms"
    )
    print(figures)
    record = ROOT / ".repeat" / "cancel-latency-postgres.txt"
    record.parent.mkdir(exist_ok=True)
    with Path(record).open("a") as file:
        file.write(f"{timezone.now().isoformat(timespec='seconds')} {figures}\n")
    assert p95 <= 1.0, figures
    for worker in workers:
        assert runjobs.stop(worker) == 0, runjobs.log(worker)


# --- snooze ---------------------------------------------------------------------------


def test_a_snoozed_job_is_pending_with_its_attempt_given_back_then_runs_after_the_delay(runjobs):
    delay = 2.5
    # The first snooze also pauses the job's name, so the test can look at the pending
    # row before it runs again, however slow this machine is.
    worker = start_worker(runjobs, "--concurrency", "1")
    job = jobs.enqueue(rel.snoozer, {"key": "sleepy", "times": 2, "seconds": delay, "pause": True})
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="pending", snoozes=1).exists())
    seen_pending = timezone.now()

    row = Job.objects.get(pk=job.pk)
    [(_, _, snoozed_at)] = marks("snooze")
    assert (row.attempts, row.max_attempts) == (0, 1)  # the single attempt given back
    assert row.locked_until is None and row.lock_token is None and row.worker_id == ""
    assert row.started_at is None
    # Due ``delay`` after the snooze, which came after the handler's mark and before this
    # test saw the row pending (the worker's clock is corrected to the database's).
    delta = dt.timedelta(seconds=delay)
    tolerance = dt.timedelta(seconds=0.5)
    assert snoozed_at + delta - tolerance <= row.run_at <= seen_pending + delta + tolerance
    first_due = row.run_at
    assert jobs.resume(name=rel.snoozer)

    wait_until(lambda: status(job) == "succeeded", timeout=30)
    row = Job.objects.get(pk=job.pk)
    assert (row.attempts, row.snoozes) == (1, 2)
    assert row.result == {"runs": 3, "attempt": 1}
    starts = [at for _, _, at in marks("start")]
    snoozes = [at for _, _, at in marks("snooze")]
    assert len(starts) == 3 and len(snoozes) == 2
    # Each run after a snooze came once it was due, not before.
    assert starts[1] >= first_due - tolerance
    assert starts[2] >= snoozes[1] + delta - tolerance
    assert runjobs.stop(worker) == 0, runjobs.log(worker)


# --- progress -------------------------------------------------------------------------

WRITES_TABLE = "ctl_writes"


def _count_writes_sql() -> tuple[list[str], list[str]]:
    """Statements that record, in order, each write of ``Job.progress`` (with the row's
    status) and each heartbeat (a worker's ``last_seen`` update); and their undoing."""
    job, worker = Job._meta.db_table, "django_cronqueue_worker"
    if connection.vendor == "postgresql":
        create = [
            f"CREATE TABLE {WRITES_TABLE} (id bigserial PRIMARY KEY, kind text NOT NULL, "
            "status text, progress text)",
            "CREATE FUNCTION ctl_progress_written() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN INSERT INTO {WRITES_TABLE} (kind, status, progress) "
            "VALUES ('progress', NEW.status, NEW.progress::text); RETURN NEW; END $$",
            f"CREATE TRIGGER ctl_progress AFTER UPDATE OF progress ON {job} "
            "FOR EACH ROW EXECUTE FUNCTION ctl_progress_written()",
            "CREATE FUNCTION ctl_beat() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN INSERT INTO {WRITES_TABLE} (kind) VALUES ('beat'); RETURN NEW; END $$",
            f"CREATE TRIGGER ctl_beat AFTER UPDATE OF last_seen ON {worker} "
            "FOR EACH ROW EXECUTE FUNCTION ctl_beat()",
        ]
        drop = [
            f"DROP TRIGGER IF EXISTS ctl_progress ON {job}",
            f"DROP TRIGGER IF EXISTS ctl_beat ON {worker}",
            "DROP FUNCTION IF EXISTS ctl_progress_written()",
            "DROP FUNCTION IF EXISTS ctl_beat()",
            f"DROP TABLE IF EXISTS {WRITES_TABLE}",
        ]
    elif connection.vendor == "sqlite":
        create = [
            f"CREATE TABLE {WRITES_TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "kind TEXT NOT NULL, status TEXT, progress TEXT)",
            f"CREATE TRIGGER ctl_progress AFTER UPDATE OF progress ON {job} BEGIN "
            f"INSERT INTO {WRITES_TABLE} (kind, status, progress) "
            "VALUES ('progress', NEW.status, NEW.progress); END",
            f"CREATE TRIGGER ctl_beat AFTER UPDATE OF last_seen ON {worker} BEGIN "
            f"INSERT INTO {WRITES_TABLE} (kind) VALUES ('beat'); END",
        ]
        drop = [
            "DROP TRIGGER IF EXISTS ctl_progress",
            "DROP TRIGGER IF EXISTS ctl_beat",
            f"DROP TABLE IF EXISTS {WRITES_TABLE}",
        ]
    else:  # MariaDB has no UPDATE OF: every change of the column (each write changes it)
        create = [
            f"CREATE TABLE {WRITES_TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
            "kind VARCHAR(20) NOT NULL, status VARCHAR(16), progress LONGTEXT)",
            f"CREATE TRIGGER ctl_progress AFTER UPDATE ON {job} FOR EACH ROW BEGIN "
            "IF NOT (OLD.progress <=> NEW.progress) THEN "
            f"INSERT INTO {WRITES_TABLE} (kind, status, progress) "
            "VALUES ('progress', NEW.status, NEW.progress); END IF; END",
            f"CREATE TRIGGER ctl_beat AFTER UPDATE ON {worker} FOR EACH ROW BEGIN "
            "IF NOT (OLD.last_seen <=> NEW.last_seen) THEN "
            f"INSERT INTO {WRITES_TABLE} (kind) VALUES ('beat'); END IF; END",
        ]
        drop = [
            "DROP TRIGGER IF EXISTS ctl_progress",
            "DROP TRIGGER IF EXISTS ctl_beat",
            f"DROP TABLE IF EXISTS {WRITES_TABLE}",
        ]
    return create, drop


@pytest.fixture
def counted_writes():
    """Triggers on the test database record every progress write and every heartbeat;
    yields a function returning them, in order, as (kind, status, progress text)."""
    create, drop = _count_writes_sql()
    with connection.cursor() as cursor:
        for statement in drop + create:
            cursor.execute(statement)

    def events() -> list[tuple[str, str | None, str | None]]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT kind, status, progress FROM {WRITES_TABLE} ORDER BY id")
            return list(cursor.fetchall())

    yield events
    with connection.cursor() as cursor:
        for statement in drop:
            cursor.execute(statement)


def test_progress_set_thousands_of_times_is_written_at_most_once_per_heartbeat(
    runjobs, counted_writes
):
    lease = 1.5  # a heartbeat every 0.5 s
    worker = start_worker(
        runjobs, "--concurrency", "1", settings={"LEASE": lease, "POLL_INTERVAL": 0.2}
    )
    job = jobs.enqueue(rel.progress, {"key": "busy", "writes": 2, "min_calls": 3000})
    wait_until(lambda: status(job) == "succeeded", timeout=60)
    row = Job.objects.get(pk=job.pk)
    calls = row.result["calls"]
    assert calls > 3000 and row.result["stored"] >= 2

    events = counted_writes()
    while_running = [progress for kind, state, progress in events if state == "running"]
    at_completion = [progress for kind, state, progress in events if state == "succeeded"]
    assert len(while_running) >= 2  # the handler waited for two heartbeat writes
    # Between two heartbeats (each writes progress, then its last_seen), at most one
    # progress write of the job while it runs.
    per_beat = [0]
    for kind, state, _ in events:
        if kind == "beat":
            per_beat.append(0)
        elif state == "running":
            per_beat[-1] += 1
    assert max(per_beat) == 1, per_beat
    # And one at completion, the last value.
    assert len(at_completion) == 1
    last = json.loads(at_completion[0])
    assert (last["done"], last["total"], last["message"]) == (calls, calls, "done")
    assert row.progress == last
    assert runjobs.stop(worker) == 0, runjobs.log(worker)


# --- pauses ---------------------------------------------------------------------------


def test_paused_queue_and_name_stay_pending_while_others_run_until_resumed(runjobs):
    # A long poll interval: on PostgreSQL only a NOTIFY can bring the paused jobs
    # promptly after the resume. Elsewhere the next poll does.
    poll = "60" if POSTGRES else "0.2"
    worker = start_worker(runjobs, "--concurrency", "2", "--poll-interval", poll)
    # A job of the queue is running when the queue is paused: it finishes.
    running = jobs.enqueue(rel.held, {"key": "under-way"}, queue="ctl-paused")
    wait_until(lambda: started("under-way"), timeout=30)
    jobs.pause(queue="ctl-paused", reason="maintenance")
    jobs.pause(name=rel.paused_name)
    # Enqueued first, so they would be claimed before the others if the pause let them.
    held_back = [
        jobs.enqueue(rel.tracked, {"key": f"queue-{i}"}, queue="ctl-paused") for i in range(3)
    ] + [jobs.enqueue(rel.paused_name, {"key": f"name-{i}"}) for i in range(3)]
    others = jobs.enqueue_many(rel.tracked, [{"key": f"other-{i}"} for i in range(6)])
    SideEffect.objects.create(key="release:under-way")
    done = [running.pk, *[job.pk for job in others]]
    wait_until(
        lambda: Job.objects.filter(pk__in=done, status="succeeded").count() == len(done),
        timeout=60,
    )
    for job in held_back:
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.attempts) == ("pending", 0), row.pk
    assert not started(*[f"queue-{i}" for i in range(3)] + [f"name-{i}" for i in range(3)])

    resumed = time.monotonic()
    assert jobs.resume(queue="ctl-paused")
    assert jobs.resume(name=rel.paused_name)
    ids = [job.pk for job in held_back]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status="succeeded").count() == len(ids), timeout=60
    )
    if POSTGRES:
        assert time.monotonic() - resumed < 10, "not woken by the resume's NOTIFY"
    assert not Pause.objects.exists()
    assert runjobs.stop(worker) == 0, runjobs.log(worker)


def test_a_pause_with_until_ends_by_itself(runjobs):
    worker = start_worker(runjobs, "--concurrency", "1")
    until = timezone.now() + dt.timedelta(seconds=3)
    jobs.pause(name=rel.paused_name, until=until, reason="for three seconds")
    job = jobs.enqueue(rel.paused_name, {"key": "later"})
    other = jobs.enqueue(rel.tracked, {"key": "now"})
    wait_until(lambda: status(other) == "succeeded", timeout=30)
    wait_until(lambda: status(job) == "succeeded", timeout=30)  # no resume()

    [ran_at] = [at for key, _, at in marks("start") if key == "later"]
    # Not before the pause's end (the worker's clock is corrected to the database's).
    assert ran_at >= until - dt.timedelta(seconds=0.5)
    assert Job.objects.get(pk=job.pk).attempts == 1
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
