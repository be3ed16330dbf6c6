"""The process pool's fault paths with real ``runjobs`` processes: a return value that
cannot travel back from the child, a parent stopped past a lease, a stop signal while
a child holds jobs it has not started, a cancel that comes before a child starts a job,
a child that dies between two jobs, and a job's hard limit counted from its start."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.db import connection, transaction

from django_cronqueue import jobs
from django_cronqueue.models import Job
from django_cronqueue.models import Worker as WorkerRow
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import marks, needs_server, wait_until
from .test_pools import FAST, alive, ended

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROCESSES = ("--pool", "processes", "--concurrency", "1")


def behind_quick_jobs(*enqueue: tuple[object, dict]) -> list[Job]:
    """Enqueue 30 quick jobs, then ``enqueue``'s: the slot's claims grow (1, 2, 4, 8,
    then 10) while the quick ones run, and the jobs behind them are claimed, and sent to
    its child, together."""
    jobs.enqueue_many(rel.noop, [{"key": f"n{i}"} for i in range(30)])
    return [jobs.enqueue(handle, payload) for handle, payload in enqueue]


def claimed(job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, status="running").exists()


def release(name: str) -> None:
    SideEffect.objects.create(key=f"release:{name}", pid=os.getpid())


def started_keys() -> list[str]:
    return [key for key, _, _ in marks("start")]


def test_a_result_that_cannot_travel_back_is_dropped_and_the_slot_goes_on(runjobs):
    """The handler returns an exception whose ``__init__`` takes two arguments: it
    pickles but cannot be unpickled. The job succeeds, its value dropped with a warning
    (as the thread pool drops a value that is not JSON), and the only slot runs the next
    job. Before, the parent's slot thread died on the value: the job was left to its
    lease (LeaseLost) and the worker ran nothing more while it looked alive."""
    unreadable = jobs.enqueue(rel.returns_unreadable, {"key": "u"})
    after = jobs.enqueue(rel.tracked, {"key": "after"})
    worker = runjobs.start(*PROCESSES, settings=FAST)
    row = ended(unreadable, timeout=120)
    assert (row.status, row.attempts, row.result) == ("succeeded", 1, None), runjobs.log(worker)
    assert ended(after, timeout=60).status == "succeeded", runjobs.log(worker)
    log = runjobs.log(worker)
    assert f"rel.pool.returns_unreadable #{unreadable.pk} succeeded, but its return value" in log
    assert "TwoArgumentError, which cannot leave the child process" in log
    assert "Traceback" not in log, log
    assert runjobs.stop(worker) == 0


def test_a_parent_stopped_past_a_lease_kills_its_child_as_soon_as_it_resumes(runjobs):
    """Worker A's child runs a job (300 s on its first run); A alone is stopped
    (SIGSTOP) past the 5 s lease, worker B takes the job over and runs it again. When A
    resumes, it kills its child at once: the first run never ends and A's late write
    changes nothing. Before, the child ran on beside B's run until its own end."""
    job = jobs.enqueue(rel.hour_long, {"key": "h", "first": 300, "then": 0.5})
    first = runjobs.start(*PROCESSES, settings=FAST)
    [(_, child_pid, _)] = wait_until(lambda: marks("start"), timeout=120)
    first.send_signal(signal.SIGSTOP)
    try:
        second = runjobs.start("--pool", "threads", settings=FAST)
        wait_until(lambda: len(marks("start")) == 2, timeout=120)
    finally:
        first.send_signal(signal.SIGCONT)
    wait_until(lambda: not alive(child_pid), timeout=60)
    row = ended(job, timeout=60)
    assert row.status == "succeeded", runjobs.logs()
    assert row.result["first_run"] is False
    assert [pid for _, pid, _ in marks("end")] == [row.result["pid"]]  # B's run only
    wait_until(lambda: "its lease ran out while it ran" in runjobs.log(first), timeout=30)
    assert Job.objects.get(pk=job.pk).status == "succeeded"  # A's write changed nothing
    for worker in (first, second):
        assert runjobs.stop(worker) == 0, runjobs.log(worker)


@pytest.mark.parametrize("how", ["sigterm", "sigint-to-the-group"])
def test_a_stop_signal_gives_back_at_once_the_jobs_a_child_has_not_started(runjobs, how):
    """Three cooperative jobs (progress, cancel checks, a return value) sent to one
    child together; the worker is stopped while the first runs: SIGTERM to the worker,
    or SIGINT to its process group as Ctrl-C and systemd send it. The other two go back
    to pending, unstarted, while the first still runs; the first finishes and the
    worker exits 0. Before, the child ran its whole assignment."""
    w1, w2, w3 = behind_quick_jobs(
        *((rel.waits, {"key": key, "release": "stop"}) for key in ("w1", "w2", "w3"))
    )
    worker = runjobs.start(*PROCESSES, "--shutdown-timeout", "300", settings=FAST, new_session=True)
    wait_until(lambda: "w1" in started_keys(), timeout=120)
    assert claimed(w2), "precondition: w2 was sent to the child with w1"
    if how == "sigterm":
        worker.send_signal(signal.SIGTERM)
    else:
        os.killpg(worker.pid, signal.SIGINT)
    wait_until(
        lambda: Job.objects.filter(pk__in=[w2.pk, w3.pk], status="pending").count() == 2,
        timeout=60,
    )
    assert Job.objects.get(pk=w1.pk).status == "running"  # the first one still runs
    release("stop")
    assert worker.wait(120) == 0, runjobs.log(worker)
    row = Job.objects.get(pk=w1.pk)
    assert (row.status, row.result) == ("succeeded", {"key": "w1"}), runjobs.log(worker)
    for job in (w2, w3):
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.attempts) == ("pending", 0)
    assert started_keys() == ["w1"]


def beat_after(moment: float, worker_id: str) -> bool:
    """Whether a heartbeat of ``worker_id`` began after ``moment`` (a timestamp): it
    asked for the cancel requests of the jobs it holds after then."""
    row = WorkerRow.objects.filter(id=worker_id).values_list("last_seen", flat=True).first()
    return row is not None and row.timestamp() > moment


def test_a_job_cancelled_before_its_child_starts_it_is_never_started(runjobs):
    """``c`` is sent to the child behind ``w1``; its cancel is requested while ``w1``
    runs. The child never starts it: it ends cancelled. Before, the child started it
    (the cancel reached only the job the parent waited for)."""
    w1, c = behind_quick_jobs(
        (rel.waits, {"key": "w1", "release": "w1"}), (rel.tracked, {"key": "c"})
    )
    # A 60 s lease: the child may start c up to 30 s after it was sent.
    worker = runjobs.start(*PROCESSES, settings={"LEASE": 60, "POLL_INTERVAL": 0.2})
    wait_until(lambda: "w1" in started_keys(), timeout=120)
    assert claimed(c), "precondition: c was sent to the child with w1"
    worker_id = Job.objects.get(pk=c.pk).worker_id
    jobs.cancel(c.pk)
    requested = time.time() + 1  # a clock the worker corrects by at most a few ms
    wait_until(lambda: beat_after(requested, worker_id), timeout=60)
    # And the beat after that one: the first has then passed the cancel on to the child
    # (on a loaded machine, a release right after its start let the child start c first).
    seen = WorkerRow.objects.values_list("last_seen", flat=True).get(id=worker_id).timestamp()
    wait_until(lambda: beat_after(seen, worker_id), timeout=60)
    release("w1")
    row = ended_or_cancelled(c)
    assert row.status == "cancelled", runjobs.log(worker)
    assert "cancelled before it started" in row.traceback, (row.last_error, row.traceback)
    assert Job.objects.get(pk=w1.pk).status == "succeeded"
    assert "c" not in started_keys()
    assert runjobs.stop(worker) == 0


def ended_or_cancelled(job: Job) -> Job:
    wait_until(
        lambda: Job.objects.filter(
            pk=job.pk, status__in=["succeeded", "failed", "cancelled"]
        ).exists(),
        timeout=60,
    )
    return Job.objects.get(pk=job.pk)


def test_a_child_that_dies_between_two_jobs_is_not_blamed_for_the_second(runjobs):
    """The child ends right after it reported ``a``, before it starts ``b``: ``b`` goes
    to a new child and succeeds on its first attempt. Before, ``b`` failed an attempt
    with ChildDied, a job its child never started."""
    a, b = behind_quick_jobs((rel.dies_after_reporting, {"key": "a"}), (rel.tracked, {"key": "b"}))
    worker = runjobs.start(*PROCESSES, settings=FAST)
    row = ended(b, timeout=120)
    assert (row.status, row.attempts) == ("succeeded", 1), (row.last_error, runjobs.log(worker))
    assert Job.objects.get(pk=a.pk).status == "succeeded"
    [(_, a_pid, _)] = [mark for mark in marks("start") if mark[0] == "a"]
    [(_, b_pid, _)] = [mark for mark in marks("start") if mark[0] == "b"]
    assert a_pid != b_pid
    assert "ChildDied" not in runjobs.log(worker)
    assert runjobs.stop(worker) == 0


@needs_server
def test_a_queued_jobs_hard_limit_counts_from_its_start_in_the_child(runjobs):
    """``b`` (timeout 15 s, stuck in C code) starts in the child behind ``w1`` while
    the parent cannot record ``w1`` (the test holds its row's lock for 20 s). Once the
    parent gets past the write, ``b`` is already past its timeout: its child is killed
    at once. Before, its 15 s only began then."""
    w1, b = behind_quick_jobs(
        (rel.waits, {"key": "w1", "release": "w1"}), (rel.c_sleep_15, {"key": "b"})
    )
    worker = runjobs.start(*PROCESSES, settings={"POLL_INTERVAL": 0.2})
    wait_until(lambda: "w1" in started_keys(), timeout=120)
    assert claimed(b), "precondition: b was sent to the child with w1"
    locked, unlock = threading.Event(), threading.Event()

    def hold_the_row_of_w1() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().filter(pk=w1.pk).exists()
                locked.set()
                unlock.wait(120)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row_of_w1)
    holder.start()
    try:
        assert locked.wait(30)
        release("w1")
        [(_, b_pid, _)] = wait_until(
            lambda: [mark for mark in marks("start") if mark[0] == "b"], timeout=60
        )
        time.sleep(20)  # the scenario: the parent's write waits 20 s
        assert alive(b_pid)  # nothing kills it while the parent is stuck in the write
    finally:
        unlock.set()
        holder.join(30)
    # Past its timeout since 5 s: killed as soon as the parent reads that it started,
    # well before the 15 s a timer started now would take.
    wait_until(lambda: not alive(b_pid), timeout=10)
    row = ended(b, timeout=60)
    assert row.status == "failed"
    assert row.last_error.startswith("TimeLimitExceeded"), row.last_error
    assert runjobs.stop(worker) == 0
