"""Every text the admin shows is escaped: names, queues, payloads, errors, tracebacks,
dedupe keys, worker ids, schedule names and the messages that name them."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cronqueue.models import JobStatus
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
