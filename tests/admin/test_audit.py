"""The admin's audit: every operator action writes Django's admin log (LogEntry) with the
user and a clear message, on the object it changed (the Job, the CronSchedule, the Pause,
the FairShare row), where the object's History page and a timeline read it by content
type and object id."""

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import CronSchedule, FairShare, Job, JobStatus, Pause
from django_cronqueue.schedules import scheduler
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cronqueue_job_changelist")
SCHEDULES = reverse("admin:django_cronqueue_cronschedule_changelist")
PAUSES = reverse("admin:django_cronqueue_pause_changelist")
SHARES = reverse("admin:django_cronqueue_fairshare_changelist")
REPORT = "testapp.send_report"


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:django_cronqueue_{name}", args=args)


@pytest.fixture
def rows(nightly):
    scheduler.sync_schedules(timezone.now())
    return {
        "failed": JobFactory(status=JobStatus.FAILED, finished_at=timezone.now()),
        "pending": JobFactory(),
        "running": JobFactory(status=JobStatus.RUNNING, attempts=1),
        "schedule": CronSchedule.objects.get(name="tests.nightly"),
        "dynamic": CronSchedule.objects.create_dynamic(
            name="reports.tenant-7",
            job=REPORT,
            payload={"tenant_id": 7},
            expression="0 8 * * *",
            tz="UTC",
        ),
        "pause": jobs.pause(queue="paused-queue", reason="before"),
        "share": _share("reports", "acme", 2),
    }


def _share(queue: str, key: str, weight: int) -> FairShare:
    jobs.set_weight(queue, key, weight)
    return FairShare.objects.get(queue=queue, fair_key=key)


def list_action(changelist: str, action: str, *pks: int, **extra: Any) -> Callable[..., Any]:
    def post(client: Any) -> Any:
        data = {"action": action, "_selected_action": list(pks), "index": 0, **extra}
        return client.post(changelist, data)

    return post


def dynamic_form(**values: str) -> dict[str, str]:
    data = {
        "job": REPORT,
        "payload": '{"tenant_id": 7}',
        "expression": "0 9 * * *",
        "tz": "UTC",
        "catch_up": "latest",
        "catch_up_window": "",
        "max_catch_up": "10",
        "overlap": "allow",
        "retries": "",
        "queue": "",
        "priority": "",
    }
    return {**data, **values}


@dataclass(frozen=True)
class Audited:
    """An operator action: what it posts, on which row (a key of ``rows``, or how to find
    the row it makes), the entry it must write."""

    post: Callable[[Any, dict[str, Any]], Any]
    model: type
    row: Callable[[dict[str, Any]], Any]
    flag: int
    message: str  # the entry's change message, as get_change_message() renders it


def row(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda rows: rows[key]


BACKFILL = {"start": "2026-01-01", "end": "2026-01-02", "apply": "Backfill"}

AUDITED = {
    "job retry (list)": Audited(
        lambda c, r: list_action(JOBS, "retry_jobs", r["failed"].pk)(c),
        Job,
        row("failed"),
        CHANGE,
        "Retry (admin action)",
    ),
    "job retry (button)": Audited(
        lambda c, r: c.post(url("job_retry", r["failed"].pk)),
        Job,
        row("failed"),
        CHANGE,
        "Retry (admin action)",
    ),
    "job cancel (list)": Audited(
        lambda c, r: list_action(JOBS, "cancel_jobs", r["pending"].pk)(c),
        Job,
        row("pending"),
        CHANGE,
        "Cancel (admin action)",
    ),
    "job cancel (button)": Audited(
        lambda c, r: c.post(url("job_cancel", r["pending"].pk)),
        Job,
        row("pending"),
        CHANGE,
        "Cancel (admin action)",
    ),
    "running job cancel (list, confirmed)": Audited(
        lambda c, r: list_action(JOBS, "cancel_jobs", r["running"].pk, post="yes")(c),
        Job,
        row("running"),
        CHANGE,
        "Cancel request (admin action)",
    ),
    "running job cancel (button, confirmed)": Audited(
        lambda c, r: c.post(url("job_cancel", r["running"].pk), {"post": "yes"}),
        Job,
        row("running"),
        CHANGE,
        "Cancel request (admin action)",
    ),
    "job run now (list)": Audited(
        lambda c, r: list_action(JOBS, "run_jobs_now", r["pending"].pk)(c),
        Job,
        row("pending"),
        CHANGE,
        "Run now (admin action)",
    ),
    "job run now (button)": Audited(
        lambda c, r: c.post(url("job_runnow", r["pending"].pk)),
        Job,
        row("pending"),
        CHANGE,
        "Run now (admin action)",
    ),
    "schedule pause (list)": Audited(
        lambda c, r: list_action(SCHEDULES, "pause_schedules", r["schedule"].pk)(c),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Pause (admin action)",
    ),
    "schedule pause (button)": Audited(
        lambda c, r: c.post(url("cronschedule_pause", r["schedule"].pk)),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Pause (admin action)",
    ),
    "schedule resume (list)": Audited(
        lambda c, r: (
            r["schedule"].pause(),
            list_action(SCHEDULES, "resume_schedules", r["schedule"].pk)(c),
        ),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Resume (admin action)",
    ),
    "schedule resume (button)": Audited(
        lambda c, r: (r["schedule"].pause(), c.post(url("cronschedule_resume", r["schedule"].pk))),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Resume (admin action)",
    ),
    "schedule run now (list)": Audited(
        lambda c, r: list_action(SCHEDULES, "run_schedules_now", r["schedule"].pk)(c),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Run now (admin action): job #",
    ),
    "schedule run now (button)": Audited(
        lambda c, r: c.post(url("cronschedule_runnow", r["schedule"].pk)),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Run now (admin action): job #",
    ),
    "schedule backfill (list)": Audited(
        lambda c, r: list_action(SCHEDULES, "backfill_schedules", r["schedule"].pk, **BACKFILL)(c),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Backfill (admin action): created 2 occurrences",
    ),
    "schedule backfill (page)": Audited(
        lambda c, r: c.post(url("cronschedule_backfill", r["schedule"].pk), BACKFILL),
        CronSchedule,
        row("schedule"),
        CHANGE,
        "Backfill (admin action): created 2 occurrences",
    ),
    "schedule add": Audited(
        lambda c, r: c.post(url("cronschedule_add"), dynamic_form(name="reports.tenant-42")),
        CronSchedule,
        lambda r: CronSchedule.objects.get(name="reports.tenant-42"),
        ADDITION,
        "Added.",
    ),
    "schedule change": Audited(
        lambda c, r: c.post(url("cronschedule_change", r["dynamic"].pk), dynamic_form()),
        CronSchedule,
        row("dynamic"),
        CHANGE,
        "Changed expression.",
    ),
    "schedule delete": Audited(
        lambda c, r: c.post(url("cronschedule_delete", r["dynamic"].pk), {"post": "yes"}),
        CronSchedule,
        row("dynamic"),
        DELETION,
        "",
    ),
    "pause add": Audited(
        lambda c, r: c.post(
            url("pause_add"), {"queue": "emails", "name": "", "until_0": "", "until_1": ""}
        ),
        Pause,
        lambda r: Pause.objects.get(queue="emails"),
        ADDITION,
        "Added.",
    ),
    "pause change": Audited(
        lambda c, r: c.post(
            url("pause_change", r["pause"].pk),
            {"until_0": "", "until_1": "", "reason": "after"},
        ),
        Pause,
        row("pause"),
        CHANGE,
        "Changed Reason.",
    ),
    "pause delete (resume)": Audited(
        lambda c, r: c.post(url("pause_delete", r["pause"].pk), {"post": "yes"}),
        Pause,
        row("pause"),
        DELETION,
        "",
    ),
    "pause resume selected": Audited(
        lambda c, r: list_action(PAUSES, "delete_selected", r["pause"].pk, post="yes")(c),
        Pause,
        row("pause"),
        DELETION,
        "",
    ),
    "dashboard pause": Audited(
        lambda c, r: c.post(url("job_dashboard_pause"), {"queue": "emails"}),
        Pause,
        lambda r: Pause.objects.get(queue="emails"),
        ADDITION,
        "Paused from the dashboard, until resumed",
    ),
    "dashboard resume": Audited(
        lambda c, r: c.post(url("job_dashboard_resume"), {"queue": "paused-queue"}),
        Pause,
        row("pause"),
        DELETION,
        "",
    ),
    "fair share weight (page)": Audited(
        lambda c, r: c.post(url("fairshare_change", r["share"].pk), {"weight": 5}),
        FairShare,
        row("share"),
        CHANGE,
        "Weight 2 -> 5",
    ),
    "fair share weight (in place on the list)": Audited(
        lambda c, r: c.post(
            SHARES,
            {
                "form-TOTAL_FORMS": 1,
                "form-INITIAL_FORMS": 1,
                "form-0-id": r["share"].pk,
                "form-0-weight": 5,
                "_save": "Save",
            },
        ),
        FairShare,
        row("share"),
        CHANGE,
        "Weight 2 -> 5",
    ),
}


@pytest.mark.parametrize("name", list(AUDITED))
def test_every_operator_action_writes_its_history_entry(admin_client, admin_user, rows, name):
    audited = AUDITED[name]
    LogEntry.objects.all().delete()
    audited.post(admin_client, rows)
    target = audited.row(rows)
    entries = list(LogEntry.objects.all())
    assert len(entries) == 1, [(e.object_repr, e.change_message) for e in entries]
    entry = entries[0]
    assert entry.user_id == admin_user.pk
    assert entry.content_type == ContentType.objects.get_for_model(audited.model)
    assert (entry.object_id, entry.action_flag) == (str(target.pk), audited.flag)
    assert entry.get_change_message().startswith(audited.message)
    assert entry.action_time >= timezone.now() - dt.timedelta(minutes=1)


def test_a_job_action_is_listed_on_the_jobs_history_page(admin_client, rows):
    admin_client.post(url("job_retry", rows["failed"].pk))
    page = admin_client.get(url("job_history", rows["failed"].pk)).content.decode()
    assert "Retry (admin action)" in page
    assert "admin" in page


def test_an_action_that_changes_nothing_writes_no_entry(admin_client, rows):
    list_action(JOBS, "retry_jobs", rows["pending"].pk)(admin_client)  # not retryable
    rows["schedule"].pause()
    admin_client.post(url("cronschedule_pause", rows["schedule"].pk))  # already paused
    assert not LogEntry.objects.exists()


def test_a_cancel_of_pending_and_running_jobs_writes_each_its_own_entry(admin_client, rows):
    pending, running = rows["pending"], rows["running"]
    list_action(JOBS, "cancel_jobs", pending.pk, running.pk, post="yes")(admin_client)
    entries = dict(LogEntry.objects.values_list("object_id", "change_message"))
    assert entries == {
        str(pending.pk): "Cancel (admin action)",
        str(running.pk): "Cancel request (admin action)",
    }
    reprs = set(LogEntry.objects.values_list("object_repr", flat=True))
    assert reprs == {f"{pending.name} #{pending.pk} (cancelled)", str(running)}
