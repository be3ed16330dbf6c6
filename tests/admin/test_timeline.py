"""A job's page shows its timeline (observe.timeline): enqueue, due time, each attempt
with its worker, outcome, error and traceback, snoozes and retries, progress, a cancel
request, its end, and the admin's log entries with their users; a cron schedule's page
lists its admin log entries. Every text is escaped."""

import datetime as dt

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.exceptions import Snooze
from django_cronqueue.models import CronSchedule, Job, JobAttempt, JobStatus
from django_cronqueue.observe import timeline as observe_timeline
from tests.factories import CronScheduleFactory, JobFactory

pytestmark = pytest.mark.django_db

EVIL = "<script>alert({})</script>"


def change_url(job):
    return reverse("admin:django_cronqueue_job_change", args=[job.pk])


def claim(worker_id="w", now=None):
    [claimed] = claim_due(now or timezone.now(), queues=None, limit=1, worker_id=worker_id)
    return claimed


def timeline_of(client, job):
    response = client.get(change_url(job))
    assert response.status_code == 200
    return response.context["cq_timeline"], response.content.decode()


def titles(timeline):
    return [event.title for event in timeline.events]


def test_a_job_retried_by_its_policy_then_by_an_operator_shows_every_step(admin_client):
    job = JobFactory(max_attempts=2, run_at=timezone.now() - dt.timedelta(seconds=5))
    lifecycle.complete_failure(
        claim("worker-a"), ValueError("first"), now=timezone.now(), definition=None
    )
    lifecycle.complete_failure(
        claim("worker-b"), ValueError("second"), now=timezone.now(), definition=None
    )
    admin_client.post(reverse("admin:django_cronqueue_job_retry", args=[job.pk]))

    timeline, html = timeline_of(admin_client, job)
    assert titles(timeline) == [
        "Enqueued",
        "Attempt 1 failed",
        "Attempt 2 failed",  # its last: the job failed (no retry due)
        "Due (run_at)",  # again, by the operator's retry
        "Retry (admin action)",
    ]
    first, second = (event for event in timeline.events if event.attempt is not None)
    assert (first.who, first.attempt.error) == ("worker-a", "ValueError: first")
    assert first.attempt.then == "retry due at"
    assert first.attempt.retry_at is not None
    assert (second.who, second.attempt.error) == ("worker-b", "ValueError: second")
    assert (second.attempt.then, second.attempt.retry_at) == ("", None)  # the job failed
    [admin] = [event for event in timeline.events if event.kind == "admin"]
    assert admin.who == "admin"  # the user of admin_client
    assert '<fieldset class="module cq-timeline"' in html
    assert "<summary>Traceback</summary>" in html
    assert "ValueError: second" in html


def test_a_first_attempt_success_shows_its_run_from_the_job_row(admin_client):
    job = JobFactory()
    claimed = claim("worker-1")
    lifecycle.complete_success(claimed, now=timezone.now())
    assert not JobAttempt.objects.filter(job_id=job.pk).exists()

    timeline, _ = timeline_of(admin_client, job)
    [attempt] = [event for event in timeline.events if event.attempt is not None]
    assert (attempt.title, attempt.who) == ("Attempt 1 succeeded", "worker-1")
    row = Job.objects.get(pk=job.pk)
    assert (attempt.attempt.started_at, attempt.attempt.finished_at) == (
        row.started_at,
        row.finished_at,
    )


def test_a_snoozed_job_shows_the_snooze_then_its_run(admin_client):
    job = JobFactory()
    lifecycle.complete_snooze(claim("w1"), Snooze(seconds=0), now=timezone.now())
    lifecycle.complete_success(claim("w2"), now=timezone.now())

    timeline, html = timeline_of(admin_client, job)
    attempts = [event for event in timeline.events if event.attempt is not None]
    assert [(event.title, event.who) for event in attempts] == [
        ("Attempt 1 snoozed", "w1"),
        ("Attempt 1 succeeded", "w2"),
    ]
    assert attempts[0].attempt.then == "snoozed until"
    assert "then snoozed until <time" in html


def test_a_running_job_shows_its_progress_and_the_cancel_request(admin_client):
    job = JobFactory()
    claim("busy-worker")
    at = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        progress={"done": 3, "total": 10, "message": "chunk 3", "at": at.isoformat()}
    )
    jobs.cancel(job.pk, reason="wrong input", by="ops")

    timeline, _ = timeline_of(admin_client, job)
    by_kind = {event.kind: event for event in timeline.events}
    running = by_kind["attempt"]
    assert (running.title, running.who) == ("Attempt 1 running", "busy-worker")
    assert by_kind["progress"].detail == "3/10 (30%): chunk 3"
    assert (by_kind["cancel_request"].who, by_kind["cancel_request"].detail) == (
        "ops",
        "wrong input",
    )
    assert "finished" not in by_kind


def test_only_the_latest_attempts_are_shown_with_the_count_of_the_others(admin_client, monkeypatch):
    monkeypatch.setattr(observe_timeline, "ATTEMPTS_SHOWN", 3)
    job = JobFactory(max_attempts=10)
    for n in range(5):
        lifecycle.complete_failure(
            claim(f"w{n}"), ValueError(str(n)), now=timezone.now(), definition=None
        )
    timeline, html = timeline_of(admin_client, job)
    attempts = [event for event in timeline.events if event.attempt is not None]
    assert [event.who for event in attempts] == ["w2", "w3", "w4"]
    assert timeline.earlier_attempts == 2
    assert "2 earlier attempts not shown" in html


def test_a_view_only_user_sees_the_timeline(viewer_client):
    job = JobFactory()
    lifecycle.complete_failure(claim(), ValueError("seen"), now=timezone.now(), definition=None)
    timeline, html = timeline_of(viewer_client, job)
    assert "Attempt 1 failed" in titles(timeline)
    assert "ValueError: seen" in html


def test_the_timeline_escapes_every_text(admin_client):
    job = JobFactory(queue=EVIL.format(1), max_attempts=1)
    claimed = claim(EVIL.format(2))
    jobs.cancel(job.pk, reason=EVIL.format(3), by=EVIL.format(4))
    Job.objects.filter(pk=job.pk).update(progress={"done": 1, "message": EVIL.format(5)})
    lifecycle.complete_failure(
        claimed,
        ValueError("<img src=x onerror=alert(6)>"),
        now=timezone.now(),
        definition=None,
    )
    user = User.objects.get(username="admin")
    LogEntry.objects.log_actions(
        user_id=user.pk,
        queryset=[Job.objects.get(pk=job.pk)],
        action_flag=CHANGE,
        change_message=EVIL.format(7),
    )
    _, html = timeline_of(admin_client, job)
    section = html[html.index('id="cq-timeline"') :]
    assert "<script>alert" not in section
    assert "<img src=x" not in section
    for n in (1, 2, 3, 4, 5, 7):
        assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in section
    assert "&lt;img src=x onerror=alert(6)&gt;" in section


def test_a_schedules_page_lists_its_admin_log_entries_with_their_users(admin_client):
    schedule = CronScheduleFactory(name="tests.logged")
    other = CronScheduleFactory(name="tests.other")
    admin_client.post(reverse("admin:django_cronqueue_cronschedule_pause", args=[schedule.pk]))
    operator = User.objects.create_user("operator-<b>1</b>", is_staff=True)
    LogEntry.objects.create(
        user=operator,
        content_type=ContentType.objects.get_for_model(CronSchedule),
        object_id=str(schedule.pk),
        object_repr=str(schedule),
        action_flag=CHANGE,
        change_message="Resumed <b>now</b>",
    )
    LogEntry.objects.create(
        user=operator,
        content_type=ContentType.objects.get_for_model(CronSchedule),
        object_id=str(other.pk),
        object_repr=str(other),
        action_flag=CHANGE,
        change_message="Another schedule's entry",
    )
    response = admin_client.get(
        reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk])
    )
    lines = response.context["cq_admin_log"]
    assert [line.user for line in lines] == ["admin", "operator-<b>1</b>"]
    assert lines[1].action == "Resumed <b>now</b>"
    assert "ause" in lines[0].action  # the admin's pause, as its action logged it
    html = response.content.decode()
    section = html[html.index('id="cq-admin-log"') :]
    assert "operator-&lt;b&gt;1&lt;/b&gt;" in section
    assert "Resumed &lt;b&gt;now&lt;/b&gt;" in section
    assert "Another schedule" not in section


def test_a_schedule_without_entries_says_so(admin_client):
    schedule = CronScheduleFactory()
    html = admin_client.get(
        reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk])
    ).content.decode()
    assert "No operator action on this schedule is recorded" in html


def test_a_cancelled_pending_job_shows_its_end_without_an_attempt(admin_client):
    now = timezone.now()
    job = JobFactory(created_at=now, run_at=now)
    jobs.cancel(job.pk, reason="not needed", by="ops")
    timeline, _ = timeline_of(admin_client, job)
    assert [event.kind for event in timeline.events] == ["enqueued", "due", "finished"]
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
