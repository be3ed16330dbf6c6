"""Dynamic schedules on a real database: create, edit, delete, their checks, and the
section 4 guarantees (one row per occurrence, arming, DST, catch-up, overlap, pause, run
now, backfill) for schedules made at run time."""

import datetime as dt
import json
import logging
import re
from io import StringIO

import pytest
from cronsim import CronSim
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import CronSchedule, Job
from django_cronqueue.schedules import dynamic
from django_cronqueue.schedules.dynamic import dynamic_target
from django_cronqueue.schedules.scheduler import materialize_schedule
from tests.cron_helpers import UTC, local, minutes, schedule
from tests.factories import dynamic_schedules
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = "testapp.send_report"


def utc(*args):
    return dt.datetime(*args, tzinfo=UTC)


def materialize(now: dt.datetime) -> int:
    """What the housekeeping of this process's ticks does first."""
    return apps.get_app_config("django_cronqueue").housekeeping.scheduler.materialize(now)


def create(armed_at, name="reports.tenant-42", **options):
    """A dynamic schedule created at ``armed_at`` (create_dynamic, with the clock set)."""
    options = {"job": REPORT, "payload": {"tenant_id": 42}, "expression": "0 8 * * *", **options}
    return dynamic.create(now=armed_at, name=name, **options)


def rows(schedule_name="reports.tenant-42"):
    return list(
        Job.objects.filter(schedule=schedule_name, scheduled_for__isnull=False)
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
    )


def tick_through(start, end, step=1):
    for now in minutes(start, end, step):
        materialize(now)


# --- create -------------------------------------------------------------------------


def test_create_dynamic_stores_the_schedule_and_arms_it_at_its_creation():
    before = timezone.now()
    schedule = CronSchedule.objects.create_dynamic(
        name="reports.tenant-42",
        job=REPORT,
        payload={"tenant_id": 42},
        expression="0 8 * * 1-5",
        tz="Europe/Paris",
        catch_up="all",
        max_catch_up=3,
        overlap="skip",
        retries=1,
        queue="reports",
        priority=5,
    )
    row = CronSchedule.objects.get(name="reports.tenant-42")
    assert row.pk == schedule.pk
    assert (row.source, row.is_dynamic, row.job) == ("dynamic", True, REPORT)
    assert row.payload == {"tenant_id": 42}
    assert (row.expression, row.tz, row.active, row.paused) == (
        "0 8 * * 1-5",
        "Europe/Paris",
        True,
        False,
    )
    assert row.options == {
        "catch_up": "all",
        "catch_up_window": None,
        "max_catch_up": 3,
        "overlap": "skip",
        "retries": 1,
        "queue": "reports",
        "priority": 5,
    }
    assert before <= row.cursor <= timezone.now()
    assert row.next_run > row.cursor


def test_a_job_handle_names_the_job_too():
    from tests.testapp.jobs import send_report

    schedule = CronSchedule.objects.create_dynamic(
        name="reports.handle", job=send_report, payload={"tenant_id": 1}, expression="@daily"
    )
    assert schedule.job == REPORT
    assert schedule.tz == "UTC"  # settings.TIME_ZONE


def test_nothing_before_the_creation_fires():
    armed = utc(2026, 6, 1, 8, 0, 30)  # 30 s after an occurrence
    create(armed, expression="* * * * *", tz="UTC", catch_up="all")
    materialize(armed + dt.timedelta(seconds=20))
    assert rows() == []
    materialize(utc(2026, 6, 1, 8, 1, 5))
    assert rows() == [utc(2026, 6, 1, 8, 1)]


def test_the_handler_gets_the_payload_and_reads_the_occurrence_from_jobs_current():
    armed = utc(2026, 6, 1, 7, 59)
    create(
        armed, tz="Europe/Paris", expression="0 10 * * *", payload={"tenant_id": 7, "format": "pdf"}
    )
    result = jobs.tick(now=utc(2026, 6, 1, 8, 0, 10))
    assert (result.claimed, result.ran, result.failed) == (1, 1, 0)
    assert list(SideEffect.objects.values_list("key", flat=True)) == [
        "report 7 pdf 2026-06-01T08:00:00+00:00"
    ]
    [job] = Job.objects.all()
    assert (job.name, job.schedule, job.payload) == (
        REPORT,
        "reports.tenant-42",
        {"tenant_id": 7, "format": "pdf"},
    )


def test_the_stored_options_shape_the_rows():
    create(utc(2026, 6, 1, 7, 59), tz="UTC", retries=0, queue="reports", priority=-3)
    materialize(utc(2026, 6, 1, 8, 0, 10))
    [job] = Job.objects.all()
    assert (job.max_attempts, job.queue, job.priority) == (1, "reports", -3)


def test_two_dynamic_schedules_of_one_job_at_one_instant_each_get_their_row():
    armed = utc(2026, 6, 1, 7, 59)
    create(armed, name="reports.tenant-42", tz="UTC")
    create(armed, name="reports.tenant-43", tz="UTC", payload={"tenant_id": 43})
    assert materialize(utc(2026, 6, 1, 8, 0, 10)) == 2
    assert rows("reports.tenant-42") == rows("reports.tenant-43") == [utc(2026, 6, 1, 8)]
    assert Job.objects.filter(name=REPORT).count() == 2


def test_a_second_materialization_from_the_same_cursor_creates_nothing():
    create(utc(2026, 6, 1, 7, 59), tz="UTC")
    read = CronSchedule.objects.get(name="reports.tenant-42")
    stale = CronSchedule.objects.get(name="reports.tenant-42")  # read by another process
    now = utc(2026, 6, 1, 8, 0, 10)
    assert materialize_schedule(dynamic_target(read), read, now) == 1
    assert materialize_schedule(dynamic_target(stale), stale, now) == 0
    assert rows() == [utc(2026, 6, 1, 8)]


# --- the checks -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"job": "shop.nope"}, jobs.UnknownJob, "No job is named 'shop.nope'"),
        (
            {"payload": {"tenant": 42}},
            jobs.InvalidPayload,
            "payload key 'tenant' is not an argument",
        ),
        ({"payload": {}}, jobs.InvalidPayload, "payload key 'tenant_id' is missing"),
        (
            {"payload": {"tenant_id": {1, 2}}},
            jobs.InvalidPayload,
            "payload key 'tenant_id'",
        ),
        ({"expression": "61 * * * *"}, ValueError, "field 'minute' value 61 is out of range"),
        ({"tz": "Bogota"}, ValueError, "did you mean 'America/Bogota'?"),
        ({"tz": "America/NewYork"}, ValueError, "did you mean 'America/New_York'?"),
        ({"expression": "*/90 * * * *"}, ValueError, "'*/90' has a step of 90"),
        ({"expression": "*/61 * * * *"}, ValueError, "step of 61"),
        ({"expression": "0 0 31 2 *"}, ValueError, "it can never run: February never has a day 31"),
        ({"catch_up": "some"}, ValueError, "option catch_up= must be one of"),
        ({"overlap": "queue"}, ValueError, "option overlap= must be 'allow' or 'skip'"),
        ({"retries": -1}, ValueError, "retries= must be an integer >= 0"),
        ({"queue": ""}, ValueError, "queue= must be a non-empty string"),
        ({"priority": 2**40}, ValueError, "priority= must be an integer from"),
        ({"timeout": 30}, TypeError, "unexpected keyword argument 'timeout'"),
        ({"name": ""}, ValueError, "name must be a non-empty string"),
    ],
)
def test_create_dynamic_checks_everything_before_writing(options, error, message):
    arguments = {
        "name": "reports.tenant-42",
        "job": REPORT,
        "payload": {"tenant_id": 42},
        "expression": "0 8 * * *",
        **options,
    }
    with pytest.raises(error) as raised:
        CronSchedule.objects.create_dynamic(**arguments)
    assert message in str(raised.value)
    assert not CronSchedule.objects.exists()


# A valid expression of 237 characters: every minute of every hour, spelled out.
LONG_EXPRESSION = ",".join(map(str, range(60))) + " " + ",".join(map(str, range(24))) + " * * *"


def test_an_expression_longer_than_the_column_is_refused_before_writing_on_every_vendor():
    assert len(LONG_EXPRESSION) == 237
    with pytest.raises(ValueError, match="237 characters long; at most 200") as raised:
        CronSchedule.objects.create_dynamic(
            name="reports.tenant-42",
            job=REPORT,
            payload={"tenant_id": 42},
            expression=LONG_EXPRESSION,
        )
    assert "'reports.tenant-42'" in str(raised.value)
    assert not CronSchedule.objects.exists()
    row = create(utc(2026, 6, 1))
    with pytest.raises(ValueError, match="at most 200"):
        row.edit(expression=LONG_EXPRESSION)
    row.refresh_from_db()
    assert row.expression == "0 8 * * *"
    row.edit(expression=",".join(map(str, range(60))) + " 8 * * *")  # 177: stored
    row.refresh_from_db()
    assert len(row.expression) <= 200


def test_a_cron_handler_cannot_be_the_job_of_a_dynamic_schedule():
    with schedule("* * * * *", name="tests.cron_job"), pytest.raises(jobs.UnknownJob) as raised:
        CronSchedule.objects.create_dynamic(name="x", job="tests.cron_job", expression="@daily")
    assert "is a @jobs.cron schedule, not a @jobs.job" in str(raised.value)


def test_a_taken_name_is_refused():
    create(utc(2026, 6, 1))
    with pytest.raises(ValueError, match=r"'reports\.tenant-42' exists already"):
        create(utc(2026, 6, 2))
    with (
        schedule("* * * * *", name="tests.code"),
        pytest.raises(ValueError, match="defined in code"),
    ):
        create(utc(2026, 6, 2), name="tests.code")


# --- edit ---------------------------------------------------------------------------


def test_an_edit_of_the_payload_keeps_the_cursor_and_is_seen_at_the_next_tick():
    armed = utc(2026, 6, 1, 7, 59)
    schedule_row = create(armed, tz="UTC", expression="* * * * *")
    materialize(utc(2026, 6, 1, 8, 0, 10))  # this process's scheduler has read the row
    dynamic.edit(
        schedule_row, {"payload": {"tenant_id": 42, "format": "pdf"}}, now=utc(2026, 6, 1, 8, 0, 20)
    )
    row = CronSchedule.objects.get(pk=schedule_row.pk)
    assert row.cursor == utc(2026, 6, 1, 8, 0, 10)  # not re-armed
    materialize(utc(2026, 6, 1, 8, 1, 10))
    payloads = list(Job.objects.order_by("scheduled_for").values_list("payload", flat=True))
    assert payloads == [{"tenant_id": 42}, {"tenant_id": 42, "format": "pdf"}]


def test_an_edit_of_the_expression_re_arms_at_the_edit():
    armed = utc(2026, 6, 1, 0, 0)
    schedule_row = create(armed, tz="UTC", expression="0 9 * * *", catch_up="all")
    edited = utc(2026, 6, 1, 8, 40)
    # Downtime since 06:00: 06:30, 07:30 and 08:30 match the new rule, but came before the edit.
    dynamic.edit(schedule_row, {"expression": "30 * * * *"}, now=edited)
    assert (schedule_row.cursor, schedule_row.next_run) == (edited, utc(2026, 6, 1, 9, 30))
    materialize(utc(2026, 6, 1, 9, 30, 5))
    assert rows() == [utc(2026, 6, 1, 9, 30)]


def test_an_edit_of_the_zone_re_arms_too():
    schedule_row = create(utc(2026, 6, 1), tz="UTC")
    schedule_row.edit(tz="Europe/Paris")
    row = CronSchedule.objects.get(pk=schedule_row.pk)
    assert row.tz == "Europe/Paris" and row.cursor > utc(2026, 6, 1)


def test_an_edit_is_checked_as_a_whole_and_writes_nothing_when_refused():
    schedule_row = create(utc(2026, 6, 1), tz="UTC")
    with pytest.raises(jobs.InvalidPayload, match="'tenant_id' is not an argument"):
        schedule_row.edit(job="testapp.record", expression="@hourly")  # keeps the old payload
    with pytest.raises(TypeError, match="unknown option"):
        schedule_row.edit(name="other")
    row = CronSchedule.objects.get(pk=schedule_row.pk)
    assert (row.job, row.expression) == (REPORT, "0 8 * * *")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expression": "0 */25 * * *"}, "step of 25"),
        ({"expression": "0 0 30 2 *"}, "it can never run: February never has a day 30"),
        ({"tz": "Europe/Pari"}, "did you mean 'Europe/Paris'?"),
    ],
)
def test_an_edit_refuses_what_cannot_mean_what_it_says(change, message):
    schedule_row = create(utc(2026, 6, 1), tz="UTC")
    with pytest.raises(ValueError, match=re.escape(message)):
        schedule_row.edit(**change)
    row = CronSchedule.objects.get(pk=schedule_row.pk)
    assert (row.expression, row.tz) == ("0 8 * * *", "UTC")


def test_a_dynamic_schedule_follows_the_day_rule():
    """ "*/1" leaves the day of the month unrestricted: Mondays only, as in Debian cron;
    "SEP-9" is September alone."""
    row = create(utc(2026, 6, 2), expression="0 8 */1 * MON", tz="UTC")  # a Tuesday
    assert row.next_run == utc(2026, 6, 8, 8)
    dynamic.edit(row, {"expression": "0 8 1 SEP-9 *"}, now=utc(2026, 6, 2))
    assert CronSchedule.objects.get(pk=row.pk).next_run == utc(2026, 9, 1, 8)


def test_code_schedules_cannot_be_edited_or_deleted():
    with schedule("* * * * *", name="tests.code"):
        materialize(utc(2026, 6, 1))
        row = CronSchedule.objects.get(name="tests.code")
        assert row.source == "code"
        with pytest.raises(ValueError, match=r"change or remove its @jobs\.cron decorator"):
            row.edit(expression="@daily")
        with pytest.raises(ValueError, match="defined in code"):
            row.delete()
        assert CronSchedule.objects.get(name="tests.code").expression == "* * * * *"


# --- delete -------------------------------------------------------------------------


def test_delete_stops_future_occurrences_and_keeps_the_rows():
    schedule_row = create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *")
    materialize(utc(2026, 6, 1, 8, 0, 5))
    assert schedule_row.delete()[0] == 1
    materialize(utc(2026, 6, 1, 8, 1, 5))
    assert not CronSchedule.objects.exists()
    assert rows() == [utc(2026, 6, 1, 8)]


def test_a_scheduler_that_read_the_row_before_its_delete_creates_nothing():
    create(utc(2026, 6, 1, 7, 59), tz="UTC")
    read = CronSchedule.objects.get(name="reports.tenant-42")
    CronSchedule.objects.get(name="reports.tenant-42").delete()
    assert materialize_schedule(dynamic_target(read), read, utc(2026, 6, 1, 8, 0, 5)) == 0
    assert not Job.objects.exists()


# --- section 4's guarantees ---------------------------------------------------------


def test_pause_and_resume_follow_the_catch_up_policy():
    schedule_row = create(utc(2026, 6, 1, 7, 0), tz="UTC", expression="*/10 * * * *")
    assert schedule_row.pause()
    tick_through(utc(2026, 6, 1, 7, 0, 30), utc(2026, 6, 1, 7, 31), step=10)
    assert rows() == []
    assert schedule_row.resume()
    materialize(utc(2026, 6, 1, 7, 35))
    assert rows() == [utc(2026, 6, 1, 7, 30)]  # "latest": the most recent missed one


def test_run_now_enqueues_one_manual_run_with_the_payload():
    schedule_row = CronSchedule.objects.create_dynamic(
        name="reports.tenant-42", job=REPORT, payload={"tenant_id": 42}, expression="0 8 1 1 *"
    )
    job = schedule_row.run_now()
    assert (job.name, job.schedule, job.scheduled_for) == (REPORT, "reports.tenant-42", None)
    assert job.payload == {"tenant_id": 42}
    assert jobs.tick().ran == 1
    # Its handler sees the request time as the occurrence, as a code schedule's does.
    assert list(SideEffect.objects.values_list("key", flat=True)) == [
        f"report 42 html {job.created_at.isoformat()}"
    ]
    row = CronSchedule.objects.get(pk=schedule_row.pk)
    assert (row.cursor, row.last_occurrence) == (schedule_row.cursor, None)


def test_backfill_creates_the_missing_occurrences_once():
    schedule_row = create(utc(2026, 6, 5), tz="UTC", expression="0 8 * * *")
    assert schedule_row.backfill(utc(2026, 6, 1), utc(2026, 6, 4)) == 3
    assert schedule_row.backfill(utc(2026, 6, 1), utc(2026, 6, 5)) == 1
    assert rows() == [utc(2026, 6, day, 8) for day in (1, 2, 3, 4)]


def test_overlap_skip_cancels_an_occurrence_while_the_previous_one_is_pending():
    create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *", overlap="skip")
    materialize(utc(2026, 6, 1, 8, 0, 5))
    materialize(utc(2026, 6, 1, 8, 1, 5))
    statuses = list(Job.objects.order_by("scheduled_for").values_list("status", "last_error"))
    assert statuses[0] == ("pending", "")
    assert statuses[1][0] == "cancelled" and "skipped (overlap='skip')" in statuses[1][1]


def test_catch_up_all_after_downtime_runs_the_most_recent_missed_ones_oldest_first():
    create(
        utc(2026, 6, 1, 7, 0), tz="UTC", expression="*/10 * * * *", catch_up="all", max_catch_up=2
    )
    materialize(utc(2026, 6, 1, 7, 45))
    assert rows() == [utc(2026, 6, 1, 7, 30), utc(2026, 6, 1, 7, 40)]


def test_the_same_unique_occurrence_holds_for_code_schedules():
    with schedule("0 8 * * *", tz="UTC") as definition:
        materialize(utc(2026, 6, 1, 7, 59))
        materialize(utc(2026, 6, 1, 8, 0, 5))
        row = CronSchedule.objects.get(name=definition.name)
        assert row.backfill(utc(2026, 6, 1), utc(2026, 6, 2)) == 0
        assert list(Job.objects.values_list("name", "schedule")) == [(definition.name, "")]


def cron_oracle(expression, zone, start, end):
    """The instants cronsim (Debian cron's DST rules) fires in [start, end), in UTC."""
    instants = []
    for instant in CronSim(expression, start - dt.timedelta(seconds=1)):
        if instant >= end:
            return instants
        instants.append(instant.astimezone(UTC))
    return instants


@pytest.mark.parametrize(
    ("zone", "day", "daily"),
    [
        ("America/New_York", (2026, 3, 8), "30 2 * * *"),  # spring-forward gap
        ("America/New_York", (2026, 11, 1), "30 1 * * *"),  # repeated fall-back hour
        ("Australia/Lord_Howe", (2026, 10, 4), "15 2 * * *"),
    ],
)
def test_dst_days_run_as_debian_cron_does(zone, day, daily):
    start = local(zone, *day, 0, 0)
    end = local(zone, *(start + dt.timedelta(days=1, hours=3)).timetuple()[:3], 0, 0)
    armed = start - dt.timedelta(seconds=30)
    create(armed, name="dst.daily", expression=daily, tz=zone)
    create(armed, name="dst.hourly", expression="0 * * * *", tz=zone, catch_up="all")
    tick_through(start, end + dt.timedelta(minutes=1), step=20)
    expected_daily = cron_oracle(daily, zone, start, end)
    assert len(expected_daily) == 1
    assert [t for t in rows("dst.daily") if start <= t < end] == expected_daily
    assert [t for t in rows("dst.hourly") if start <= t < end] == cron_oracle(
        "0 * * * *", zone, start, end
    )


# --- what a tick reads, and processes without the job --------------------------------


def test_a_tick_with_nothing_due_reads_only_the_due_rows():
    armed = utc(2026, 6, 1, 0, 0, 30)
    for tenant in range(30):
        create(armed, name=f"reports.tenant-{tenant}", tz="UTC", expression="0 0 1 1 *")
    materialize(armed)  # synced
    with CaptureQueriesContext(connection) as queries:
        assert materialize(armed + dt.timedelta(minutes=5)) == 0
    [read] = [query["sql"] for query in queries.captured_queries]
    assert "next_run" in read.split("WHERE")[1]


def test_sync_with_the_code_leaves_dynamic_rows_alone():
    create(utc(2026, 6, 1), tz="UTC")
    with schedule("* * * * *", name="tests.code"):
        materialize(utc(2026, 6, 1, 0, 1))
    materialize(utc(2026, 6, 1, 0, 2))  # tests.code is gone from the code: marked inactive
    states = dict(CronSchedule.objects.values_list("name", "active"))
    assert states == {"reports.tenant-42": True, "tests.code": False}


def test_a_process_without_the_job_skips_the_schedule_and_logs_it_once(caplog):
    create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *")
    definition = registry.get(REPORT)
    registry.unregister(REPORT)
    try:
        with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
            assert materialize(utc(2026, 6, 1, 8, 0, 5)) == 0
            assert materialize(utc(2026, 6, 1, 8, 1, 5)) == 0
    finally:
        registry.register(definition)
    warnings = [r.getMessage() for r in caplog.records if "not materialized" in r.getMessage()]
    assert len(warnings) == 1 and "No job is named 'testapp.send_report'" in warnings[0]
    # Once the job is known: the on-time occurrence and, by catch-up, the latest missed one.
    assert materialize(utc(2026, 6, 1, 8, 2, 5)) == 2
    assert rows() == [utc(2026, 6, 1, 8, 1), utc(2026, 6, 1, 8, 2)]


# --- what users read ----------------------------------------------------------------


def test_cronqueue_schedules_json_shows_the_source_and_the_payload():
    create(utc(2026, 6, 1), tz="Europe/Paris", payload={"tenant_id": 42, "format": "pdf"})
    with schedule("30 1 * * *", name="tests.nightly", tz="UTC"):
        out = StringIO()
        call_command(
            "cronqueue_schedules", "--json", "--now", "2026-06-01T00:00:00+00:00", stdout=out
        )
    code, dynamic_item = json.loads(out.getvalue())
    assert (code["name"], code["source"], code["payload"]) == ("tests.nightly", "code", {})
    assert dynamic_item["name"] == "reports.tenant-42"
    assert dynamic_item["source"] == "dynamic"
    assert dynamic_item["job"] == REPORT
    assert dynamic_item["payload"] == {"tenant_id": 42, "format": "pdf"}
    assert dynamic_item["next_runs"][0] == {
        "utc": "2026-06-01T06:00:00+00:00",
        "local": "2026-06-01T08:00:00+02:00",
    }


def test_cronqueue_schedules_json_streams_every_schedule_with_as_many_queries_for_5_or_200():
    def export():
        out = StringIO()
        with CaptureQueriesContext(connection) as queries:
            call_command(
                "cronqueue_schedules", "--json", "--now", "2026-06-01T00:00:00+00:00", stdout=out
            )
        document = json.loads(out.getvalue())
        assert out.getvalue() == json.dumps(document, indent=2) + "\n"  # as one dumps wrote it
        return document, len(queries)

    dynamic_schedules(5, first_run=utc(2026, 6, 1, 8))
    few, few_queries = export()
    CronSchedule.objects.all().delete()
    dynamic_schedules(200, first_run=utc(2026, 6, 1, 8))
    many, many_queries = export()
    assert many_queries == few_queries
    assert [item["name"] for item in many] == [f"dynamic-{n:04d}" for n in range(200)]
    assert many[199]["payload"] == {"tenant_id": 199}
    assert many[0]["next_runs"][0]["utc"] == "2026-06-01T08:00:00+00:00"
    assert few == many[:5]


def test_cronqueue_schedules_json_of_no_schedule_is_an_empty_list():
    out = StringIO()
    call_command("cronqueue_schedules", "--json", stdout=out)
    assert out.getvalue() == "[]\n"


def test_cronqueue_status_lists_dynamic_schedules_with_their_job():
    create(utc(2026, 6, 1), tz="UTC")
    out = StringIO()
    call_command("cronqueue_status", stdout=out)
    assert "reports.tenant-42  0 8 * * *  UTC" in out.getvalue()
    assert f"(dynamic: runs {REPORT})" in out.getvalue()


def test_a_scheduler_that_read_the_row_before_an_edit_creates_nothing_with_the_old_values():
    schedule_row = create(utc(2026, 6, 1, 7, 59), tz="UTC")
    read = CronSchedule.objects.get(pk=schedule_row.pk)
    dynamic.edit(schedule_row, {"payload": {"tenant_id": 9}}, now=utc(2026, 6, 1, 7, 59, 30))
    assert materialize_schedule(dynamic_target(read), read, utc(2026, 6, 1, 8, 0, 5)) == 0
    materialize(utc(2026, 6, 1, 8, 0, 10))  # the next tick reads the edited row
    assert list(Job.objects.values_list("payload", flat=True)) == [{"tenant_id": 9}]


def test_a_payload_the_handler_no_longer_accepts_is_logged_and_skipped(caplog):
    create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *")
    CronSchedule.objects.update(payload={"tenant": 42})  # as if the handler's code changed
    with schedule("* * * * *", name="tests.code", tz="UTC"):
        materialize(utc(2026, 6, 1, 7, 59, 30))  # the code schedule is armed
        with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
            assert materialize(utc(2026, 6, 1, 8, 0, 5)) == 1  # the code schedule's row
    assert rows() == []
    assert "payload key 'tenant' is not an argument" in caplog.text


def test_a_stored_payload_that_is_not_an_object_is_logged_and_skipped(caplog):
    create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *")
    CronSchedule.objects.update(payload=[42])  # written around the API, by hand
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        assert materialize(utc(2026, 6, 1, 8, 0, 5)) == 0
    assert rows() == []
    assert "the stored payload must be a JSON object, got list" in caplog.text


def test_a_stored_expression_now_refused_is_logged_and_skipped(caplog):
    """A row saved before "never runs" and "step beyond the range" were refused."""
    create(utc(2026, 6, 1, 7, 59), tz="UTC", expression="* * * * *")
    CronSchedule.objects.update(expression="*/90 * * * *", next_run=utc(2026, 6, 1, 8))
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        assert materialize(utc(2026, 6, 1, 8, 0, 5)) == 0
    assert rows() == []
    assert "step of 90" in caplog.text
