"""django_cronqueue.db.notify: PostgreSQL NOTIFY wake-ups for idle workers, sent only on
PostgreSQL and only for jobs due before a worker's next poll; the LISTEN side."""

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue.db.notify import NOTIFY_CHANNEL, SelectableEvent, listen, wake_workers
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL's"
)


def notifies(queries):
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("NOTIFY")]


@pytest.fixture
def listener():
    """A separate autocommit connection LISTENing on the channel."""
    import psycopg

    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


def received(listener, timeout=0.3):
    return len(list(listener.notifies(timeout=timeout, stop_after=1)))


@pytest.mark.skipif(connection.vendor == "postgresql", reason="the other vendors' case")
def test_other_vendors_send_nothing():
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        wake_workers(connection.alias, [now - dt.timedelta(hours=1), now], now)
    assert len(queries) == 0


@postgres_only
@override_settings(CRONQUEUE={"POLL_INTERVAL": 1})
def test_a_job_due_before_the_next_poll_wakes_the_workers(listener):
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        wake_workers(connection.alias, [now + dt.timedelta(seconds=0.5)], now)
    assert notifies(queries) == [f"NOTIFY {NOTIFY_CHANNEL}"]
    assert received(listener, timeout=5) == 1


@postgres_only
def test_one_due_job_among_later_ones_sends_one_notify(listener):
    now = timezone.now()
    later = now + dt.timedelta(hours=1)
    with CaptureQueriesContext(connection) as queries:
        wake_workers(connection.alias, [later, now - dt.timedelta(days=1), later], now)
    assert len(notifies(queries)) == 1
    assert received(listener, timeout=5) == 1


@postgres_only
@override_settings(CRONQUEUE={"POLL_INTERVAL": 1})
@pytest.mark.parametrize(
    "run_ats",
    [[], [dt.timedelta(seconds=1.5)], [dt.timedelta(minutes=5), dt.timedelta(days=1)]],
    ids=["none", "just-after-the-poll", "later"],
)
def test_jobs_due_only_after_the_next_poll_wake_nobody(listener, run_ats):
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        wake_workers(connection.alias, [now + delta for delta in run_ats], now)
    assert len(queries) == 0
    assert received(listener) == 0


@postgres_only
def test_the_poll_interval_setting_decides_what_is_due_soon(listener):
    now = timezone.now()
    with override_settings(CRONQUEUE={"POLL_INTERVAL": 10}):
        wake_workers(connection.alias, [now + dt.timedelta(seconds=9)], now)
    assert received(listener, timeout=5) == 1
    with override_settings(CRONQUEUE={"POLL_INTERVAL": 0.1}):
        wake_workers(connection.alias, [now + dt.timedelta(seconds=1)], now)
    assert received(listener) == 0


@postgres_only
def test_retry_and_run_now_wake_the_workers(listener):
    failed = JobFactory(status="failed")
    assert failed.retry() is True
    assert received(listener, timeout=5) == 1
    later = JobFactory(run_at=timezone.now() + dt.timedelta(days=1))
    assert later.run_now() is True
    assert received(listener, timeout=5) == 1
    assert later.cancel() is True  # cancelling wakes nobody
    assert received(listener) == 0


@postgres_only
def test_listen_sets_wake_on_a_notify_and_returns_once_stopping():
    stopping, wake = threading.Event(), threading.Event()
    thread = threading.Thread(target=listen, args=(connection.alias, stopping, wake), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        # Until its LISTEN is in place a NOTIFY reaches nobody: send until one arrives.
        while not wake.is_set() and time.monotonic() < deadline:
            wake_workers(connection.alias, [timezone.now()], timezone.now())
            wake.wait(0.2)
        assert wake.is_set()
    finally:
        stopping.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


@postgres_only
def test_listen_returns_the_moment_a_selectable_stopping_event_is_set(monkeypatch):
    """The listener sleeps in select(); with a SelectableEvent as ``stopping`` it wakes on
    the event itself, not at its next check (an hour here), so a worker's stop does not
    wait for it."""
    monkeypatch.setattr("django_cronqueue.db.notify.STOP_CHECK_INTERVAL", 3600.0)
    stopping, wake = SelectableEvent(), threading.Event()
    thread = threading.Thread(target=listen, args=(connection.alias, stopping, wake), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not wake.is_set() and time.monotonic() < deadline:  # listening now
            wake_workers(connection.alias, [timezone.now()], timezone.now())
            wake.wait(0.2)
        assert wake.is_set()
    finally:
        stopping.set()
        thread.join(timeout=10)
        stopping.close()
    assert not thread.is_alive()
