"""The worker's clock (issue 11, part 6), with a ``Worker`` run in this process, in burst
mode, while ``django.utils.timezone.now`` runs ahead of the database's clock: it corrects
every time decision by its measured offset, and refuses to claim beyond MAX_CLOCK_SKEW.
Tests with real ``runjobs`` processes: tests/reliability/test_clocks.py."""

import datetime as dt
import threading

import pytest
from django.db import connections
from django.utils import timezone

from django_cronqueue.models import Job
from django_cronqueue.worker import Worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 30
SKEW = 100.0  # more than three leases


def skew_clock(monkeypatch, seconds):
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + dt.timedelta(seconds=seconds))


def run_burst_worker() -> Worker:
    """Run a burst worker to its end, on a thread of its own (so that it leaves this
    process's signal handlers alone), then stop its heartbeat."""
    worker = Worker(mode="burst", scheduler=False, poll_interval=0.05)

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), "the burst worker did not finish"
    worker.stop()
    for thread in threading.enumerate():
        if thread.name == "cronqueue-heartbeat":
            thread.join(60)
    return worker


@pytest.fixture
def rows(settings):
    """A live lease held by another worker (renewed a moment ago), and a job due now."""
    settings.CRONQUEUE = {**settings.CRONQUEUE, "LEASE": LEASE}
    now = timezone.now()
    live = JobFactory(
        status="running",
        attempts=1,
        lock_token="the-live-token",
        worker_id="other-host:1:aaaaaa",
        locked_until=now + dt.timedelta(seconds=LEASE - 5),
        started_at=now,
    )
    due = JobFactory(run_at=now)
    return live, due


def assert_live_lease_untouched(live):
    row = Job.objects.get(pk=live.pk)
    assert (row.status, row.attempts, row.lock_token, row.worker_id) == (
        "running",
        1,
        "the-live-token",
        "other-host:1:aaaaaa",
    )


def test_a_worker_ahead_by_more_than_a_lease_corrects_its_clock(rows, settings, monkeypatch):
    live, due = rows
    settings.CRONQUEUE = {**settings.CRONQUEUE, "MAX_CLOCK_SKEW": 10 * SKEW}  # never refuses
    skew_clock(monkeypatch, SKEW)

    worker = run_burst_worker()

    assert_live_lease_untouched(live)
    row = Job.objects.get(pk=due.pk)
    assert (row.status, row.attempts) == ("succeeded", 1)
    # Its timestamps are the database's time, not its host's.
    real_now = timezone.now() - dt.timedelta(seconds=SKEW)
    assert row.finished_at <= real_now
    assert worker.clock.offset == pytest.approx(SKEW, abs=1)


def test_a_worker_beyond_max_clock_skew_claims_nothing(rows, monkeypatch, caplog):
    live, due = rows
    skew_clock(monkeypatch, SKEW)  # MAX_CLOCK_SKEW is LEASE / 3 = 10 s

    worker = run_burst_worker()

    assert_live_lease_untouched(live)
    row = Job.objects.get(pk=due.pk)
    assert (row.status, row.attempts) == ("pending", 0)
    assert not worker.clock.trusted
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert f"Worker {worker.id}: this host's clock is 100.0s ahead of the database's" in errors[0]


def test_a_worker_within_max_clock_skew_claims(rows, monkeypatch):
    live, due = rows
    skew_clock(monkeypatch, 8.0)

    worker = run_burst_worker()

    assert worker.clock.trusted
    assert_live_lease_untouched(live)
    assert Job.objects.get(pk=due.pk).status == "succeeded"
