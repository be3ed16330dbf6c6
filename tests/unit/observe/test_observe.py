"""The database-free parts of the read model: next runs, hour slots, per-name sums."""

import datetime as dt

import pytest

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


# --- progress (Job.progress, written by the worker) --------------------------------


def test_progress_is_read_from_what_set_progress_writes():
    progress = observe.progress_of(
        {"done": 3, "total": 10, "message": "chunk 3", "at": "2026-03-02T12:10:30+00:00"}
    )
    assert progress == observe.Progress(3.0, 10.0, "chunk 3", NOW.replace(second=30))
    assert (progress.fraction, progress.percent) == (0.3, 30)
    assert progress.describe() == "3/10 (30%): chunk 3"


@pytest.mark.parametrize(
    ("value", "text", "percent"),
    [
        ({"done": 1200, "total": None, "message": ""}, "1,200 done", None),
        ({"done": 2.5, "total": 4, "message": "x"}, "2.5/4 (62%): x", 62),
        ({"done": 12, "total": 10, "message": ""}, "12/10 (100%)", 100),  # clamped
        ({"done": -1, "total": 10, "message": ""}, "-1/10 (0%)", 0),
        ({"done": 3, "total": 0, "message": ""}, "3/0", None),
        ({"done": 1, "total": 3, "message": 7}, "1/3 (33%)", 33),  # not a string: dropped
    ],
)
def test_progress_describes_itself(value, text, percent):
    progress = observe.progress_of(value)
    assert progress.describe() == text
    assert progress.percent == percent


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        "3/10",
        {},
        {"done": "3"},
        {"done": True, "total": 10},
        {"done": float("nan")},
        {"done": 1, "total": "10"},
        {"done": 1, "total": float("inf")},
    ],
)
def test_anything_else_is_no_progress(value):
    assert observe.progress_of(value) is None


@pytest.mark.parametrize("at", ["yesterday", "2026-13-45T99:00", 17, None])
def test_an_unreadable_instant_is_unknown(at):
    assert observe.progress_of({"done": 1, "total": 2, "at": at}).at is None
