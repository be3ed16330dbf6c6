"""Worker pools and time limits with real ``runjobs`` processes: the process pool's
hard and soft limits, dead and recycled children, a SIGKILLed parent; the thread
pool's promise that a run past its timeout never overlaps a retry of its job."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time

import pytest
from django.db.models import Count

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.factories import JobFactory
from tests.processes import Runjobs
from tests.reliability import jobs as rel

from .conftest import marks, max_overlap, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A lease of 5 s: a heartbeat held up by a busy machine must not lose a live run's lease.
FAST = {"LEASE": 5, "POLL_INTERVAL": 0.2}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def ended(job: Job, timeout: float = 30) -> Job:
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).exists(),
        timeout=timeout,
    )
    return Job.objects.get(pk=job.pk)


def test_a_handler_stuck_in_c_code_is_killed_at_its_timeout_and_retried_by_policy(runjobs):
    """timeout=2, retries=1: each attempt's child is killed (the C sleep never returns),
    the job fails with TimeLimitExceeded and on_failed is called once; the pool goes on
    with a fresh child."""
    job = jobs.enqueue(rel.c_sleep, {"key": "c"})
    worker = runjobs.start("--pool", "processes", settings=FAST)
    row = ended(job)
    assert row.status == "failed", runjobs.log(worker)
    assert row.attempts == 2
    assert row.last_error.startswith("TimeLimitExceeded: Job rel.pool.c_sleep"), row.last_error
    assert "was killed" in row.last_error
    starts = marks("start")
    assert [key for key, _, _ in starts] == ["c", "c"]
    assert starts[0][1] != starts[1][1]  # a new child for the retry
    assert not any(alive(pid) for _, pid, _ in starts)
    assert marks("end") == []
    # on_failed runs after the row is written: wait for it.
    wait_until(lambda: marks("on_failed"), timeout=10)
    assert [key for key, _, _ in marks("on_failed")] == ["c:TimeLimitExceeded"]
    after = jobs.enqueue(rel.tracked, {"key": "after"})
    assert ended(after).status == "succeeded"
    assert runjobs.stop(worker) == 0


def test_a_child_that_exits_fails_its_attempt_naming_the_status_and_is_replaced(runjobs):
    dies = jobs.enqueue(rel.exits, {"key": "x", "status": 7})
    worker = runjobs.start("--pool", "processes", settings=FAST)
    row = ended(dies)
    assert row.status == "failed"
    assert row.last_error.startswith("ChildDied: Job rel.pool.exits"), row.last_error
    assert "exited with status 7" in row.last_error
    after = jobs.enqueue(rel.tracked, {"key": "after"})
    assert ended(after).status == "succeeded"
    [(_, died_pid, _)] = marks("start")[:1]
    assert marks("end")[0][1] != died_pid
    assert runjobs.stop(worker) == 0


def test_a_leaking_child_is_replaced_past_max_memory_and_after_max_jobs(runjobs):
    """Each job keeps 40 MB more: past --max-memory-per-child 100 the child is
    replaced, so no child ever holds more than one job's leak over the limit."""
    leaking = [jobs.enqueue(rel.leaks, {"key": f"l{i}", "megabytes": 40}) for i in range(6)]
    worker = runjobs.start("--pool", "processes", "--max-memory-per-child", "100", settings=FAST)
    for job in leaking:
        assert ended(job).status == "succeeded"
    pids = [pid for _, pid, _ in marks("start")]
    runs_per_child = [pids.count(pid) for pid in dict.fromkeys(pids)]
    assert len(runs_per_child) >= 2, pids
    assert max(runs_per_child) <= 3, pids  # 3 x 40 MB passes 100 MB with any baseline
    assert "--max-memory-per-child" in runjobs.log(worker)
    assert runjobs.stop(worker) == 0

    quick_jobs = [jobs.enqueue(rel.tracked, {"key": f"t{i}"}) for i in range(5)]
    worker = runjobs.start("--pool", "processes", "--max-jobs-per-child", "2", settings=FAST)
    for job in quick_jobs:
        assert ended(job).status == "succeeded"
    pids = [pid for key, pid, _ in marks("start") if key.startswith("t")]
    assert [pids.count(pid) for pid in dict.fromkeys(pids)] == [2, 2, 1]
    assert runjobs.stop(worker) == 0


def test_soft_timeout_raises_in_the_handler_which_cleans_up(tmp_path):
    """rel.pool.soft (tests/pool_jobs): soft_timeout=1 interrupts its 8 s sleep."""
    runjobs = Runjobs(tmp_path, "tests.pool_jobs.settings")
    job = JobFactory(name="rel.pool.soft", payload={"key": "s"}, max_attempts=1)
    worker = runjobs.start("--pool", "processes", settings=FAST)
    row = ended(job)
    assert row.status == "failed", runjobs.log(worker)
    assert row.last_error.startswith("SoftTimeLimitExceeded"), row.last_error
    assert "time.sleep(8)" in row.traceback  # the child's traceback crossed over
    assert [key for key, _, _ in marks("cleanup")] == ["s"]
    assert runjobs.stop(worker) == 0
    runjobs.stop_all()


def test_sigkill_of_the_parent_leaves_no_child_running(runjobs):
    job = jobs.enqueue(rel.c_sleep, {"key": "orphan"})
    worker = runjobs.start("--pool", "processes", settings=FAST)
    [(_, child_pid, _)] = wait_until(lambda: marks("start"), timeout=30)
    assert alive(child_pid)
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    wait_until(lambda: not alive(child_pid), timeout=5)
    assert Job.objects.get(pk=job.pk).status == "running"  # its lease expires


def test_sigterm_drains_then_kills_and_gives_back(runjobs):
    """A child finishes a short job within the shutdown timeout; a stuck one is killed
    after it and its job goes back to pending (no attempt used up)."""
    quick = jobs.enqueue(rel.tracked, {"key": "q", "seconds": 1})
    stuck = jobs.enqueue(rel.c_sleep_long, {"key": "stuck"})
    worker = runjobs.start(
        "--pool",
        "processes",
        "--concurrency",
        "2",
        "--shutdown-timeout",
        "6",
        settings={**FAST, "PREFETCH": 1},
    )
    wait_until(lambda: len(marks("start")) == 2, timeout=30)
    started = time.monotonic()
    assert runjobs.stop(worker, timeout=30) == 0, runjobs.log(worker)
    assert time.monotonic() - started < 25
    assert Job.objects.get(pk=quick.pk).status == "succeeded"
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == ("pending", 0), runjobs.log(worker)
    assert not any(alive(pid) for _, pid, _ in marks("start"))


def test_a_thread_pool_run_past_its_timeout_never_overlaps_another_run_of_its_job(runjobs):
    """timeout=1 with a 5 s lease, a handler that sleeps 10 s, two workers of two slots
    each: the overrunning run keeps its lease, so no second run of the job starts while
    it executes; its attempt fails with TimeLimitExceeded and the retry runs. Before,
    the lease was lost one lease after the timeout and the other worker ran the retry
    beside the first run."""
    job = jobs.enqueue(rel.overruns, {"key": "o", "seconds": 10})
    workers = [
        runjobs.start("--pool", "threads", "--concurrency", "2", settings=FAST) for _ in range(2)
    ]
    row = ended(job, timeout=60)
    wait_until(lambda: len(marks("end")) == 2, timeout=10)
    ends = [at for _, _, at in marks("end")]
    starts = [at for _, _, at in marks("start")]
    assert max_overlap(zip(starts, ends, strict=True)) == 1, runjobs.logs()
    assert starts[1] >= ends[0]
    assert row.status == "failed" and row.attempts == 2
    assert row.last_error.startswith("TimeLimitExceeded"), row.last_error
    for worker in workers:
        assert runjobs.stop(worker) == 0


@pytest.mark.parametrize(
    ("pool", "handler"),
    [
        ("threads", rel.short_timeout),
        ("threads", rel.async_short_timeout),
        ("asyncio", rel.short_timeout),
        ("processes", rel.short_timeout),
    ],
    ids=["threads-sync", "threads-async", "asyncio-sync", "processes-sync"],
)
def test_a_run_past_a_timeout_shorter_than_a_heartbeat_fails_in_every_pool(runjobs, pool, handler):
    """timeout=1, a handler that returns a value after 3 s, the default 30 s lease: the
    heartbeat (every 10 s) never sees the overrun, yet the run fails with
    TimeLimitExceeded, its value not kept. Before, the thread pool (and the asyncio
    pool's sync handlers) recorded "succeeded in 3.0s"; the process pool kills the
    child at the timeout."""
    job = jobs.enqueue(handler, {"key": "late", "seconds": 3})
    worker = runjobs.start("--pool", pool, "--concurrency", "1", settings={"POLL_INTERVAL": 0.2})
    row = ended(job, timeout=120)  # a busy machine can take most of it to start the worker
    assert row.status == "failed", runjobs.log(worker)
    assert row.attempts == 1
    assert row.result is None
    assert row.last_error.startswith(
        f"TimeLimitExceeded: Job {handler.name} #{job.pk} ran past its timeout of 1s"
    ), row.last_error
    if pool != "processes":  # a thread cannot be stopped: it ran to its end
        assert "(it returned after 3." in row.last_error, row.last_error
        assert [key for key, _, _ in marks("end")] == ["late"]
    assert "succeeded" not in runjobs.log(worker)
    assert runjobs.stop(worker) == 0


def test_the_asyncio_pool_runs_many_async_handlers_at_once_and_cancels_at_the_timeout(runjobs):
    """300 handlers awaiting 1 s each, one process at --concurrency 300, plus one that
    awaits past its 2 s timeout (its task is cancelled: TimeLimitExceeded) and a sync
    handler (the bounded executor). Each runs once; the burst ends when all are done."""
    jobs.enqueue_many(rel.async_sleeps, [{"key": f"a{i}", "seconds": 1} for i in range(300)])
    late = jobs.enqueue(rel.async_sleeps, {"key": "late", "seconds": 30})
    sync = jobs.enqueue(rel.tracked, {"key": "sync"})
    worker = runjobs.start("--pool", "asyncio", "--concurrency", "300", "--burst", settings=FAST)
    assert worker.wait(120) == 0, runjobs.log(worker)
    counts = dict(
        Job.objects.filter(name="rel.pool.async_sleeps", attempts=1)
        .values_list("status")
        .annotate(n=Count("id"))
    )
    assert counts == {"succeeded": 300, "failed": 1}, runjobs.log(worker)
    row = Job.objects.get(pk=late.pk)
    assert row.last_error.startswith("TimeLimitExceeded"), row.last_error
    assert row.finished_at - row.started_at < dt.timedelta(seconds=15)
    assert Job.objects.get(pk=sync.pk).status == "succeeded"


def test_a_thread_pool_worker_exits_with_status_3_when_a_handler_stays_past_the_grace(runjobs):
    """TIMEOUT_GRACE=1: a handler still running 1 s past its 1 s timeout makes the worker
    exit with status 3 (for its supervisor to restart it); until then it kept the lease,
    and the job was run once."""
    job = jobs.enqueue(rel.overruns, {"key": "stuck", "seconds": 60})
    worker = runjobs.start("--pool", "threads", settings={**FAST, "TIMEOUT_GRACE": 1})
    assert worker.wait(60) == 3, runjobs.log(worker)
    log = runjobs.log(worker)
    assert f"rel.pool.overruns #{job.pk}; exiting with status 3" in log
    assert [key for key, _, _ in marks("start")] == ["stuck"]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("running", 1)  # back after one lease
