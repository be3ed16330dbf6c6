"""The worker run in-process (``call_command("runjobs", ...)``): it leaves nothing behind.

Real ``runjobs`` processes are tested in tests/e2e and tests/reliability; here the worker
runs in the test's own process, as it does when a test suite or a script calls the
command, and must stop every thread it started and close every connection they opened.
"""

import datetime as dt
import os
import signal
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs, signals
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job, Worker
from django_cronqueue.running.execution import new_context
from django_cronqueue.worker import Worker as RunjobsWorker
from django_cronqueue.worker.held_jobs import HeldJob
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def database_sessions() -> int | None:
    """Sessions open on the test database (None on SQLite, which has none)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
        elif connection.vendor == "mysql":
            cursor.execute(
                "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
            )
        else:
            return None
        return cursor.fetchone()[0]


@pytest.fixture
def waits_for_a_heartbeat():
    """A job that returns once its worker's heartbeat has beaten (and so connected)."""

    @jobs.job(name="tests.worker.waits_for_a_heartbeat", timeout=30)
    def handler() -> None:
        registered = Worker.objects.get().last_seen
        deadline = time.monotonic() + 20
        while Worker.objects.get().last_seen == registered and time.monotonic() < deadline:
            time.sleep(0.05)

    yield handler
    registry.unregister("tests.worker.waits_for_a_heartbeat")


@pytest.mark.parametrize("mode", ["--burst", "--once"])
def test_an_in_process_run_stops_every_thread_it_started_and_closes_their_sessions(
    mode, waits_for_a_heartbeat
):
    for index in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"k{index}"})
    jobs.enqueue(waits_for_a_heartbeat)
    before_threads = set(threading.enumerate())
    before_sessions = database_sessions()

    with override_settings(CRONQUEUE={"LEASE": 1}):  # a heartbeat every 0.33 s
        call_command("runjobs", mode, "--concurrency", "3")

    assert Job.objects.filter(status="succeeded").count() == 6
    assert not Worker.objects.exists()
    # A closed session leaves pg_stat_activity (or the process list) when its server
    # process has exited, a moment after the close: wait for that, not for luck. A session
    # left open would still be there after the wait.
    deadline = time.monotonic() + 10
    while database_sessions() != before_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert database_sessions() == before_sessions
    left = [thread.name for thread in set(threading.enumerate()) - before_threads]
    assert left == []


def test_an_in_process_asyncio_run_stops_its_threads_and_closes_its_handlers_sessions():
    """The asyncio pool's handlers connect from its executor's threads (sync handlers)
    and from the thread of their ``sync_to_async`` calls (async ones): a burst closes
    those sessions and leaves none of its threads behind."""
    for index in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"k{index}"})
        jobs.enqueue(test_jobs.async_record, {"key": f"a{index}"})
    before_threads = set(threading.enumerate())
    before_sessions = database_sessions()

    call_command("runjobs", "--burst", "--pool", "asyncio", "--concurrency", "4")

    assert Job.objects.filter(status="succeeded").count() == 10
    deadline = time.monotonic() + 10
    while database_sessions() != before_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert database_sessions() == before_sessions
    deadline = time.monotonic() + 10
    while set(threading.enumerate()) - before_threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [thread.name for thread in set(threading.enumerate()) - before_threads] == []


def test_an_in_process_run_restores_the_callers_signal_handlers_and_connection_settings():
    jobs.enqueue(test_jobs.record, {"key": "k"})
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    settings_dict = connection.settings_dict

    call_command("runjobs", "--burst")

    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    assert connection.settings_dict is settings_dict


def test_an_in_process_burst_whose_only_handler_overran_returns_and_leaves_only_that_thread():
    """The handler waits for the test, far past its 1 s timeout: the worker signals the
    overrun, and the burst ends (no slot can take work) without waiting for it, and
    without ending the caller's process. Only the slot in that handler is left, until
    it returns."""
    release = threading.Event()
    timed_out = []

    @jobs.job(name="tests.worker.waits_for_release", timeout=1, retries=0)
    def waits_for_release() -> None:
        release.wait(30)

    def on_timed_out(sender, job, timeout, **kwargs):
        timed_out.append((sender, job.id, timeout))

    signals.job_timed_out.connect(on_timed_out)
    before = set(threading.enumerate())
    try:
        job = jobs.enqueue(waits_for_release)
        with override_settings(CRONQUEUE={"LEASE": 1, "POLL_INTERVAL": 0.2}):
            call_command("runjobs", "--burst")
        left = [thread.name for thread in set(threading.enumerate()) - before]
        assert left == ["cronqueue-slot-0"]
        assert timed_out == [("tests.worker.waits_for_release", job.pk, 1)]
    finally:
        release.set()
        for thread in set(threading.enumerate()) - before:
            thread.join(30)
        signals.job_timed_out.disconnect(on_timed_out)
        registry.unregister("tests.worker.waits_for_release")
    assert set(threading.enumerate()) - before == set()


def test_the_jobs_claimed_with_a_handler_that_overran_are_given_back_at_once():
    """A slot claimed three jobs together and the first overran its timeout: the slot
    will not start the other two until it returns, so the heartbeat gives them back
    (pending, claim and attempt undone), asks the first to stop and goes on renewing
    its lease: no other run of it may start while it executes."""
    for index in range(3):
        jobs.enqueue(test_jobs.record, {"key": f"k{index}"})
    worker = RunjobsWorker(concurrency=2)
    claimed = claim_due(timezone.now(), queues=None, limit=3, worker_id=worker.id)
    for job in claimed:
        worker._held[job.id] = HeldJob(job, new_context(job), slot="cronqueue-slot-0")
    overran, *unstarted = claimed
    worker._held[overran.id].started = True
    worker._held[overran.id].deadline = time.monotonic() - 1  # past its timeout
    lease = Job.objects.get(pk=overran.id).locked_until

    worker._beat()

    assert Job.objects.get(pk=overran.id).locked_until > lease  # still renewed
    assert worker._held[overran.id].context.cancel_requested  # asked to stop
    for job in unstarted:
        row = Job.objects.get(pk=job.id)
        assert (row.status, row.attempts, row.lock_token) == ("pending", 0, None)
    assert list(worker._held) == [overran.id]


# --- starting and stopping fast: no wait in the stop path sleeps its timeout out -------

LONG = 600.0  # seconds: any wait on the start or stop path that ran this long would show


def test_a_burst_with_nothing_due_returns_when_its_slots_find_nothing_not_after_a_poll():
    """The main thread used to sleep a whole poll interval before it noticed that the
    slots had found nothing; it now joins them."""
    worker = RunjobsWorker(mode="burst", poll_interval=LONG, concurrency=2)
    started = time.monotonic()
    assert worker.run() == 0
    assert time.monotonic() - started < 30
    assert not any(thread.is_alive() for thread in worker._slots + worker._helpers)


def test_a_burst_still_housekeeps_every_poll_interval_while_a_slot_works():
    """Joining the slots must not skip the housekeeping of a long burst: a job that takes
    a few poll intervals sees the heartbeat's and the main thread's work go on."""
    jobs.enqueue(test_jobs.slow_record, {"key": "long", "seconds": 1.0})
    worker = RunjobsWorker(mode="burst", poll_interval=0.1)
    runs = []
    real = worker._housekeep
    worker._housekeep = lambda: (runs.append(time.monotonic()), real())[1]
    assert worker.run() == 0
    assert len(runs) >= 3  # the first at start, then every 0.1 s during the 1 s job


@override_settings(CRONQUEUE={"LEASE": 3 * LONG})  # the heartbeat's wait: LONG
def test_an_idle_worker_stops_without_waiting_out_its_poll_heartbeat_or_listener(monkeypatch):
    """stop() wakes every thread: the idle slot (the wake event), the main thread (the
    stopping event), the heartbeat (its stop event) and the PostgreSQL listener (whose
    select() waits on that event's socket too, not only on its connection)."""
    monkeypatch.setattr("django_cronqueue.db.notify.STOP_CHECK_INTERVAL", LONG)
    worker = RunjobsWorker(poll_interval=LONG)

    def stop_once_idle() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            Worker.objects.exists() and len(worker._helpers) == expected_helpers
        ):
            time.sleep(0.05)
        time.sleep(0.5)  # the slot has claimed nothing and waits; the listener listens
        stop_requested.append(time.monotonic())
        worker.stop()

    expected_helpers = 2 if connection.vendor == "postgresql" else 1
    stop_requested: list[float] = []
    stopper = threading.Thread(target=stop_once_idle)
    stopper.start()
    assert worker.run() == 0
    returned = time.monotonic()
    stopper.join(10)
    assert len(stop_requested) == 1
    assert len(worker._helpers) == expected_helpers
    assert not any(thread.is_alive() for thread in worker._slots + worker._helpers)
    assert returned - stop_requested[0] < 10


# --- stopping in the middle of a drain ----------------------------------------------------


def test_a_worker_stopped_mid_drain_gives_back_the_jobs_it_claimed_and_did_not_start():
    """A slot running quick jobs claims them in batches. Stopped in the middle of a
    drain, the worker runs no job after the one that stopped it and gives back every
    other job it claimed: none stays running, none ran twice, none is lost."""
    worker = RunjobsWorker(mode="burst")
    ran = []

    @jobs.job(name="tests.worker.stops_its_worker")
    def stops_its_worker(n: int) -> None:
        ran.append(n)
        if n == 150:
            worker.stop()

    try:
        jobs.enqueue_many(stops_its_worker, [{"n": n} for n in range(400)])
        assert worker.run() == 0
    finally:
        registry.unregister("tests.worker.stops_its_worker")

    assert ran == list(range(151))  # in claim order, each once, none after the stop
    rows = Job.objects.order_by("pk")
    assert not rows.filter(status="running").exists()
    assert [row.payload["n"] for row in rows.filter(status="succeeded")] == ran
    assert set(rows.filter(status="succeeded").values_list("attempts", flat=True)) == {1}
    given_back = rows.filter(status="pending")
    assert given_back.count() == 400 - 151
    assert set(given_back.values_list("attempts", "lock_token")) == {(0, None)}


def test_a_burst_runs_what_its_first_pass_made_due_before_its_slots_claimed():
    """The slots connect while the first pass runs, and claim only after it: a job whose
    lease expired (returned by that pass) is run by the same burst."""
    long_ago = timezone.now() - dt.timedelta(minutes=10)
    job = jobs.enqueue(test_jobs.noop, run_at=long_ago)
    assert len(claim_due(long_ago, queues=None, limit=1, worker_id="crashed-worker")) == 1
    worker = RunjobsWorker(mode="burst", poll_interval=LONG, concurrency=2)
    assert worker.run() == 0
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("succeeded", 2)


def test_a_worker_registers_over_the_row_an_earlier_attempt_of_its_own_left():
    worker = RunjobsWorker(mode="burst", concurrency=3)
    Worker.objects.create(
        id=worker.id,
        hostname="elsewhere",
        pid=1,
        queues=[],
        concurrency=1,
        started_at=timezone.now() - dt.timedelta(days=1),
        last_seen=timezone.now() - dt.timedelta(days=1),
        job_names=[],
    )
    worker._register()
    row = Worker.objects.get()
    assert (row.id, row.concurrency, row.pid) == (worker.id, 3, os.getpid())
    assert row.last_seen > timezone.now() - dt.timedelta(minutes=1)
    assert set(row.job_names) == set(registry.names())
