"""End-to-end: real ``runjobs`` processes on a real database."""

import datetime as dt
import os
import signal
import time

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.history import counting
from django_cronqueue.models import FinishedCountMark, Job, Worker
from tests.db.row_locks import row_held_elsewhere
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

from .conftest import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_four_burst_workers_run_each_of_2000_jobs_exactly_once(runjobs):
    count = 2000 if connection.vendor != "sqlite" else 500
    jobs.enqueue_many(test_jobs.record, [{"key": f"job-{i}"} for i in range(count)])
    workers = [runjobs.start("--burst", "--concurrency", "2") for _ in range(4)]
    for index, worker in enumerate(workers):
        assert worker.wait(180) == 0, runjobs.log(index)
    assert Job.objects.filter(status="succeeded").count() == count
    assert SideEffect.objects.count() == count
    duplicated = (
        SideEffect.objects.values("key").annotate(runs=Count("id")).filter(runs__gt=1).count()
    )
    assert duplicated == 0
    assert SideEffect.objects.values("pid").distinct().count() > 1  # the work was shared
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}


def test_a_job_whose_worker_is_killed_runs_again_after_its_lease_expires(runjobs):
    job = jobs.enqueue(test_jobs.slow_record, {"key": "survivor", "seconds": 2})
    settings = {"LEASE": 2, "POLL_INTERVAL": 0.2}
    doomed = runjobs.start(settings=settings)
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="running").exists())
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    job.refresh_from_db()
    assert job.status == "running"  # the crash left the row claimed ...
    assert not SideEffect.objects.exists()

    rescuer = runjobs.start(settings=settings)
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="succeeded").exists(), timeout=30)
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0
    job.refresh_from_db()
    assert job.attempts == 2
    assert "lease lost" in job.last_error
    assert list(SideEffect.objects.values_list("key", "pid")) == [("survivor", rescuer.pid)]


def test_a_worker_runs_its_jobs_and_returns_expired_leases_while_the_counts_are_held(runjobs):
    """Another worker frozen (SIGSTOP) with the counts of finished rows in hand (held
    here, in a transaction of the test's own): this one's passes leave the count and the
    prune to a later pass instead of waiting on it, and its claims and the return of
    expired leases go on."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    now = timezone.now()
    counting.count_finished(now)  # the counts' mark row exists
    due = jobs.enqueue(test_jobs.record, {"key": "due"})
    stranded = jobs.enqueue(test_jobs.record, {"key": "stranded"})
    expired = now - dt.timedelta(minutes=5)
    Job.objects.filter(pk=stranded.pk).update(  # its worker died mid-run
        status="running", attempts=1, started_at=expired, locked_until=expired, lock_token="x"
    )
    with row_held_elsewhere(FinishedCountMark.ONLY, model=FinishedCountMark):
        worker = runjobs.start("--burst")
        assert worker.wait(60) == 0, runjobs.log(0)
    rows = dict(Job.objects.values_list("pk", "status"))
    assert rows == {due.pk: "succeeded", stranded.pk: "succeeded"}
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["due", "stranded"]


def test_sigterm_lets_the_running_handler_finish_gives_back_the_rest_and_exits_0(runjobs):
    # Quick jobs first: the worker's claims grow 1, 2, 4, so the four slow jobs are
    # claimed together and three of them wait, claimed but unstarted, behind the first.
    for _ in range(3):
        jobs.enqueue(test_jobs.noop)
    slow = [
        jobs.enqueue(test_jobs.slow_record, {"key": f"slow-{i}", "seconds": 1.5}) for i in range(4)
    ]
    worker = runjobs.start("--shutdown-timeout", "20", settings={"PREFETCH": 4})
    wait_until(lambda: Job.objects.filter(status="running").count() == 4, timeout=120)
    time.sleep(0.3)  # the first slow handler is under way
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, runjobs.log(0)
    assert time.monotonic() - started < 20
    rows = {row.pk: row for row in Job.objects.filter(pk__in=[job.pk for job in slow])}
    assert rows[slow[0].pk].status == "succeeded"
    for job in slow[1:]:
        row = rows[job.pk]
        assert (row.status, row.attempts, row.lock_token) == ("pending", 0, None)
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["slow-0"]
    assert not Worker.objects.exists()  # the worker unregistered itself


def test_claims_grow_only_while_jobs_are_quick_so_slow_jobs_spread_over_idle_workers(runjobs):
    """No hoarding: 20 one-second jobs enqueued at once spread over four idle workers."""
    workers = [runjobs.start("--poll-interval", "0.2") for _ in range(4)]
    wait_until(lambda: Worker.objects.count() == 4)
    for i in range(20):
        jobs.enqueue(test_jobs.slow_record, {"key": f"second-{i}", "seconds": 1})
    wait_until(lambda: SideEffect.objects.count() == 20, timeout=60)
    per_worker = SideEffect.objects.values("pid").annotate(n=Count("id"))
    assert len(per_worker) == 4
    assert max(row["n"] for row in per_worker) <= 7  # an even share is 5
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for index, worker in enumerate(workers):
        assert worker.wait(30) == 0, runjobs.log(index)


def test_a_second_signal_exits_at_once(runjobs):
    jobs.enqueue(test_jobs.slow_record, {"key": "long", "seconds": 30})
    worker = runjobs.start("--shutdown-timeout", "60")
    wait_until(lambda: Job.objects.filter(status="running").exists())
    time.sleep(1)  # claimed, and now surely started: a graceful stop would wait 30 s
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) != 0


def test_once_runs_what_is_due_and_exits(runjobs):
    for i in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"once-{i}"})
    worker = runjobs.start("--once")
    assert worker.wait(60) == 0, runjobs.log(0)
    assert SideEffect.objects.count() == 5


def test_queue_option_limits_the_worker_to_its_queues(runjobs):
    jobs.enqueue(test_jobs.record, {"key": "mail"}, queue="emails")
    jobs.enqueue(test_jobs.record, {"key": "other"}, queue="reports")
    worker = runjobs.start("--burst", "--queue", "emails", "--queue", "sms")
    assert worker.wait(60) == 0, runjobs.log(0)
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["mail"]


def test_an_idle_worker_picks_up_a_new_job_without_waiting_for_a_long_poll(runjobs):
    worker = runjobs.start("--poll-interval", "5" if connection.vendor == "postgresql" else "0.2")
    wait_until(lambda: Worker.objects.exists())
    time.sleep(0.5)
    enqueued = time.monotonic()
    jobs.enqueue(test_jobs.record, {"key": "wake"})
    wait_until(lambda: SideEffect.objects.exists(), timeout=10, interval=0.01)
    waited = time.monotonic() - enqueued
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    # On PostgreSQL LISTEN/NOTIFY wakes it long before the 5 s poll.
    assert waited < (2.0 if connection.vendor == "postgresql" else 3.0)


def test_worker_registers_a_heartbeat_row(runjobs):
    worker = runjobs.start(settings={"LEASE": 1})
    row = wait_until(lambda: Worker.objects.first())
    assert row.pid == worker.pid
    first_seen = row.last_seen
    wait_until(lambda: Worker.objects.get(pk=row.pk).last_seen > first_seen, timeout=10)
    worker.send_signal(signal.SIGINT)
    assert worker.wait(30) == 0
    assert not Worker.objects.filter(pk=row.pk).exists()
    assert os.getpid() != worker.pid


def test_a_handler_past_its_timeout_fails_when_it_returns_and_its_slot_waits_for_it(runjobs):
    hung = jobs.enqueue(test_jobs.hangs, {"key": "hung", "seconds": 3})
    worker = runjobs.start("--concurrency", "1", settings={"LEASE": 1, "POLL_INTERVAL": 0.2})
    wait_until(lambda: Job.objects.filter(pk=hung.pk, status="running").exists())
    other = jobs.enqueue(test_jobs.record, {"key": "other"})
    wait_until(lambda: Job.objects.filter(pk=other.pk, status="succeeded").exists(), timeout=20)
    # The run overran its 1 s timeout, but the only slot took no new work until it
    # returned (its side effect comes at its end).
    keys = list(SideEffect.objects.order_by("id").values_list("key", flat=True))
    assert keys[0] == "hung", keys
    wait_until(lambda: Job.objects.filter(pk=hung.pk, status="failed").exists(), timeout=30)
    hung.refresh_from_db()
    assert hung.attempts == 2
    assert hung.last_error.startswith("TimeLimitExceeded"), hung.last_error
    assert "past its timeout" in hung.last_error
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, runjobs.log(0)


# Starting and stopping fast. How fast is measured by bench/run.py --startup; here, with
# every wait made long (a 600 s poll interval, a 600 s heartbeat), that no wait on the path
# is slept out: either bound is far above what the stop takes (well under a second) and
# far below the waits.


def test_a_burst_with_nothing_due_exits_without_waiting_a_poll_interval(runjobs):
    worker = runjobs.start("--burst", "--poll-interval", "600")
    assert worker.wait(60) == 0, runjobs.log(worker)


def test_an_idle_worker_exits_soon_after_sigterm_without_waiting_out_a_poll(runjobs):
    worker = runjobs.start("--poll-interval", "600", settings={"LEASE": 1800})
    wait_until(lambda: Worker.objects.exists())
    time.sleep(0.5)  # idle: the slot found nothing and waits, so does everything else
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, runjobs.log(worker)
    assert time.monotonic() - signalled < 5, runjobs.log(worker)
    assert not Worker.objects.exists()
