"""The asyncio pool's fault paths with real ``runjobs --pool asyncio`` processes: its
handlers' connections after the database cut them, a graceful stop (or the end of a
burst) after a handler overran its timeout, and a handler's own ``TimeoutError``."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db import connection

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import marks, postgres_only, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A lease of 5 s: a heartbeat held up by a busy machine must not lose a live run's lease.
FAST = {"LEASE": 5, "POLL_INTERVAL": 0.2}
ENDED = ("succeeded", "failed", "cancelled")


def run_round(prefix: str, count: int) -> list[Job]:
    """``count`` sync and ``count`` async jobs that query the database; their rows once
    every one has ended."""
    sync = jobs.enqueue_many(rel.queries, [{"key": f"{prefix}-s{i}"} for i in range(count)])
    async_ = jobs.enqueue_many(rel.async_queries, [{"key": f"{prefix}-a{i}"} for i in range(count)])
    ids = [job.pk for job in [*sync, *async_]]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status__in=ENDED).count() == len(ids),
        timeout=120,
        interval=0.2,
    )
    return list(Job.objects.filter(pk__in=ids).order_by("pk"))


def kill_other_sessions() -> int:
    """pg_terminate_backend every session of this test database but this one's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@postgres_only
@pytest.mark.parametrize("health_checks", [False, True], ids=["default", "conn-health-checks"])
def test_the_asyncio_pool_renews_its_handlers_connections_after_the_database_cut_them(
    runjobs, health_checks
):
    """Sync handlers (the executor's threads) and async ones (the async ORM's thread)
    query the database; then every session of the worker is terminated. Later jobs
    succeed: each handler thread's connection is closed before and after a job when it
    is unusable (or checked first, with CONN_HEALTH_CHECKS, so that no run fails). Before,
    nothing closed them: every later run failed with OperationalError until the worker
    was restarted."""
    env = {"CRONQUEUE_TEST_CONN_HEALTH_CHECKS": "1"} if health_checks else {}
    worker = runjobs.start("--pool", "asyncio", "--concurrency", "4", settings=FAST, env=env)
    before = run_round("before", 8)
    assert {row.status for row in before} == {"succeeded"}, runjobs.log(worker)
    assert kill_other_sessions() >= 2
    after = run_round("after", 8)
    failed = [(row.name, row.attempts, row.last_error[:300]) for row in after]
    assert {row.status for row in after} == {"succeeded"}, (failed, runjobs.log(worker)[-5000:])
    if health_checks:  # a connection is checked before a job uses it: no run fails
        assert {row.attempts for row in after} == {1}, failed
    assert worker.poll() is None, runjobs.log(worker)
    assert runjobs.stop(worker) == 0, runjobs.log(worker)


def release(key: str) -> None:
    SideEffect.objects.create(key=key, pid=os.getpid())


def overrun_then_hold(runjobs, *args: str):
    """A worker running an async job that awaits its release, beside a sync handler that
    overran its 1 s timeout and has returned since (its run failed)."""
    overran = jobs.enqueue(rel.hangs_until_released, {"key": "overran"})
    held = jobs.enqueue(rel.async_held, {"key": "held"})
    worker = runjobs.start("--pool", "asyncio", "--concurrency", "4", *args, settings=FAST)
    wait_until(lambda: marks("timed_out"), timeout=120)  # the heartbeat saw the overrun
    wait_until(lambda: "held" in [key for key, _, _ in marks("start")], timeout=120)
    release("release")  # the overrunning handler returns
    wait_until(lambda: Job.objects.get(pk=overran.pk).status == "failed", timeout=120)
    assert Job.objects.get(pk=overran.pk).last_error.startswith("TimeLimitExceeded")
    return worker, held


def assert_still_held(runjobs, worker, held: Job) -> None:
    """The worker waits for its running job (3 s is far inside its 30 s shutdown
    timeout: a worker that stopped waiting has exited by then)."""
    time.sleep(3)
    assert worker.poll() is None, runjobs.log(worker)
    assert Job.objects.get(pk=held.pk).status == "running"


def test_sigterm_after_an_overrun_still_waits_for_the_running_async_job(runjobs):
    """SIGTERM with --shutdown-timeout 30 after a sync handler overran its timeout: the
    worker waits for its running async job, which finishes and succeeds, then exits 0.
    Before, an overrun marked the pool's one slot as stuck for good: the worker exited at
    once and the job was dropped (later failed as lost)."""
    worker, held = overrun_then_hold(runjobs, "--shutdown-timeout", "30")
    worker.send_signal(signal.SIGTERM)
    assert_still_held(runjobs, worker, held)
    release("release:held")
    assert worker.wait(120) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=held.pk)
    assert (row.status, row.attempts) == ("succeeded", 1), runjobs.log(worker)


def test_a_burst_after_an_overrun_still_waits_for_the_running_async_job(runjobs):
    """--burst after a sync handler overran its timeout: the burst ends only once the
    running async job has finished. Before, it ended at once and dropped the job."""
    worker, held = overrun_then_hold(runjobs, "--burst")
    assert_still_held(runjobs, worker, held)
    release("release:held")
    assert worker.wait(120) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=held.pk)
    assert (row.status, row.attempts) == ("succeeded", 1), runjobs.log(worker)


@pytest.mark.parametrize("pool", ["asyncio", "threads"])
@pytest.mark.parametrize("handler", [rel.upstream_timeout, rel.async_upstream_timeout])
def test_a_handlers_own_timeout_error_is_retried_by_retry_on_not_a_time_limit(
    runjobs, pool, handler
):
    """A handler whose upstream call raised TimeoutError long before its 30 s timeout
    (``asyncio.wait_for`` inside it, a client's own deadline) fails with that error, and
    ``retry_on=(TimeoutError,)`` retries it: three attempts, the last error its own.
    Before, the asyncio pool recorded it as its time limit (TimeLimitExceeded, "ran past
    its timeout of 30s"), which retry_on does not list: failed at the first attempt."""
    job = jobs.enqueue(handler, {"key": "upstream"})
    worker = runjobs.start("--pool", pool, "--concurrency", "2", "--burst", settings=FAST)
    assert worker.wait(120) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("failed", 3), (row.last_error, runjobs.log(worker))
    assert row.last_error.startswith(("UpstreamTimedOut", "TimeoutError")), row.last_error
    assert "TimeLimitExceeded" not in row.last_error
    assert len(marks("start")) == 3
