"""Cron schedules on a real database: materialization, DST, catch-up, pause, backfill."""

import datetime as dt
import json
import logging
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_cronqueue import jobs
from django_cronqueue.conf import get_settings
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import CronSchedule, Job
from django_cronqueue.schedules.scheduler import BACKFILL_CHUNK, Scheduler, this_process
from django_cronqueue.worker.tick import Housekeeping
from tests.cron_helpers import RUNS, UTC, local, minutes, schedule
from tests.factories import WorkerFactory


def materialize(now: dt.datetime) -> int:
    """What the housekeeping of this process's ticks does first."""
    return apps.get_app_config("django_cronqueue").housekeeping.scheduler.materialize(now)


def restart_scheduler() -> None:
    apps.get_app_config("django_cronqueue").housekeeping = Housekeeping()


pytestmark = pytest.mark.django_db(transaction=True)


def occurrences(name="tests.schedule"):
    return list(
        Job.objects.filter(name=name, scheduled_for__isnull=False)
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
    )


def tick_through(start, end, step=1):
    for now in minutes(start, end, step):
        materialize(now)


def utc(*args):
    return dt.datetime(*args, tzinfo=UTC)


def test_first_sight_arms_without_firing():
    armed_at = utc(2026, 6, 1, 12, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed_at)
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.cursor == armed_at
        assert row.next_run == utc(2026, 6, 1, 12, 1)
        assert occurrences() == []
        materialize(utc(2026, 6, 1, 12, 1, 5))
        assert occurrences() == [utc(2026, 6, 1, 12, 1)]


def test_every_occurrence_becomes_one_row_and_runs_with_its_scheduled_time():
    with schedule("*/15 * * * *", tz="Europe/Paris"):
        start = utc(2026, 6, 1, 10, 0, 30)
        for now in minutes(start, start + dt.timedelta(hours=1, minutes=1)):
            jobs.tick(now=now)
        expected = [utc(2026, 6, 1, 10, m) for m in (15, 30, 45)] + [utc(2026, 6, 1, 11, 0)]
        assert occurrences() == expected
        assert [run.scheduled_for for run in RUNS] == expected
        assert all(run.scheduled_for.tzinfo.key == "Europe/Paris" for run in RUNS)
        assert not any(run.catch_up for run in RUNS)
        assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}


DST_DAYS = [
    # zone, local day, daily expression, its one expected UTC instant, hourly runs that day
    ("America/New_York", (2026, 3, 8), "30 2 * * *", utc(2026, 3, 8, 7, 0), 23),
    ("America/New_York", (2026, 11, 1), "30 1 * * *", utc(2026, 11, 1, 5, 30), 25),
    ("Europe/London", (2026, 3, 29), "30 1 * * *", utc(2026, 3, 29, 1, 0), 23),
    ("Europe/London", (2026, 10, 25), "30 1 * * *", utc(2026, 10, 25, 0, 30), 25),
    # Lord Howe shifts by 30 minutes: 02:00 -> 02:30 on 2026-10-04, 02:00 -> 01:30 on
    # 2026-04-05. "0 * * * *" loses 02:00 in the gap (23 runs) but 01:00 is not
    # repeated (the repeated half hour is 01:30-01:59), so the fall-back day has 24.
    ("Australia/Lord_Howe", (2026, 10, 4), "15 2 * * *", utc(2026, 10, 3, 15, 30), 23),
    ("Australia/Lord_Howe", (2026, 4, 5), "45 1 * * *", utc(2026, 4, 4, 14, 45), 24),
]


@pytest.mark.parametrize(("zone", "day", "daily", "expected", "hourly_runs"), DST_DAYS)
def test_dst_days_create_exactly_the_occurrences_cron_would(
    zone, day, daily, expected, hourly_runs
):
    start = local(zone, *day, 0, 0)
    end = local(zone, *day, 0, 0) + dt.timedelta(days=1)
    end = dt.datetime(*(end.date().timetuple()[:3]), tzinfo=start.tzinfo)  # next local midnight
    with (
        schedule(daily, name="tests.daily", tz=zone),
        schedule("0 * * * *", name="tests.hourly", tz=zone),
    ):
        materialize(start - dt.timedelta(seconds=30))  # armed before the day
        tick_through(start, end + dt.timedelta(minutes=1))
        day_rows = [t for t in occurrences("tests.daily") if start <= t < end]
        assert day_rows == [expected]
        hourly = [t for t in occurrences("tests.hourly") if start <= t < end]
        assert len(hourly) == hourly_runs
        assert len(set(hourly)) == hourly_runs


def test_lord_howe_half_hourly_fall_back_repeats_the_half_hour():
    zone = "Australia/Lord_Howe"
    with schedule("30 * * * *", tz=zone):
        start, end = local(zone, 2026, 4, 5, 0, 0), local(zone, 2026, 4, 6, 0, 0)
        materialize(start - dt.timedelta(seconds=30))
        tick_through(start, end)
        # 01:30 happens twice (+11 then +10:30): 25 runs, 01:30 at 14:30 and 15:00 UTC.
        rows = occurrences()
        assert len(rows) == 25
        assert utc(2026, 4, 4, 14, 30) in rows and utc(2026, 4, 4, 15, 0) in rows


DOWNTIME = dt.timedelta(days=3)


@pytest.mark.parametrize(
    ("options", "expected_hours_ago"),
    [
        ({"catch_up": "latest"}, [0]),
        ({"catch_up": "all"}, [0]),  # default window: one hour
        (
            {"catch_up": "all", "catch_up_window": dt.timedelta(days=1), "max_catch_up": 5},
            [4, 3, 2, 1, 0],
        ),
        # the window starts at 21:00:30, after the 21:00 occurrence
        ({"catch_up": "all", "catch_up_window": dt.timedelta(hours=3, minutes=30)}, [2, 1, 0]),
        ({"catch_up": "none"}, []),
    ],
)
def test_catch_up_modes_after_three_days_of_downtime(options, expected_hours_ago):
    armed = utc(2026, 6, 1, 0, 0, 30)
    back = armed + DOWNTIME + dt.timedelta(minutes=30)  # 2026-06-04 00:30:30
    last_missed = utc(2026, 6, 4, 0, 0)
    with schedule("0 * * * *", tz="UTC", **options):
        materialize(armed)
        jobs.tick(now=back)
        expected = [last_missed - dt.timedelta(hours=h) for h in expected_hours_ago]
        assert occurrences() == expected
        assert [run.scheduled_for for run in RUNS] == expected
        assert all(run.catch_up for run in RUNS)
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.cursor == back
        assert row.next_run == utc(2026, 6, 4, 1, 0)


def test_a_paused_schedule_creates_nothing_and_resuming_follows_catch_up():
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("*/10 * * * *", tz="UTC"):
        materialize(armed)
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.pause() is True
        assert row.pause() is False
        tick_through(armed, armed + dt.timedelta(hours=1), step=5)
        assert occurrences() == []
        assert row.resume() is True
        now = utc(2026, 6, 1, 1, 2)
        materialize(now)
        assert occurrences() == [utc(2026, 6, 1, 1, 0)]  # "latest" of the missed ones


def test_a_schedule_removed_from_code_is_marked_inactive_and_never_fired(caplog):
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed)
    assert "tests.schedule" not in registry
    with caplog.at_level(logging.INFO, logger="django_cronqueue"):
        jobs.tick(now=armed + dt.timedelta(minutes=10))
    row = CronSchedule.objects.get(name="tests.schedule")
    assert row.active is False
    assert occurrences() == []
    assert warnings(caplog) == [
        f"Cron schedule tests.schedule is no longer defined in code: marked inactive by "
        f"{this_process()}, as no live worker defines it either (a process that defines it "
        "marks it active again)"
    ]
    caplog.clear()
    with schedule("* * * * *", tz="UTC"), caplog.at_level(logging.INFO, logger="django_cronqueue"):
        Scheduler("worker w2").materialize(armed + dt.timedelta(minutes=11, seconds=1))
        row.refresh_from_db()
        assert row.active is True
    assert warnings(caplog) == [
        "Cron schedule tests.schedule is defined in code again: marked active by worker w2 (it "
        "was inactive; its catch-up policy decides which missed occurrences run)"
    ]


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def lease():
    return dt.timedelta(seconds=get_settings().LEASE)


def test_a_worker_that_lacks_a_schedule_a_live_worker_defines_leaves_it_active(caplog):
    """A worker whose DISCOVER misses the module of a schedule starts beside workers
    that define it: nothing changes, and nothing flaps when the next one starts."""
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        Scheduler("worker full").materialize(armed)
    WorkerFactory(id="full", job_names=["tests.schedule", "testapp.noop"], last_seen=armed)
    lacking = Scheduler("worker lacking")
    now = armed + dt.timedelta(seconds=20)
    with caplog.at_level(logging.INFO, logger="django_cronqueue"):
        lacking.materialize(now)
        lacking.materialize(now + dt.timedelta(seconds=1))
        assert CronSchedule.objects.get(name="tests.schedule").active is True
        with schedule("* * * * *", tz="UTC"):  # the next full worker starts: nothing to do
            Scheduler("worker full-2").materialize(now + dt.timedelta(minutes=1, seconds=1))
    assert warnings(caplog) == []
    assert (
        caplog.text.count(
            "Cron schedule tests.schedule is not defined in the code of worker lacking, but a live "
            "worker defines it: left active (this process does not create its occurrences)"
        )
        == 1
    )
    assert occurrences() == [utc(2026, 6, 1, 0, 1)]  # by the worker that defines it


def test_a_schedule_left_active_for_a_worker_goes_inactive_once_that_worker_is_gone(caplog):
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed)
    full = WorkerFactory(job_names=["tests.schedule"], last_seen=armed)
    lacking = Scheduler("worker lacking")
    lacking.materialize(armed)
    full.delete()  # it stopped (a worker deletes its row as it exits)
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        lacking.materialize(armed + lease())
    assert CronSchedule.objects.get(name="tests.schedule").active is False
    assert warnings(caplog) == [
        "Cron schedule tests.schedule is no longer defined in code: marked inactive by worker "
        "lacking, as no live worker defines it either (a process that defines it marks it "
        "active again)"
    ]


@pytest.mark.parametrize("other", ["dead", "older version", "defines other names"])
def test_only_a_live_worker_that_recorded_the_name_keeps_a_schedule_active(other):
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed)
    if other == "dead":  # its heartbeat stopped more than three leases ago
        WorkerFactory(job_names=["tests.schedule"], last_seen=armed - 3 * lease() - ONE_SECOND)
    elif other == "older version":  # it records no names
        WorkerFactory(job_names=None, last_seen=armed)
    else:
        WorkerFactory(job_names=["testapp.noop"], last_seen=armed)
    Scheduler("worker lacking").materialize(armed)
    assert CronSchedule.objects.get(name="tests.schedule").active is False


ONE_SECOND = dt.timedelta(seconds=1)


def test_run_now_enqueues_a_manual_run_without_touching_the_schedule():
    with schedule("0 0 1 1 *", tz="Asia/Tokyo"):
        materialize(utc(2026, 6, 1))
        row = CronSchedule.objects.get(name="tests.schedule")
        cursor = row.cursor
        job = row.run_now()
        assert job.scheduled_for is None and job.status == "pending"
        jobs.tick()
        assert len(RUNS) == 1
        assert RUNS[0].scheduled_for == job.created_at
        assert RUNS[0].scheduled_for.tzinfo.key == "Asia/Tokyo"
        assert RUNS[0].catch_up is False
        row.refresh_from_db()
        assert row.cursor == cursor


def test_backfill_creates_missing_occurrences_exactly_once():
    with schedule("0 * * * *", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        start, end = utc(2026, 6, 1, 0, 0), utc(2026, 6, 1, 6, 0)
        assert row.backfill(start, end) == 6  # [00:00, 06:00): 6 hours
        assert row.backfill(start, end) == 0
        assert row.backfill(start, end + dt.timedelta(hours=1)) == 1
        assert occurrences() == [utc(2026, 6, 1, h) for h in range(7)]


def test_backfill_creates_at_most_1000_per_call():
    with schedule("* * * * *", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        start = utc(2026, 6, 1)
        assert row.backfill(start, start + dt.timedelta(minutes=1500)) == 1000
        assert row.backfill(start, start + dt.timedelta(minutes=1500)) == 500
        assert len(occurrences()) == 1500


@pytest.mark.parametrize(
    "end",
    [
        utc(2126, 1, 1),  # a century of minutes: 52 million occurrences
        dt.datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
        dt.datetime.max.replace(tzinfo=UTC),
    ],
)
def test_backfill_stops_enumerating_at_the_cap(bounded_enumeration, end):
    with schedule("* * * * *", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.backfill(utc(2026, 1, 1), end) == 1000
        assert len(bounded_enumeration) <= 1000 + 2 * BACKFILL_CHUNK
        assert occurrences() == [utc(2026, 1, 1) + n * dt.timedelta(minutes=1) for n in range(1000)]


def test_backfill_past_existing_rows_reads_them_a_chunk_at_a_time(bounded_enumeration):
    with schedule("* * * * *", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        start = utc(2026, 1, 1)
        assert row.backfill(start, utc(2126, 1, 1)) == 1000
        del bounded_enumeration[:]
        with CaptureQueriesContext(connection) as captured:
            assert row.backfill(start, utc(2126, 1, 1)) == 1000
        assert len(bounded_enumeration) <= 2000 + 2 * BACKFILL_CHUNK
        # a lookup per chunk walked (4), and create_occurrences' own for the 2 it filled
        lookups = [q for q in captured if q["sql"].startswith('SELECT "django_cronqueue_job"')]
        assert len(lookups) <= 2000 // BACKFILL_CHUNK + 1000 // BACKFILL_CHUNK
        assert len(occurrences()) == 2000


def test_backfill_of_the_last_years_before_10000():
    with schedule("@yearly", tz="Pacific/Kiritimati"):  # UTC+14
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.backfill(utc(9990, 1, 1), dt.datetime.max.replace(tzinfo=UTC)) == 9
        assert occurrences()[-1] == dt.datetime(9999, 1, 1, tzinfo=ZoneInfo("Pacific/Kiritimati"))


@pytest.mark.parametrize(
    ("start", "end", "problem"),
    [
        (
            utc(2026, 1, 1),
            dt.datetime(9999, 12, 31, 23, tzinfo=ZoneInfo("Etc/GMT+12")),  # UTC-12
            "backfill\\(\\) end=9999-12-31T23:00:00-12:00 is out of range: in UTC it falls outside "
            "the years 1 to 9999; pass an earlier end.",
        ),
        (
            dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=14))),
            utc(2026, 1, 1),
            "backfill\\(\\) start=0001-01-01T00:00:00\\+14:00 is out of range",
        ),
        (dt.datetime(2026, 1, 1), utc(2026, 1, 2), "needs an aware datetime for start"),
    ],
)
def test_backfill_refuses_a_bound_with_no_utc_equivalent(bounded_enumeration, start, end, problem):
    with schedule("* * * * *", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        with pytest.raises(ValueError, match=problem):
            row.backfill(start, end)
        assert occurrences() == []


def test_backfill_from_the_first_instant_python_knows():
    with schedule("@yearly", tz="UTC"):
        materialize(utc(2026, 6, 10))
        row = CronSchedule.objects.get(name="tests.schedule")
        first = dt.datetime.min.replace(tzinfo=UTC)
        assert row.backfill(first, utc(5, 1, 1)) == 3  # years 2, 3 and 4
        assert occurrences() == [utc(year, 1, 1) for year in (2, 3, 4)]


def test_overlap_skip_cancels_an_occurrence_while_the_previous_is_pending():
    with schedule("* * * * *", tz="UTC", overlap="skip"):
        start = utc(2026, 6, 1, 0, 0, 30)
        materialize(start)
        materialize(start + dt.timedelta(minutes=1))  # 00:01, pending, not run
        materialize(start + dt.timedelta(minutes=2))  # 00:02 comes due
        first, second = Job.objects.filter(name="tests.schedule").order_by("scheduled_for")
        assert first.status == "pending"
        assert second.status == "cancelled"
        assert "skipped" in second.last_error and f"#{first.pk}" in second.last_error
        assert jobs.tick(now=start + dt.timedelta(minutes=2, seconds=5)).ran == 1
        assert len(RUNS) == 1 and RUNS[0].scheduled_for == first.scheduled_for


def test_overlap_allow_runs_every_occurrence():
    with schedule("* * * * *", tz="UTC"):
        start = utc(2026, 6, 1, 0, 0, 30)
        materialize(start)
        materialize(start + dt.timedelta(minutes=1))
        materialize(start + dt.timedelta(minutes=2))
        assert set(Job.objects.values_list("status", flat=True)) == {"pending"}


def test_changing_the_expression_in_code_updates_the_row():
    with schedule("0 * * * *", tz="UTC"):
        materialize(utc(2026, 6, 1, 0, 0, 30))
    with schedule("30 * * * *", tz="UTC"):
        materialize(utc(2026, 6, 1, 0, 1))
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.expression == "30 * * * *"
        assert row.next_run == utc(2026, 6, 1, 0, 30)


def test_a_tick_with_nothing_due_loads_only_the_due_rows():
    """Once synced, a tick reads the due rows and its own schedules' rows in one query,
    not every row."""
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("0 0 1 1 *", tz="UTC"), schedule("0 0 1 1 *", name="tests.other", tz="UTC"):
        materialize(armed)
        with CaptureQueriesContext(connection) as queries:
            assert materialize(armed + dt.timedelta(minutes=5)) == 0
    [read] = [query["sql"] for query in queries.captured_queries]
    where = read.split("WHERE")[1]
    assert "next_run" in where and "tests.other" in where and "ORDER BY" not in where


def test_a_deleted_schedule_row_is_recreated_by_the_next_tick():
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed)
        CronSchedule.objects.filter(name="tests.schedule").delete()
        materialize(armed + dt.timedelta(minutes=1))
        row = CronSchedule.objects.get(name="tests.schedule")
        assert row.cursor == armed + dt.timedelta(minutes=1)  # armed again: nothing fired
        assert occurrences() == []
        materialize(armed + dt.timedelta(minutes=2))
        assert occurrences() == [utc(2026, 6, 1, 0, 2)]


def test_a_row_marked_inactive_elsewhere_is_reactivated_by_a_process_with_the_code(caplog):
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("* * * * *", tz="UTC"):
        materialize(armed)
        CronSchedule.objects.filter(name="tests.schedule").update(active=False)
        with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
            materialize(armed + dt.timedelta(minutes=1))
        assert CronSchedule.objects.get(name="tests.schedule").active is True
    assert warnings(caplog) == [
        f"Cron schedule tests.schedule is defined in code again: marked active by "
        f"{this_process()} (it was inactive; its catch-up policy decides which missed "
        "occurrences run)"
    ]


def test_a_starting_worker_brings_an_edited_row_back_in_line_with_the_code():
    armed = utc(2026, 6, 1, 0, 0, 30)
    with schedule("0 * * * *", tz="UTC"):
        materialize(armed)
        CronSchedule.objects.filter(name="tests.schedule").update(expression="*/5 * * * *")
        restart_scheduler()  # a starting worker brings a fresh Scheduler
        materialize(armed + dt.timedelta(minutes=1))
        assert CronSchedule.objects.get(name="tests.schedule").expression == "0 * * * *"


def test_cronqueue_schedules_json_lists_next_runs_in_utc_and_local():
    with schedule("30 1 * * *", name="tests.nightly", tz="America/New_York"):
        out = StringIO()
        call_command(
            "cronqueue_schedules", "--json", "--now", "2026-10-31T12:00:00+00:00", stdout=out
        )
        [item] = json.loads(out.getvalue())
        assert item["name"] == "tests.nightly"
        assert item["expression"] == "30 1 * * *"
        assert item["catch_up"] == "latest" and item["overlap"] == "allow"
        assert item["paused"] is False
        runs = item["next_runs"]
        assert len(runs) == 5
        assert runs[0] == {"utc": "2026-11-01T05:30:00+00:00", "local": "2026-11-01T01:30:00-04:00"}
        assert runs[1] == {"utc": "2026-11-02T06:30:00+00:00", "local": "2026-11-02T01:30:00-05:00"}
