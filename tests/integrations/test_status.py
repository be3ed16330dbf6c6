"""django_cronqueue.health (over the read model) and ``manage.py cronqueue_status``."""

import datetime as dt
import io
import json
import os
import signal
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import health, jobs, observe
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import CronSchedule, Job, Pause, Worker
from tests.factories import CronScheduleFactory, JobFactory, WorkerFactory, dynamic_schedules
from tests.processes import ROOT
from tests.testapp import jobs as test_jobs

from .conftest import wait_until

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.timezone.utc)
SCHEDULE = "status_tests.every_five_minutes"


@pytest.fixture
def every_five_minutes():
    """A cron schedule defined only for the test (a module-level one would be
    materialized by every other test's ticks)."""

    def handler(run):
        return None

    definition = jobs.cron("*/5 * * * *", tz="UTC", name=SCHEDULE)(handler)
    yield definition
    registry.unregister(SCHEDULE)


def run_status(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("cronqueue_status", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- counts and the oldest pending job ----------------------------------------------


def test_counts_per_status_and_name():
    JobFactory.create_batch(3, name="testapp.record", status="pending")
    JobFactory(name="testapp.record", status="failed")
    JobFactory.create_batch(2, name="testapp.noop", status="succeeded")
    JobFactory(name="testapp.noop", status="running")

    report = health.collect(NOW)

    assert report.counts == {
        "pending": 3,
        "running": 1,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 0,
    }
    assert report.counts_by_name == {
        "testapp.noop": {"running": 1, "succeeded": 2},
        "testapp.record": {"failed": 1, "pending": 3},
    }


def test_an_empty_queue():
    report = health.collect(NOW)
    assert set(report.counts.values()) == {0}
    assert report.counts_by_name == {}
    assert report.oldest_pending is None
    assert report.oldest_pending_by_queue == {}


def test_oldest_pending_is_the_due_one_waiting_longest():
    JobFactory(status="pending", run_at=NOW - dt.timedelta(seconds=50), queue="emails")
    oldest = JobFactory(
        name="testapp.noop", status="pending", run_at=NOW - dt.timedelta(seconds=100)
    )
    JobFactory(status="pending", run_at=NOW + dt.timedelta(hours=1))  # not due: not late
    JobFactory(status="failed", run_at=NOW - dt.timedelta(days=1))  # not pending
    # a workflow's job waiting for its upstream job: not waiting for a worker
    JobFactory(status="pending", blocked=True, run_at=NOW - dt.timedelta(days=1))

    report = health.collect(NOW)

    assert report.oldest_pending == health.OldestPending(
        id=oldest.pk,
        name="testapp.noop",
        queue="default",
        run_at=oldest.run_at,
        age_seconds=100.0,
    )
    assert report.oldest_pending_by_queue == {"default": 100.0, "emails": 50.0}


def test_collect_needs_an_aware_now():
    with pytest.raises(ValueError, match="aware"):
        health.collect(dt.datetime(2026, 1, 1))


# --- workers ------------------------------------------------------------------------


def test_live_workers_are_those_seen_within_three_leases(settings):
    settings.CRONQUEUE = {"LEASE": 10}
    fresh = WorkerFactory(last_seen=NOW - dt.timedelta(seconds=5), queues=["emails"])
    edge = WorkerFactory(last_seen=NOW - dt.timedelta(seconds=30))
    dead = WorkerFactory(last_seen=NOW - dt.timedelta(seconds=31))

    report = health.collect(NOW)

    assert [(w.id, w.alive) for w in report.workers] == [
        (fresh.id, True),
        (edge.id, True),
        (dead.id, False),
    ]
    assert [w.id for w in report.live_workers] == [fresh.id, edge.id]
    assert report.workers[0].queues == ["emails"]
    assert report.workers[2].seen_seconds_ago == 31.0


# --- schedules ----------------------------------------------------------------------


def test_a_schedule_whose_next_occurrence_was_not_created_is_overdue(every_five_minutes):
    CronScheduleFactory(
        name=SCHEDULE, expression="*/5 * * * *", cursor=NOW - dt.timedelta(minutes=30)
    )
    [schedule] = health.collect(NOW).schedules
    assert schedule.overdue
    assert schedule.defined
    assert schedule.next_run == NOW - dt.timedelta(minutes=25)
    assert schedule.overdue_seconds == 25 * 60


def test_a_schedule_within_its_grace_period_is_not_overdue(every_five_minutes):
    CronScheduleFactory(
        name=SCHEDULE, expression="*/5 * * * *", cursor=NOW - dt.timedelta(minutes=4)
    )
    later = NOW + dt.timedelta(seconds=90)
    [schedule] = health.collect(later, schedule_grace=120).schedules
    assert schedule.next_run == NOW
    assert not schedule.overdue
    [schedule] = health.collect(later, schedule_grace=60).schedules
    assert (schedule.overdue, schedule.overdue_seconds) == (True, 90.0)


def test_an_up_to_date_schedule_is_not_overdue(every_five_minutes):
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=NOW)
    [schedule] = health.collect(NOW).schedules
    assert not schedule.overdue
    assert schedule.next_run == NOW + dt.timedelta(minutes=5)


def test_paused_and_inactive_schedules_are_never_overdue(every_five_minutes):
    long_ago = NOW - dt.timedelta(days=3)
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=long_ago, paused=True)
    CronScheduleFactory(
        name="status_tests.removed", cursor=long_ago, next_run=long_ago, active=False
    )
    report = health.collect(NOW)
    assert [(s.name, s.overdue, s.defined) for s in report.schedules] == [
        (SCHEDULE, False, True),
        ("status_tests.removed", False, False),
    ]


def test_a_schedule_no_scheduler_has_seen_yet_is_listed_unarmed(every_five_minutes):
    [schedule] = health.collect(NOW).schedules
    assert (schedule.name, schedule.cursor, schedule.overdue) == (SCHEDULE, None, False)
    assert schedule.next_run == NOW + dt.timedelta(minutes=5)


def test_a_row_without_code_falls_back_to_its_stored_next_run():
    CronScheduleFactory(
        name="status_tests.elsewhere",
        cursor=NOW - dt.timedelta(hours=1),
        next_run=NOW - dt.timedelta(minutes=10),
    )
    [schedule] = health.collect(NOW).schedules
    assert (schedule.defined, schedule.overdue) == (False, True)


# --- running jobs and pauses --------------------------------------------------------


def progress(done, total, message):
    return {"done": done, "total": total, "message": message, "at": NOW.isoformat()}


def test_running_jobs_with_their_progress_and_cancel_requests():
    first = JobFactory(
        name="testapp.noop",
        status="running",
        started_at=NOW - dt.timedelta(minutes=5),
        progress=progress(3, 10, "chunk 3"),
    )
    second = JobFactory(
        status="running",
        started_at=NOW - dt.timedelta(minutes=1),
        cancel_requested_at=NOW,
        cancel_requested_by="ops (admin)",
    )
    JobFactory(status="pending", progress=progress(1, 2, "left over"))  # not running

    report = health.collect(NOW)

    assert [job.id for job in report.running] == [first.pk, second.pk]
    assert report.running[0].progress.describe() == "3/10 (30%): chunk 3"
    assert report.running[1].progress is None
    assert report.running[1].cancel_requested_by == "ops (admin)"


def test_pauses_in_force_and_ended():
    jobs.pause(queue="emails", reason="SMTP down", by="ops")
    jobs.pause(name="testapp.noop", until=NOW - dt.timedelta(minutes=1))  # ended

    report = health.collect(NOW)

    assert [(p.target, p.in_force) for p in report.pauses] == [
        ("job testapp.noop", False),
        ("queue emails", True),
    ]
    assert [p.target for p in report.pauses_in_force] == ["queue emails"]
    assert report.pauses[1].paused_by == "ops"


def test_jobs_held_back_by_a_pause_do_not_count_as_waiting_too_long():
    WorkerFactory(last_seen=NOW)
    held = JobFactory(queue="emails", run_at=NOW - dt.timedelta(hours=1))
    jobs.pause(queue="emails")
    report = health.collect(NOW)
    assert report.oldest_pending.id == held.pk  # still shown as the oldest
    assert report.oldest_unpaused_pending is None
    assert health.problems(report) == []

    late = JobFactory(queue="default", run_at=NOW - dt.timedelta(minutes=10))
    [problem] = health.problems(health.collect(NOW))
    assert problem == (
        f"the oldest due pending job (testapp.record #{late.pk}, queue default) has waited "
        "600s, over --max-pending-age 300s (jobs held back by a pause are not counted)."
    )
    jobs.resume(queue="emails")
    assert health.collect(NOW).oldest_unpaused_pending.id == held.pk


def test_a_pause_of_a_job_name_that_has_ended_holds_nothing_back():
    held = JobFactory(name="testapp.noop", run_at=NOW - dt.timedelta(hours=1))
    jobs.pause(name="testapp.noop", until=NOW + dt.timedelta(minutes=5))
    assert health.collect(NOW).oldest_unpaused_pending is None
    later = NOW + dt.timedelta(minutes=6)
    assert health.collect(later).oldest_unpaused_pending.id == held.pk


# --- problems -----------------------------------------------------------------------


def test_a_healthy_queue_has_no_problems(every_five_minutes):
    WorkerFactory(last_seen=NOW)
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=NOW)
    JobFactory(status="pending", run_at=NOW - dt.timedelta(seconds=10))
    assert health.problems(health.collect(NOW)) == []


def test_each_problem_is_reported(every_five_minutes, settings):
    settings.CRONQUEUE = {"LEASE": 30}
    WorkerFactory(last_seen=NOW - dt.timedelta(minutes=5))
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=NOW - dt.timedelta(hours=1))
    late = JobFactory(status="pending", run_at=NOW - dt.timedelta(seconds=400))

    found = health.problems(health.collect(NOW), max_pending_age=300)

    assert len(found) == 3
    assert found[0].startswith("0 live worker(s), expected at least 1")
    assert "90s (3 x LEASE)" in found[0]
    assert found[1].startswith(f"cron schedule {SCHEDULE} is overdue")
    assert found[2] == (
        f"the oldest due pending job (testapp.record #{late.pk}, queue default) has waited "
        "400s, over --max-pending-age 300s."
    )


def clock_problem(worker, offset_words, limit="10s"):
    return (
        f"worker {worker.id}: its host's clock is {offset_words} the database's, more than "
        f"MAX_CLOCK_SKEW ({limit}), so it claims no jobs; fix the time synchronisation (NTP) "
        "of its host or of the database server."
    )


def test_a_live_worker_whose_clock_is_beyond_max_clock_skew_is_a_problem(settings):
    settings.CRONQUEUE = {"LEASE": 30}  # MAX_CLOCK_SKEW: LEASE / 3 = 10 s
    ahead = WorkerFactory(last_seen=NOW, clock_offset=12.5)
    behind = WorkerFactory(last_seen=NOW, clock_offset=-10.01)
    WorkerFactory(last_seen=NOW, clock_offset=-10.0)  # at the limit: claims
    WorkerFactory(last_seen=NOW, clock_offset=None)  # not measured yet
    WorkerFactory(last_seen=NOW - dt.timedelta(minutes=5), clock_offset=500)  # dead

    report = health.collect(NOW)

    assert report.max_clock_skew == 10.0
    assert health.problems(report) == [
        clock_problem(ahead, "12.5s ahead of"),
        clock_problem(behind, "10.0s behind"),
    ]


def test_max_clock_skew_sets_the_limit_of_the_clock_problem(settings):
    settings.CRONQUEUE = {"MAX_CLOCK_SKEW": 0.5}
    worker = WorkerFactory(last_seen=NOW, clock_offset=0.75)

    assert health.problems(health.collect(NOW)) == [
        clock_problem(worker, "0.8s ahead of", limit="0.5s")
    ]


def test_the_checks_can_be_relaxed():
    JobFactory(status="pending", run_at=NOW - dt.timedelta(hours=1))
    report = health.collect(NOW)
    assert health.problems(report, max_pending_age=None, min_workers=0) == []
    assert health.problems(report, max_pending_age=3601, min_workers=0) == []
    assert len(health.problems(report, max_pending_age=3599, min_workers=0)) == 1


# --- the command --------------------------------------------------------------------


def test_command_json(every_five_minutes):
    job = JobFactory(status="pending", run_at=timezone.now() - dt.timedelta(seconds=30))
    worker = WorkerFactory()
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=timezone.now())

    out, err = run_status("--json")

    document = json.loads(out)
    assert err == ""
    assert document["counts"]["pending"] == 1
    assert document["counts_by_name"] == {"testapp.record": {"pending": 1}}
    assert document["oldest_pending"]["id"] == job.pk
    assert document["oldest_pending"]["age_seconds"] >= 30
    assert [w["id"] for w in document["workers"]] == [worker.id]
    assert document["workers"][0]["alive"] is True
    assert document["schedules"][0]["name"] == SCHEDULE
    assert document["schedules"][0]["overdue"] is False
    dt.datetime.fromisoformat(document["schedules"][0]["next_run"])
    assert document["problems"] == []


def test_command_text():
    JobFactory(name="testapp.noop", status="succeeded")
    WorkerFactory(id="web-1:42:abcdef")
    out, _ = run_status()
    assert "succeeded=1" in out
    assert "testapp.noop" in out
    assert "Oldest due pending job: none" in out
    assert "Workers: 1 alive, 0 not seen lately" in out
    assert "web-1:42:abcdef  alive" in out


def test_command_text_shows_running_jobs_and_pauses(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    JobFactory(
        name="testapp.noop",
        status="running",
        started_at=NOW - dt.timedelta(seconds=40),
        progress=progress(3, 10, "chunk\n3 \x1b[31mred"),
        cancel_requested_at=timezone.now(),
        cancel_requested_by="ops (admin)",
    )
    jobs.pause(queue="emails", reason="SMTP\ndown", by="ops (admin)")
    out, _ = run_status()
    job_line = next(line for line in out.splitlines() if "testapp.noop #" in line)
    assert "Running jobs (1):" in out
    assert "started 40s ago  progress 3/10 (30%): chunk 3 [31mred" in job_line
    assert job_line.endswith("[cancel requested by ops (admin)]")
    assert "\x1b" not in out
    assert "Paused (1):\n  queue emails  until resumed  by ops (admin): SMTP down\n" in out


def test_command_text_without_running_jobs_or_pauses():
    out, _ = run_status()
    assert "Running jobs (0):\n" in out
    assert "Paused: nothing\n" in out


def test_command_text_says_when_it_shows_only_the_longest_running(monkeypatch):
    from django_cronqueue import observe

    monkeypatch.setattr(observe, "running_jobs", lambda: observe.control.running_jobs(limit=2))
    JobFactory.create_batch(3, status="running", started_at=timezone.now())
    out, _ = run_status()
    assert "Running jobs (3, the 2 oldest):" in out


def test_command_json_has_running_jobs_and_pauses():
    job = JobFactory(status="running", started_at=NOW, progress=progress(1, 4, "a"))
    until = timezone.now() + dt.timedelta(hours=1)
    jobs.pause(name="testapp.noop", until=until, reason="later")
    document = json.loads(run_status("--json")[0])
    [running] = document["running"]
    assert running["id"] == job.pk
    assert running["progress"] == {
        "done": 1.0,
        "total": 4.0,
        "message": "a",
        "at": NOW.isoformat(),
    }
    assert running["cancel_requested_at"] is None
    [pause] = document["pauses"]
    assert pause["name"] == "testapp.noop"
    assert pause["queue"] == ""
    assert pause["until"] == until.isoformat()
    assert (pause["reason"], pause["in_force"]) == ("later", True)
    assert document["oldest_unpaused_pending"] is None


def test_command_check_passes_on_a_healthy_queue():
    WorkerFactory()
    out, err = run_status("--check")
    assert out.rstrip().endswith("OK")
    assert err == ""


def test_command_check_fails_and_prints_every_reason():
    JobFactory(status="pending", run_at=timezone.now() - dt.timedelta(seconds=120))
    with pytest.raises(CommandError) as failure:
        run_status("--check", "--max-pending-age", "60")
    assert failure.value.returncode == 1
    assert "2 problem(s)" in str(failure.value)


def test_command_check_writes_reasons_to_stderr_and_json():
    err = io.StringIO()
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("cronqueue_status", "--check", "--json", stdout=out, stderr=err)
    assert json.loads(out.getvalue())["problems"][0].startswith("0 live worker(s)")
    assert err.getvalue().startswith("FAIL: 0 live worker(s)")


def test_command_shows_each_workers_clock_and_check_fails_on_one_beyond_the_limit():
    WorkerFactory(id="web-1:42:abcdef", clock_offset=0.0042)
    WorkerFactory(id="web-2:43:abcdef", clock_offset=-95.25)
    WorkerFactory(id="web-3:44:abcdef", clock_offset=None)

    out, _ = run_status()
    document = json.loads(run_status("--json")[0])
    with pytest.raises(CommandError) as failure:
        run_status("--check")

    assert "web-1:42:abcdef  alive" in out and "clock +0.004s" in out
    assert "clock -95.250s" in out
    assert "web-3:44:abcdef  alive  last seen 0s ago  concurrency 1  all queues\n" in out
    assert {w["id"]: w["clock_offset"] for w in document["workers"]} == {
        "web-1:42:abcdef": 0.0042,
        "web-2:43:abcdef": -95.25,
        "web-3:44:abcdef": None,
    }
    assert document["max_clock_skew"] == 10.0
    assert "1 problem(s)" in str(failure.value)


def test_command_check_min_workers_zero_allows_no_workers():
    out, _ = run_status("--check", "--min-workers", "0")
    assert out.rstrip().endswith("OK")


# --- with a real worker -------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_running_worker_is_live_and_gone_after_it_stops(runjobs):
    worker = runjobs.start(settings={"LEASE": 3, "POLL_INTERVAL": 0.2})
    wait_until(lambda: health.collect().live_workers, timeout=30)
    job = test_jobs.record.enqueue(key="seen")
    wait_until(lambda: health.collect().counts["succeeded"] == 1, timeout=30)

    report = health.collect()
    [live] = report.live_workers
    assert live.pid == worker.pid
    assert health.problems(report) == []
    assert report.counts_by_name == {"testapp.record": {"succeeded": 1}}
    first_seen = Worker.objects.get().last_seen
    wait_until(lambda: Worker.objects.get().last_seen > first_seen, timeout=10)  # heartbeat

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, runjobs.log(0)
    assert health.collect().workers == []
    assert job.pk


def status_in_a_process(database_name: str) -> subprocess.CompletedProcess[str]:
    """``cronqueue_status --check`` in a process of its own, on the database named."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": database_name,
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "cronqueue_status", "--check"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_command_says_the_database_is_not_reachable_only_when_it_is_not(tmp_path):
    missing = tmp_path / "no-such-folder" / "db.sqlite3"  # SQLite cannot open it
    status = status_in_a_process(str(missing) if connection.vendor == "sqlite" else "cq_missing")
    assert status.returncode == 1
    assert "is not reachable" in status.stderr, status.stderr
    assert "migrate" not in status.stderr


@pytest.fixture
def renamed():
    """Rename a table or a column of the test database for one test, then put it back
    (``transaction=True`` tests: MariaDB's DDL commits at once)."""
    undo = []

    def rename(sql: str, back: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)
        undo.append(back)

    yield rename
    for sql in reversed(undo):
        with connection.cursor() as cursor:
            cursor.execute(sql)


@pytest.mark.django_db(transaction=True)
def test_command_says_to_migrate_when_a_table_is_missing(renamed):
    table = Job._meta.db_table
    renamed(
        f"ALTER TABLE {table} RENAME TO cq_moved_away",
        f"ALTER TABLE cq_moved_away RENAME TO {table}",
    )
    with pytest.raises(CommandError) as raised:
        run_status("--check")
    message = str(raised.value)
    assert f"has no django-cronqueue tables ({table})" in message
    assert "run `python manage.py migrate` first" in message
    assert "not reachable" not in message
    assert raised.value.returncode == 1


@pytest.mark.django_db(transaction=True)
def test_command_says_which_query_failed_when_the_database_answered(renamed):
    table = Pause._meta.db_table
    renamed(
        f"ALTER TABLE {table} RENAME COLUMN reason TO cq_reason_gone",
        f"ALTER TABLE {table} RENAME COLUMN cq_reason_gone TO reason",
    )
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("cronqueue_status", "--check", "--json", stdout=out)
    message = str(raised.value)
    assert message.startswith(f"a query on the database {connection.vendor} ")
    assert "failed:" in message
    assert "reason" in message  # the database's own words name the column
    assert "not reachable" not in message
    assert "migrate" not in message
    assert json.loads(out.getvalue()) == {"problems": [message]}


# --- many dynamic schedules -----------------------------------------------------------


def collect_queries(now=NOW, **options):
    with CaptureQueriesContext(connection) as captured:
        report = health.collect(now, **options)
    return report, len(captured)


def test_collect_reads_as_many_queries_for_5_or_200_dynamic_schedules(every_five_minutes):
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=NOW)
    dynamic_schedules(5, first_run=NOW + dt.timedelta(hours=1))
    _, few = collect_queries()
    CronSchedule.objects.filter(source="dynamic").delete()
    dynamic_schedules(200, first_run=NOW + dt.timedelta(hours=1))
    report, many = collect_queries()
    assert many == few
    assert len(report.schedules) == 1 + observe.STATUSES_SHOWN
    assert report.schedules_not_listed == 200 - observe.STATUSES_SHOWN


def test_a_dynamic_schedule_whose_next_run_was_not_created_is_overdue():
    dynamic_schedules(3, first_run=NOW - dt.timedelta(minutes=10), step=dt.timedelta(minutes=4))
    report = health.collect(NOW, schedule_grace=120)
    late = [(s.name, s.overdue, s.overdue_seconds, s.job) for s in report.schedules]
    assert late == [
        ("dynamic-0000", True, 600.0, "testapp.send_report"),
        ("dynamic-0001", True, 360.0, "testapp.send_report"),
        ("dynamic-0002", False, 0.0, "testapp.send_report"),  # 2 minutes: within the grace
    ]
    assert report.overdue_count == 2
    found = health.problems(report, max_pending_age=None, min_workers=0)
    assert [reason.split(":")[0] for reason in found] == [
        "cron schedule dynamic-0000 is overdue",
        "cron schedule dynamic-0001 is overdue",
    ]


def test_every_overdue_schedule_is_counted_and_those_not_listed_are_one_problem():
    shown = observe.STATUSES_SHOWN
    dynamic_schedules(shown + 30, first_run=NOW - dt.timedelta(days=1))  # all overdue
    dynamic_schedules(1, first_run=NOW - dt.timedelta(days=2), paused=True, prefix="paused")
    report = health.collect(NOW)
    assert report.overdue_count == shown + 30
    assert len(report.overdue_schedules) == shown
    listed = [s.name for s in report.overdue_schedules]  # those overdue longest
    assert listed == [f"dynamic-{n:04d}" for n in range(shown)]
    assert "paused-0000" in [s.name for s in report.schedules]
    assert report.schedule_counts == health.ScheduleCounts(
        total=shown + 31, dynamic=shown + 31, paused=1, inactive=0
    )
    found = health.problems(report, max_pending_age=None, min_workers=0)
    assert len(found) == shown + 1
    assert found[-1].startswith("30 more cron schedule(s) are overdue")
    assert len(health.collect(NOW, every_schedule=True).overdue_schedules) == shown + 30


def test_command_text_lists_code_and_notable_dynamic_schedules_and_counts_the_rest(
    every_five_minutes,
):
    now = timezone.now()
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=now)
    extra = observe.STATUSES_SHOWN + 7
    dynamic_schedules(extra, first_run=now + dt.timedelta(hours=1))
    dynamic_schedules(1, first_run=now - dt.timedelta(hours=1), prefix="late")  # overdue
    out, _ = run_status()
    assert f"Cron schedules ({extra + 2}):" in out
    assert f"  {SCHEDULE}  */5 * * * *  UTC  [ok]" in out
    assert "  late-0000  0 8 * * *  UTC  [OVERDUE]" in out
    assert "(dynamic: runs testapp.send_report)" in out
    assert "... and 7 more dynamic schedule(s), neither overdue nor paused" in out
    every, _ = run_status("--all-schedules")
    assert "more dynamic schedule" not in every
    assert every.count("(dynamic: runs testapp.send_report)") == extra + 1


def test_command_json_lists_both_kinds_and_counts_them(every_five_minutes):
    now = timezone.now()
    CronScheduleFactory(name=SCHEDULE, expression="*/5 * * * *", cursor=now)
    dynamic_schedules(2, first_run=now + dt.timedelta(hours=1))
    document = json.loads(run_status("--json")[0])
    assert [(s["name"], s["source"]) for s in document["schedules"]] == [
        ("dynamic-0000", "dynamic"),
        ("dynamic-0001", "dynamic"),
        (SCHEDULE, "code"),
    ]
    assert document["schedule_counts"] == {"total": 3, "dynamic": 2, "paused": 0, "inactive": 0}
    assert (document["overdue_count"], document["schedules_not_listed"]) == (0, 0)
