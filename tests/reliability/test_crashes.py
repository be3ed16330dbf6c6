"""Crashes and leases, with real ``runjobs`` processes (SPEC section 5).

Already proven in tests/e2e/test_runjobs.py, not repeated here: a killed worker's job
runs again after its lease (test_a_job_whose_worker_is_killed_runs_again_after_its_lease_expires),
a handler past its timeout fails when it returns and its slot waits for it
(test_a_handler_past_its_timeout_fails_when_it_returns_and_its_slot_waits_for_it), and SIGTERM
lets the running handler finish, gives back unstarted claims and exits 0
(test_sigterm_lets_the_running_handler_finish_gives_back_the_rest_and_exits_0).
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import defaultdict

import pytest
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.housekeeping.maintenance import recover_expired_leases
from django_cronqueue.models import Job, Worker
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import marks, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def worker_pid(worker_id: str) -> int:
    """The pid inside a worker id (``host:pid:xxxxxx``)."""
    return int(worker_id.split(":")[-2])


def test_a_crashed_workers_job_is_back_within_one_lease_even_with_an_hour_timeout(runjobs):
    lease = 2.0
    settings = {"LEASE": lease, "POLL_INTERVAL": 0.2}
    job = jobs.enqueue(rel.hour_long, {"key": "hour", "first": 120, "then": 0})
    doomed = runjobs.start(settings=settings)
    wait_until(lambda: marks("start"), timeout=30)
    # The heartbeat renews the short lease while the handler runs: three leases later
    # the first run still holds the row.
    time.sleep(3 * lease)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("running", 1)
    assert row.locked_until > timezone.now()

    rescuer = runjobs.start(settings=settings)
    wait_until(lambda: Worker.objects.filter(pid=rescuer.pid).exists(), timeout=30)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    killed_at = time.monotonic()
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="succeeded").exists(), timeout=30)
    back_after = time.monotonic() - killed_at
    # Within one lease (plus a poll and scheduling slack), not the hour of its timeout.
    assert back_after < lease + 2.0, back_after
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 2
    assert row.result == {"pid": rescuer.pid, "first_run": False}
    assert "stopped being renewed" in row.last_error
    assert str(doomed.pid) in row.last_error
    assert runjobs.stop(rescuer) == 0, runjobs.log(rescuer)


def test_sigkill_at_random_moments_while_three_workers_drain_500_jobs(runjobs):
    seed = int(os.environ.get("CRONQUEUE_TEST_SEED", time.time()))
    print(f"seed {seed}")  # shown on failure: rerun with CRONQUEUE_TEST_SEED
    rng = random.Random(seed)
    count, max_kills = 500, 8
    # A live worker must never look dead: 3 s leave room for a loaded machine's stalls.
    settings = {"LEASE": 3, "POLL_INTERVAL": 0.2}
    args = ("--concurrency", "2")
    jobs.enqueue_many(
        rel.tracked,
        [{"key": f"j{i}", "seconds": round(rng.uniform(0.02, 0.12), 3)} for i in range(count)],
    )
    workers = [runjobs.start(*args, settings=settings) for _ in range(3)]
    killed: set[int] = set()
    deadline = time.monotonic() + 150
    while len(killed) < max_kills and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.4, 1.4))
        if not Job.objects.exclude(status="succeeded").exists():
            break
        working = set(Worker.objects.values_list("pid", flat=True)) - killed
        candidates = [i for i, w in enumerate(workers) if w.pid in working]
        if not candidates:
            continue
        index = rng.choice(candidates)
        victim = workers[index]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed.add(victim.pid)
        workers[index] = runjobs.start(*args, settings=settings)  # a supervisor restarts it
    assert len(killed) >= 3, "the workers finished before the kills; make the jobs longer"

    wait_until(
        lambda: Job.objects.filter(status="succeeded").count() == count, timeout=150, interval=0.5
    )
    for worker in workers:
        assert runjobs.stop(worker) == 0, runjobs.log(worker)
    assert not Job.objects.exclude(status="succeeded").exists()  # none pending or running

    starts: dict[str, list[int]] = defaultdict(list)
    for key, pid, _ in marks("start"):
        starts[key].append(pid)
    ends: dict[str, list[int]] = defaultdict(list)
    for key, pid, _ in marks("end"):
        ends[key].append(pid)
    rows = {row.payload["key"]: row for row in Job.objects.all()}
    assert len(rows) == count
    rerun = 0
    for key, row in rows.items():
        final_pid = worker_pid(row.worker_id)  # the run that completed (maybe killed after)
        assert ends[key] and ends[key][-1] == final_pid, (key, ends[key], final_pid)
        assert starts[key][-1] == final_pid
        # Every run but the last was cut short by a kill: duplicates (of the start,
        # and of the side effect at the end) come only from workers that died.
        assert set(starts[key][:-1]) <= killed, (key, starts[key], killed)
        assert set(ends[key][:-1]) <= killed, (key, ends[key], killed)
        # attempts count claims; a claim killed before its handler began has no start.
        assert row.attempts >= len(starts[key])
        if row.attempts > 1:
            rerun += 1
            holder = re.search(r"renewed by \S+:(\d+):\w+", row.last_error)
            assert holder and int(holder.group(1)) in killed, row.last_error
        else:
            assert row.last_error == ""
    assert rerun > 0  # some kill landed mid-run
    duplicated = sum(1 for pids in ends.values() if len(pids) > 1)
    print(f"{len(killed)} kills, {rerun} jobs re-run, {duplicated} side effects duplicated")


def test_a_run_that_outlives_its_lease_is_discarded_and_the_row_shows_the_second_run(runjobs):
    """The first worker freezes (SIGSTOP) mid-handler: no heartbeat, its lease expires,
    a second worker runs the job. Thawed, the first finishes and its success is refused."""
    settings = {"LEASE": 1.5, "POLL_INTERVAL": 0.2}
    job = jobs.enqueue(rel.hour_long, {"key": "late", "first": 3, "then": 0.2})
    first = runjobs.start(settings=settings)
    wait_until(lambda: marks("start"), timeout=30)
    first.send_signal(signal.SIGSTOP)
    try:
        second = runjobs.start(settings=settings)
        wait_until(lambda: Job.objects.filter(pk=job.pk, status="succeeded").exists(), timeout=30)
    finally:
        first.send_signal(signal.SIGCONT)
    wait_until(lambda: len(marks("end")) == 2, timeout=15)  # the first run ends, late
    wait_until(lambda: "Discarded the success" in runjobs.log(first), timeout=15)

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("succeeded", 2)
    assert row.result == {"pid": second.pid, "first_run": False}
    assert worker_pid(row.worker_id) == second.pid
    assert [pid for _, pid, _ in marks("end")] == [second.pid, first.pid]
    assert runjobs.stop(first) == 0, runjobs.log(first)
    assert runjobs.stop(second) == 0, runjobs.log(second)


def stop_with_jobs_claimed_in_advance(runjobs, settings, attempt, pool="threads"):
    """Start a worker that claims a slow job and three quick ones together (claims grow
    1, 2, 4 while jobs are quick) and freeze it (SIGSTOP) in the slow one's handler.
    Returns (worker, ids of the four), or None when a warm-up job happened not to be quick
    (a busy machine) so the slow job was claimed alone: the worker then drained them."""
    for _ in range(3):
        jobs.enqueue("testapp.noop")
    slow = jobs.enqueue(rel.hour_long, {"key": f"slow-{attempt}", "first": 2, "then": 0})
    quick = [jobs.enqueue(rel.tracked, {"key": f"quick-{attempt}-{i}"}) for i in range(3)]
    ids = [slow.pk, *(job.pk for job in quick)]
    worker = runjobs.start("--burst", "--concurrency", "1", "--pool", pool, settings=settings)
    wait_until(lambda: marks("start"), timeout=30)  # the slow handler started
    worker.send_signal(signal.SIGSTOP)
    claimed = Job.objects.filter(pk__in=ids, status="running")
    assert {worker_pid(row.worker_id) for row in claimed} == {worker.pid}
    if claimed.count() == 4:
        return worker, ids
    worker.send_signal(signal.SIGCONT)
    assert worker.wait(60) == 0, runjobs.log(worker)
    SideEffect.objects.all().delete()
    return None


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_stopped_past_its_leases_never_starts_the_jobs_it_claimed_in_advance(
    runjobs, pool
):
    """A worker claimed a slow job and three quick ones together and froze (SIGSTOP) in
    the slow one's handler for longer than a lease. A second worker takes all four over
    and runs them. Thawed, the first finds the leases of the three it had not started
    lost and starts none of them: each quick job runs exactly once, by the second. In
    the process pool only the parent freezes: its child, which got the four together,
    ends the slow job and must not start the quick ones on its own."""
    settings = {"LEASE": 1.5, "POLL_INTERVAL": 0.2}
    for attempt in range(5):
        stopped = stop_with_jobs_claimed_in_advance(runjobs, settings, attempt, pool)
        if stopped is not None:
            break
    assert stopped is not None, "the slow job was never claimed with the quick ones"
    first, ids = stopped
    try:
        second = runjobs.start(settings=settings)
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, status="succeeded").count() == 4, timeout=60
        )
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(60) == 0, runjobs.log(first)  # --burst: it drained what it could

    starts = [(key, pid) for key, pid, _ in marks("start") if key.startswith("quick-")]
    assert sorted(starts) == [(f"quick-{attempt}-{i}", second.pid) for i in range(3)], runjobs.log(
        first
    )
    assert runjobs.log(first).count("its lease ran out before it could start") == 3
    for row in Job.objects.filter(pk__in=ids):
        assert (row.status, worker_pid(row.worker_id)) == ("succeeded", second.pid)
    assert runjobs.stop(second) == 0, runjobs.log(second)


def test_a_timed_out_run_keeps_its_lease_and_its_retry_starts_after_it_returns(runjobs):
    """One worker, two slots. The first run overruns its 5 s timeout in one slot (which
    keeps it, and its lease); the other slot is free, yet the retry (4.5 s: inside the
    timeout, longer than the 1 s lease) starts only once the first run has returned and
    failed with TimeLimitExceeded: it succeeds as attempt 2."""
    settings = {"LEASE": 1, "POLL_INTERVAL": 0.2}
    job = jobs.enqueue(rel.slow_first, {"key": "overrun", "first": 8, "then": 4.5})
    worker = runjobs.start("--concurrency", "2", settings=settings)
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).exists(),
        timeout=60,
    )
    wait_until(lambda: len(marks("end")) >= 2, timeout=15)
    row = Job.objects.get(pk=job.pk)
    starts, ends = marks("start"), marks("end")
    assert len(starts) == 2, runjobs.log(worker)
    # The retry started after the first run ended: never two runs at once.
    assert ends[0][2] <= starts[1][2]
    assert (row.status, row.attempts) == ("succeeded", 2), (row.last_error, runjobs.log(worker))
    assert row.result == {"pid": worker.pid, "first_run": False}
    log = runjobs.log(worker)
    assert "ran past its timeout" in log
    assert "raised TimeLimitExceeded on attempt 1" in log
    assert "Discarded the success" not in log
    assert runjobs.stop(worker) == 0, log


def test_a_quick_success_waiting_in_its_batch_behind_a_slow_job_keeps_its_lease(runjobs):
    """Quick successes are written in batches. One claimed together with a slow job
    waits for that job to end before it is written: its lease must be renewed meanwhile,
    or it would be taken for lost and run again."""
    for _ in range(3):  # claims grow 1, 2, 4 while jobs are quick
        jobs.enqueue("testapp.noop")
    victim = jobs.enqueue("testapp.noop")
    slow = jobs.enqueue(rel.tracked, {"key": "slow", "seconds": 3})  # 3 leases
    worker = runjobs.start("--concurrency", "1", settings={"LEASE": 1, "POLL_INTERVAL": 0.2})
    wait_until(lambda: Job.objects.filter(pk=slow.pk, status="succeeded").exists(), timeout=30)
    row = Job.objects.get(pk=victim.pk)
    log = runjobs.log(worker)
    assert row.status == "succeeded"
    assert (row.attempts, row.last_error) == (1, ""), log
    assert "lost its lease" not in log
    assert runjobs.stop(worker) == 0, log


@pytest.mark.parametrize("pool", ["threads", "asyncio"])
@pytest.mark.parametrize("name", ["rel.tracked", "rel.async_sleep"])
def test_sigterm_with_a_handler_longer_than_the_shutdown_timeout_exits_0_on_time(
    runjobs, name, pool
):
    lease = 2
    job = jobs.enqueue(name, {"key": "long", "seconds": 40})
    worker = runjobs.start(
        "--pool",
        pool,
        "--shutdown-timeout",
        "1",
        settings={"LEASE": lease, "POLL_INTERVAL": 0.2},
    )
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="running").exists(), timeout=30)
    time.sleep(0.5)
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0, runjobs.log(worker)
    assert time.monotonic() - signalled < 1 + 3
    assert "still running after the shutdown timeout" in runjobs.log(worker)
    assert not Worker.objects.filter(pid=worker.pid).exists()
    # Nobody renews the lease any more: within one lease the job is recovered for another run.
    assert Job.objects.get(pk=job.pk).status == "running"
    wait_until(lambda: recover_expired_leases(timezone.now()) == 1, timeout=lease + 10)
    row = Job.objects.get(pk=job.pk)
    next_status = "pending" if row.max_attempts > 1 else "failed"  # async_sleep has no retry
    assert (row.status, row.attempts, row.lock_token) == (next_status, 1, None)
