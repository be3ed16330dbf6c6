"""notify.due_soon: which run_at deserves a wake-up; SelectableEvent. Database-free; the
NOTIFY itself is tested in tests/db/db/test_notify.py."""

import datetime as dt
import select
import threading

from django.test import override_settings

from django_cronqueue.db.notify import SelectableEvent, due_soon

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def test_due_now_or_in_the_past_is_due_soon():
    assert due_soon(NOW, NOW)
    assert due_soon(NOW - dt.timedelta(days=3), NOW)


def test_due_soon_means_before_the_next_poll():
    with override_settings(CRONQUEUE={"POLL_INTERVAL": 2}):
        assert due_soon(NOW + dt.timedelta(seconds=2), NOW)
        assert not due_soon(NOW + dt.timedelta(seconds=2, microseconds=1), NOW)
    with override_settings(CRONQUEUE={"POLL_INTERVAL": 30}):
        assert due_soon(NOW + dt.timedelta(seconds=29), NOW)


# --- SelectableEvent: an Event a select() wakes on ----------------------------------


def test_a_selectable_event_wakes_a_select_when_set_and_stays_an_event():
    event = SelectableEvent()
    try:
        assert select.select([event], [], [], 0) == ([], [], [])
        setter = threading.Timer(0.05, event.set)
        setter.start()
        readable, _, _ = select.select([event], [], [], 30)
        setter.join()
        assert readable == [event]
        assert event.is_set() and event.wait(0)
    finally:
        event.close()


def test_a_selectable_event_set_before_its_first_fileno_is_readable_at_once():
    event = SelectableEvent()
    event.set()
    try:
        assert select.select([event], [], [], 0)[0] == [event]
    finally:
        event.close()


def test_setting_a_selectable_event_many_times_or_after_close_never_raises():
    event = SelectableEvent()
    event.fileno()
    for _ in range(100_000):  # more than a socket buffer holds
        event.set()
    event.close()
    event.set()
    assert event.is_set()
