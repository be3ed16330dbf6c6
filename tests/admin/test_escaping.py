"""Every text the admin shows is escaped: names, queues, payloads, errors, tracebacks,
dedupe keys, worker ids, schedule names and the messages that name them."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cronqueue.models import JobAttempt, JobStatus
from tests.admin.conftest import messages_of
from tests.factories import CronScheduleFactory, JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db

EVIL = "<script>alert({})</script>"


def evil(n):
    return EVIL.format(n)


@pytest.fixture
def evil_job():
    now = timezone.now()
    WorkerFactory(id=evil(9), hostname=evil(10), last_seen=now)
    return JobFactory(
        name=evil(1),
        queue=evil(2),
        payload={evil(3): "</pre>" + evil(4), "nested": [evil(5)]},
        status=JobStatus.FAILED,
        finished_at=now - dt.timedelta(minutes=3),
        last_error=f"ValueError: {evil(6)}",
        traceback=f"Traceback (most recent call last):\n  <img src=x onerror=alert(7)>\n{evil(8)}",
        dedupe_key=evil(11),
        worker_id=evil(9),
        result={"html": evil(12)},
    )


def assert_escaped(html):
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert" in html


def test_job_list_escapes(admin_client, evil_job):
    html = admin_client.get(reverse("admin:django_cronqueue_job_changelist")).content.decode()
    assert_escaped(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the name, and its filter choice
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html  # the queue
    assert "&lt;script&gt;alert(6)&lt;/script&gt;" in html  # the error


def test_job_search_term_is_escaped(admin_client, evil_job):
    url = reverse("admin:django_cronqueue_job_changelist")
    html = admin_client.get(url, {"q": evil(13), "name": evil(14)}).content.decode()
    assert "<script>alert" not in html


def test_job_detail_escapes_payload_error_traceback_and_lease(admin_client, evil_job):
    url = reverse("admin:django_cronqueue_job_change", args=[evil_job.pk])
    html = admin_client.get(url).content.decode()
    assert_escaped(html)
    for n in (1, 3, 4, 5, 6, 8, 9, 11, 12):
        assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in html, n
    assert "&lt;img src=x onerror=alert(7)&gt;" in html
    assert "&lt;/pre&gt;" in html


def test_lease_holder_of_a_running_job_escapes(admin_client, evil_job):
    evil_job.status = JobStatus.RUNNING
    evil_job.save()
    url = reverse("admin:django_cronqueue_job_change", args=[evil_job.pk])
    html = admin_client.get(url).content.decode()
    assert_escaped(html)
    assert "&lt;script&gt;alert(10)&lt;/script&gt;" in html  # the worker's host


def test_job_timeline_escapes_attempts_and_admin_log_entries(admin_client, evil_job):
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.auth.models import User

    now = timezone.now()
    JobAttempt.objects.create(
        job=evil_job,
        attempt=1,
        started_at=now - dt.timedelta(minutes=5),
        finished_at=now - dt.timedelta(minutes=4),
        worker=evil(20),
        outcome="failed",
        error=f"ValueError: {evil(21)}",
        traceback=f"Traceback:\n  <img src=x onerror=alert(22)>\n{evil(23)}",
        retry_at=now - dt.timedelta(minutes=3),
    )
    LogEntry.objects.log_actions(
        user_id=User.objects.get(username="admin").pk,
        queryset=[evil_job],
        action_flag=CHANGE,
        change_message=evil(24),
    )
    url = reverse("admin:django_cronqueue_job_change", args=[evil_job.pk])
    html = admin_client.get(url).content.decode()
    timeline = html[html.index('id="cq-timeline"') :]
    assert_escaped(timeline)
    for n in (2, 20, 21, 23, 24):
        assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in timeline, n
    assert "&lt;img src=x onerror=alert(22)&gt;" in timeline


def test_dashboard_escapes(admin_client, evil_job):
    CronScheduleFactory(name=evil(15), expression="0 * * * *", active=True)
    html = admin_client.get(reverse("admin:django_cronqueue_job_dashboard")).content.decode()
    assert_escaped(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the chart's job name
    assert "&lt;script&gt;alert(15)&lt;/script&gt;" in html  # the schedule name
    assert "&lt;script&gt;alert(10)&lt;/script&gt;" in html  # the worker's host


def test_action_messages_escape(admin_client):
    schedule = CronScheduleFactory(name=evil(16))
    response = admin_client.post(
        reverse("admin:django_cronqueue_cronschedule_changelist"),
        {"action": "pause_schedules", "_selected_action": [schedule.pk], "index": 0},
        follow=True,
    )
    assert messages_of(response) == [f"Paused 1 schedule: {evil(16)}."]
    html = response.content.decode()
    assert "<script>alert" not in html
    assert "Paused 1 schedule: &lt;script&gt;alert(16)&lt;/script&gt;." in html


def test_schedule_pages_escape(admin_client):
    schedule = CronScheduleFactory(name=evil(17), expression="0 * * * *", tz="UTC", active=False)
    for url in (
        reverse("admin:django_cronqueue_cronschedule_changelist"),
        reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk]),
    ):
        html = admin_client.get(url).content.decode()
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(17)&lt;/script&gt;" in html


# --- progress, cancel requests and pauses -------------------------------------------


def test_progress_messages_and_cancel_requests_are_escaped(admin_client):
    job = JobFactory(
        status=JobStatus.RUNNING,
        progress={"done": 1, "total": 2, "message": evil(18) + '" onmouseover="x', "at": None},
        cancel_requested_at=timezone.now(),
        cancel_requested_by=evil(19),
        cancel_reason=evil(20),
    )
    html = admin_client.get(reverse("admin:django_cronqueue_job_changelist")).content.decode()
    assert "<script>alert" not in html
    assert '" onmouseover="x' not in html
    assert "&lt;script&gt;alert(18)&lt;/script&gt;&quot; onmouseover=&quot;x" in html
    url = reverse("admin:django_cronqueue_job_change", args=[job.pk])
    html = admin_client.get(url).content.decode()
    assert "<script>alert" not in html
    for n in (18, 19, 20):
        assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in html, n


@pytest.fixture
def evil_pauses():
    from django_cronqueue import jobs

    JobFactory(queue=evil(21), name=evil(22))
    jobs.pause(queue=evil(21), reason=evil(23), by=evil(24))
    jobs.pause(name=evil(22), reason=evil(25))


def test_pauses_are_escaped_on_the_dashboard_the_pause_list_and_the_job_page(
    admin_client, evil_pauses
):
    from django_cronqueue.models import Job

    pages = [
        reverse("admin:django_cronqueue_job_dashboard"),
        reverse("admin:django_cronqueue_pause_changelist"),
        reverse("admin:django_cronqueue_job_change", args=[Job.objects.get().pk]),
    ]
    for url in pages:
        html = admin_client.get(url).content.decode()
        assert "<script>alert" not in html, url
        for n in (21, 22, 23):
            assert f"&lt;script&gt;alert({n})&lt;/script&gt;" in html, (url, n)
    html = admin_client.get(pages[0]).content.decode()
    assert 'value="&lt;script&gt;alert(21)&lt;/script&gt;"' in html  # the button's field
    assert "&lt;script&gt;alert(24)&lt;/script&gt;" in html  # who paused


def test_pause_messages_escape(admin_client):
    url = reverse("admin:django_cronqueue_job_dashboard_pause")
    response = admin_client.post(url, {"queue": evil(26)}, follow=True)
    assert messages_of(response)[0].startswith(f"Paused queue {evil(26)} until resumed")
    html = response.content.decode()
    assert "<script>alert" not in html
    assert "Paused queue &lt;script&gt;alert(26)&lt;/script&gt; until resumed" in html
