"""``MetricsView`` and the gauges behind it (``observe.gauges``) on a real database: who
may scrape, what the exposition says (parsed with ``prometheus_client``'s own parser),
and that a scrape costs a fixed number of queries whatever the number of rows."""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.models import Job, JobStatus
from django_cronqueue.observe.gauges import queue_gauges
from tests.cron_helpers import schedule
from tests.factories import JobFactory, WorkerFactory, dynamic_schedules
from tests.testapp import jobs as test_jobs
from tests.urls import METRICS_TOKEN

pytestmark = pytest.mark.django_db

METRICS = reverse("metrics")


def scrape(client, **headers):
    response = client.get(METRICS, **headers)
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


def samples(text):
    """{(metric name, sorted labels): value} of every sample in the exposition."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found, metric, /, **labels):
    return found[(metric, tuple(sorted(labels.items())))]


# --- who may scrape ---------------------------------------------------------------------


def test_anonymous_and_non_staff_users_are_refused(client):
    assert client.get(METRICS).status_code == 403
    user = User.objects.create_user("shopper", password="pw")
    client.force_login(user)
    assert client.get(METRICS).status_code == 403


def test_a_staff_user_may_scrape(admin_client):
    response = admin_client.get(METRICS)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")


def test_a_scrape_with_the_views_bearer_token_is_let_in(client):
    url = reverse("metrics-token")
    assert client.get(url).status_code == 403
    assert client.get(url, HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert response.status_code == 200


def test_openmetrics_when_the_scraper_asks_for_it(admin_client):
    response = admin_client.get(METRICS, HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


# --- what it says -----------------------------------------------------------------------


def test_jobs_per_status_name_and_queue_with_zeros_for_the_other_statuses(admin_client):
    for n in range(3):
        test_jobs.record.enqueue(key=f"k{n}")
    test_jobs.record.using(queue="emails").enqueue(key="mail")
    JobFactory(name="testapp.record", status=JobStatus.FAILED)
    found = scrape(admin_client)
    name = "testapp.record"
    assert value(found, "cronqueue_jobs", status="pending", name=name, queue="default") == 3
    assert value(found, "cronqueue_jobs", status="failed", name=name, queue="default") == 1
    assert value(found, "cronqueue_jobs", status="running", name=name, queue="default") == 0
    assert value(found, "cronqueue_jobs", status="pending", name=name, queue="emails") == 1
    assert value(found, "cronqueue_jobs", status="succeeded", name=name, queue="emails") == 0


def test_oldest_due_pending_age_per_queue_leaves_out_blocked_and_future_jobs(admin_client):
    now = timezone.now()
    test_jobs.record.using(run_at=now - dt.timedelta(minutes=10)).enqueue(key="late")
    test_jobs.record.using(run_at=now + dt.timedelta(hours=1), queue="later").enqueue(key="x")
    _, waiting = jobs.chain(test_jobs.record.s(key="a"), test_jobs.record.s(key="b")).enqueue()
    Job.objects.filter(pk=waiting.pk).update(run_at=now - dt.timedelta(days=1))
    found = scrape(admin_client)
    age = value(found, "cronqueue_oldest_due_pending_age_seconds", queue="default")
    assert 600 <= age < 24 * 3600, "the blocked job's day is not counted"
    assert value(found, "cronqueue_oldest_due_pending_age_seconds", queue="later") == 0


def test_live_workers_paused_queues_and_names(admin_client):
    WorkerFactory()
    WorkerFactory(last_seen=timezone.now() - dt.timedelta(hours=1))
    test_jobs.record.using(queue="emails").enqueue(key="mail")
    test_jobs.record.enqueue(key="k")
    jobs.pause(queue="emails", reason="provider down")
    jobs.pause(name=test_jobs.noop)
    found = scrape(admin_client)
    assert value(found, "cronqueue_workers_live") == 1
    assert value(found, "cronqueue_queue_paused", queue="emails") == 1
    assert value(found, "cronqueue_queue_paused", queue="default") == 0
    assert value(found, "cronqueue_name_paused", name="testapp.noop") == 1


def test_dynamic_schedule_lag_and_overdue_count(admin_client):
    now = timezone.now()
    # due 30 and 15.5 minutes ago (overdue: later than the 2-minute grace), and 1 minute ago
    dynamic_schedules(3, first_run=now - dt.timedelta(minutes=30), step=dt.timedelta(minutes=14.5))
    found = scrape(admin_client)
    lag = value(found, "cronqueue_dynamic_schedule_lag_seconds")
    assert 30 * 60 <= lag < 31 * 60
    assert value(found, "cronqueue_schedules_overdue", source="dynamic") == 2
    assert value(found, "cronqueue_schedules_overdue", source="code") == 0


def test_code_schedule_lag_counts_from_its_missed_occurrence():
    start = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.timezone.utc)
    with schedule("*/5 * * * *", name="tests.lagging"):
        jobs.tick(now=start)  # arms it: the next occurrence is 08:05
        gauges = queue_gauges(start + dt.timedelta(minutes=20))
    assert gauges.code_schedule_lag["tests.lagging"] == 15 * 60
    assert gauges.overdue_schedules["code"] == 1


def test_a_running_job_is_counted_as_running(admin_client):
    test_jobs.record.enqueue(key="k")
    claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    found = scrape(admin_client)
    labels = {"name": "testapp.record", "queue": "default"}
    assert value(found, "cronqueue_jobs", status="running", **labels) == 1
    assert value(found, "cronqueue_jobs", status="pending", **labels) == 0


def test_a_scrape_costs_the_same_queries_whatever_the_rows(admin_client):
    def queries():
        with CaptureQueriesContext(connection) as captured:
            admin_client.get(METRICS)
        return len(captured)

    JobFactory.create_batch(5)
    late = timezone.now() - dt.timedelta(hours=1)
    dynamic_schedules(1, first_run=late)
    few = queries()
    JobFactory.create_batch(300, status=JobStatus.SUCCEEDED)
    dynamic_schedules(150, first_run=late, prefix="more")
    assert queries() == few
