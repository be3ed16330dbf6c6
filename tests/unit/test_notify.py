"""notify.due_soon: which run_at deserves a wake-up. Database-free; the NOTIFY itself is
tested in tests/db/test_notify.py."""

import datetime as dt

from django.test import override_settings

from django_cronqueue.notify import due_soon

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
