"""The dashboard: hourly outcomes per job name as a server-rendered SVG chart, queue depth,
the oldest due pending job, live workers and the next runs of every schedule."""

import datetime as dt
import io
import json
import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs, observe
from django_cronqueue.admin import dashboard
from django_cronqueue.models import CronSchedule, JobStatus
from django_cronqueue.schedules import dynamic, scheduler
from tests.admin.conftest import staff_client
from tests.factories import CronScheduleFactory, JobFactory, WorkerFactory, dynamic_schedules

pytestmark = pytest.mark.django_db

URL = reverse("admin:django_cronqueue_job_dashboard")


def finished(name, status, ago, n=1, now=None):
    now = now or timezone.now()
    return JobFactory.create_batch(
        n, name=name, status=status, finished_at=now - ago, attempts=1, payload={}
    )


def test_hourly_outcomes_per_name():
    # Half past an hour, so "a minute ago" is in the current hour's bar whenever this runs.
    now = observe.hour_floor(timezone.now()) + dt.timedelta(minutes=30)
    finished("testapp.record", JobStatus.SUCCEEDED, dt.timedelta(minutes=1), n=3, now=now)
    finished("testapp.record", JobStatus.FAILED, dt.timedelta(minutes=2), now=now)
    finished("testapp.record", JobStatus.SUCCEEDED, dt.timedelta(hours=5), now=now)
    finished("testapp.noop", JobStatus.SUCCEEDED, dt.timedelta(hours=23), now=now)
    finished("testapp.noop", JobStatus.SUCCEEDED, dt.timedelta(hours=30), now=now)  # too old
    JobFactory(name="testapp.noop", status=JobStatus.CANCELLED, finished_at=now)  # not a run
    chart = dashboard.outcome_chart(observe.hourly_outcomes(now))
    assert [line.name for line in chart.series] == ["testapp.record", "testapp.noop"]
    record, noop = chart.series
    assert (record.succeeded, record.failed, record.peak) == (4, 1, 4)
    assert (noop.succeeded, noop.failed) == (1, 0)
    assert len(record.bars) == 24
    last = record.bars[-1]
    assert (last.succeeded, last.failed) == (3, 1)
    assert last.succeeded_height + last.failed_height == pytest.approx(chart.height - 2)
    assert record.bars[-6].succeeded == 1
    assert sum(bar.succeeded for bar in noop.bars) == 1


def test_queue_depth_and_oldest_pending():
    now = timezone.now()
    oldest = JobFactory(queue="emails", run_at=now - dt.timedelta(minutes=42))
    JobFactory(queue="emails", run_at=now - dt.timedelta(minutes=1))
    JobFactory(queue="emails", run_at=now + dt.timedelta(hours=1))
    JobFactory(queue="emails", blocked=True, run_at=now - dt.timedelta(hours=5))  # waits
    JobFactory(queue="default", status=JobStatus.RUNNING)
    JobFactory(queue="default", status=JobStatus.SUCCEEDED)
    depths = {depth.queue: depth for depth in observe.queue_depths(now)}
    assert (depths["emails"].due, depths["emails"].later, depths["emails"].running) == (2, 2, 0)
    assert (depths["default"].due, depths["default"].running) == (0, 1)
    found = observe.oldest_pending(now)
    assert found.id == oldest.pk
    assert found.age == dt.timedelta(minutes=42)


def test_live_workers_are_those_seen_within_three_leases():
    now = timezone.now()
    live = WorkerFactory(last_seen=now - dt.timedelta(seconds=20))
    WorkerFactory(last_seen=now - dt.timedelta(minutes=5))  # silent: 3 leases are 90 s
    JobFactory(status=JobStatus.RUNNING, worker_id=live.id)
    JobFactory(status=JobStatus.RUNNING, worker_id=live.id)
    workers, silent = observe.live_workers(now)
    assert [(w.worker.id, w.running) for w in workers] == [(live.id, 2)]
    assert silent == 1


def test_dashboard_page(admin_client, nightly):
    scheduler.sync_schedules(timezone.now())
    finished("testapp.record", JobStatus.SUCCEEDED, dt.timedelta(minutes=10), n=5)
    finished("testapp.record", JobStatus.FAILED, dt.timedelta(hours=2), n=2)
    JobFactory(queue="emails", run_at=timezone.now() - dt.timedelta(minutes=7))
    WorkerFactory(hostname="worker-a", pid=77)
    response = admin_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<svg class="cq-chart"' in html
    assert html.count('class="cq-bar-succeeded"') == 1
    assert html.count('class="cq-bar-failed"') == 1
    assert "5 succeeded" in html
    assert "2 failed" in html
    assert "emails" in html
    assert "7\xa0minutes" in html  # the oldest due pending job's age
    assert "worker-a" in html
    assert "tests.nightly" in html
    assert "At 02:30" in html
    assert " 02:30 E" in html  # next runs in the schedule's zone (EDT/EST)
    main = html.split('id="content-main"')[1]
    assert "<script" not in main  # no JavaScript of its own
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing from another host


def test_dashboard_lists_dynamic_schedules_with_their_job_and_last_occurrence(
    admin_client, nightly
):
    now = timezone.now()
    scheduler.sync_schedules(now)
    occurrence = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=1)
    dynamic.create(
        now=now,
        name="reports.tenant-42",
        job="testapp.send_report",
        payload={"tenant_id": 42},
        expression="@hourly",
        tz="UTC",
    )
    CronSchedule.objects.filter(name="reports.tenant-42").update(last_occurrence=occurrence)
    JobFactory(  # the occurrence of another schedule of the same job, at the same instant
        name="testapp.send_report", schedule="reports.tenant-43", scheduled_for=occurrence
    )
    JobFactory(
        name="testapp.send_report",
        schedule="reports.tenant-42",
        scheduled_for=occurrence,
        status=JobStatus.FAILED,
    )
    facts = admin_client.get(URL).context["facts"]
    rows = {row.schedule.name: row.schedule for row in facts.schedules}
    assert set(rows) == {"tests.nightly", "reports.tenant-42"}
    assert rows["reports.tenant-42"].last_job_status == "failed"
    html = admin_client.get(URL).content.decode()
    assert '<span class="cq-badge">dynamic</span>' in html
    assert "runs testapp.send_report" in html


def test_empty_dashboard(admin_client):
    html = admin_client.get(URL).content.decode()
    assert "No job finished in the last 24 hours." in html
    assert "Every queue is empty." in html
    assert "No worker has sent a heartbeat" in html
    assert "No cron schedule yet" in html


def test_svg_numbers_are_not_localized(admin_client, settings):
    settings.LANGUAGE_CODE = "de"
    settings.USE_THOUSAND_SEPARATOR = True
    finished("testapp.record", JobStatus.SUCCEEDED, dt.timedelta(minutes=1), n=3)
    finished("testapp.record", JobStatus.FAILED, dt.timedelta(minutes=1))
    html = admin_client.get(URL, HTTP_ACCEPT_LANGUAGE="de").content.decode()
    svg = html.split('<svg class="cq-chart"')[1].split("</svg>")[0]
    assert 'width="18.0"' in svg
    assert not re.search(r'="-?\d+,\d+"', svg)


def test_a_user_who_may_view_only_jobs_sees_no_schedule(db):
    """Schedule names and expressions are shown only with ``view_cronschedule``: the
    dashboard reads none for a user who may only view jobs."""
    CronScheduleFactory(name="tests.secret_schedule", expression="17 4 * * *")
    JobFactory(name="testapp.record")
    client = staff_client("job-viewer", ["view_job"])
    with CaptureQueriesContext(connection) as captured:
        response = client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "tests.secret_schedule" not in html
    assert "17 4 * * *" not in html
    assert "Cron schedules: next runs" not in html
    assert response.context["schedules"] == []
    assert response.context["facts"].schedules == []
    table = CronSchedule._meta.db_table
    assert not [query["sql"] for query in captured.captured_queries if table in query["sql"]]


def test_a_user_who_may_view_schedules_sees_them_linked(db):
    row = CronScheduleFactory(name="tests.visible_schedule", expression="17 4 * * *")
    client = staff_client("schedule-viewer", ["view_job", "view_cronschedule"])
    html = client.get(URL).content.decode()
    url = reverse("admin:django_cronqueue_cronschedule_change", args=[row.pk])
    assert f'<a href="{url}">tests.visible_schedule</a>' in html
    assert "17 4 * * *" in html


def test_the_status_command_and_the_dashboard_show_the_same_facts(
    admin_client, nightly, monkeypatch
):
    """Both read the read model (observe): same counts, oldest pending age, live workers
    and next runs for the same rows and the same ``now``."""
    now = timezone.now().replace(microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: now)
    scheduler.sync_schedules(now)  # armed at now: its next occurrence is its next run
    JobFactory.create_batch(2, queue="emails", run_at=now - dt.timedelta(minutes=7))
    JobFactory(run_at=now + dt.timedelta(hours=1))
    finished("testapp.record", JobStatus.FAILED, dt.timedelta(minutes=3), now=now)
    WorkerFactory(last_seen=now - dt.timedelta(seconds=5))
    WorkerFactory(last_seen=now - dt.timedelta(hours=1))  # silent
    jobs.pause(queue="emails", until=now + dt.timedelta(hours=1))
    jobs.pause(name="testapp.noop")

    facts = admin_client.get(URL).context["facts"]
    out = io.StringIO()
    call_command("cronqueue_status", "--json", stdout=out)
    status = json.loads(out.getvalue())

    assert facts.now == now
    assert (
        status["counts"]
        == facts.counts
        == {
            "pending": 3,
            "running": 0,
            "succeeded": 0,
            "failed": 1,
            "cancelled": 0,
        }
    )
    assert status["oldest_pending"]["id"] == facts.oldest_pending.id
    assert status["oldest_pending"]["age_seconds"] == facts.oldest_pending.age_seconds == 420
    alive = [worker["id"] for worker in status["workers"] if worker["alive"]]
    assert alive == [live.worker.id for live in facts.live_workers]
    assert len(alive) == 1 and facts.silent_workers == 1
    next_runs = {schedule["name"]: schedule["next_run"] for schedule in status["schedules"]}
    assert next_runs == {row.schedule.name: row.next_runs[0].isoformat() for row in facts.schedules}
    assert next_runs["tests.nightly"] is not None
    paused = {pause["queue"] or pause["name"] for pause in status["pauses"] if pause["in_force"]}
    assert paused == {target.value for target in facts.pauses.paused} == {"emails", "testapp.noop"}


# --- many dynamic schedules -----------------------------------------------------------


def schedule_queries(client):
    """The queries of one dashboard page that read the schedule table."""
    table = CronSchedule._meta.db_table
    with CaptureQueriesContext(connection) as captured:
        assert client.get(URL).status_code == 200
    return [query["sql"] for query in captured.captured_queries if table in query["sql"]]


def test_the_dashboard_reads_as_many_queries_for_5_or_200_dynamic_schedules(admin_client, nightly):
    now = timezone.now()
    scheduler.sync_schedules(now)
    dynamic_schedules(5, first_run=now + dt.timedelta(hours=1))
    with CaptureQueriesContext(connection) as few:
        admin_client.get(URL)
    few_schedule_reads = schedule_queries(admin_client)
    CronSchedule.objects.filter(source="dynamic").delete()
    dynamic_schedules(200, first_run=now + dt.timedelta(hours=1))
    with CaptureQueriesContext(connection) as many:
        admin_client.get(URL)
    assert len(many) == len(few)
    assert len(schedule_queries(admin_client)) == len(few_schedule_reads) == 3


def test_the_dashboard_shows_the_code_schedules_and_the_dynamic_ones_that_run_next(
    admin_client, nightly
):
    now = timezone.now()
    scheduler.sync_schedules(now)
    dynamic_schedules(  # the n-th runs n minutes after the first: listed in reverse name order
        observe.SOONEST_SHOWN + 5,
        first_run=now + dt.timedelta(hours=1),
        step=-dt.timedelta(minutes=1),
    )
    CronSchedule.objects.filter(name="dynamic-0000").update(paused=True)  # counted, not shown
    response = admin_client.get(URL)
    facts = response.context["facts"]
    shown = [row.schedule.name for row in facts.schedules]
    assert shown == ["tests.nightly"] + [
        f"dynamic-{n:04d}" for n in range(observe.SOONEST_SHOWN + 4, 4, -1)
    ]
    assert facts.schedule_counts == observe.ScheduleCounts(
        total=observe.SOONEST_SHOWN + 6, dynamic=observe.SOONEST_SHOWN + 5, paused=1, inactive=0
    )
    assert all(len(row.next_runs) == 3 for row in facts.schedules)
    html = response.content.decode()
    changelist = reverse("admin:django_cronqueue_cronschedule_changelist")
    assert f'<a href="{changelist}">26 schedules</a>' in html
    assert f'<a href="{changelist}?source__exact=dynamic">25 dynamic</a>' in html
    assert f'<a href="{changelist}?paused__exact=1">1 paused</a>' in html
    assert "the dynamic ones that run next (20); 5 more in" in html
    assert html.count("runs testapp.send_report") == observe.SOONEST_SHOWN


def test_a_small_site_sees_every_schedule_and_no_note_of_others(admin_client, nightly):
    now = timezone.now()
    scheduler.sync_schedules(now)
    dynamic_schedules(2, first_run=now + dt.timedelta(hours=1))
    html = admin_client.get(URL).content.decode()
    assert "3 schedules</a>: " in html
    assert "Shown: the code schedules" not in html
    assert "dynamic-0000" in html and "dynamic-0001" in html and "tests.nightly" in html
