"""The database-free parts of the read model: next runs, hour slots, per-name sums."""

import datetime as dt

from django_cronqueue import observe

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 3, 2, 12, 10, 30, tzinfo=UTC)


def test_next_runs_are_utc_instants():
    runs = observe.next_runs("30 2 * * *", "America/New_York", NOW, 2)
    assert runs == [
        dt.datetime(2026, 3, 3, 7, 30, tzinfo=UTC),
        dt.datetime(2026, 3, 4, 7, 30, tzinfo=UTC),
    ]
    assert all(run.utcoffset() == dt.timedelta(0) for run in runs)


def test_next_runs_of_an_unreadable_schedule_are_none():
    assert observe.next_runs("not cron", "UTC", NOW, 3) == []
    assert observe.next_runs("* * * * *", "Mars/Olympus", NOW, 3) == []


def test_hour_floor_is_the_utc_hour():
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert observe.hour_floor(NOW.astimezone(plus_two)) == dt.datetime(2026, 3, 2, 12, tzinfo=UTC)


def test_name_outcomes_sum_their_hours():
    hours = [
        observe.HourOutcomes(NOW, succeeded=3, failed=1),
        observe.HourOutcomes(NOW + dt.timedelta(hours=1), succeeded=2),
    ]
    line = observe.NameOutcomes("shop.send", hours, defined=True)
    assert (line.succeeded, line.failed, line.peak) == (5, 1, 4)
    assert observe.NameOutcomes("shop.send", [], defined=False).peak == 0


def test_oldest_pending_age_as_a_timedelta():
    oldest = observe.OldestPending(1, "shop.send", "default", NOW, age_seconds=90.5)
    assert oldest.age == dt.timedelta(seconds=90, milliseconds=500)


def test_liveness_is_three_leases():
    assert observe.LIVE_WORKER_LEASES == 3
    assert observe.live_window(10) == 30
