"""The admin and ``MetricsView`` with the queue in ``jobs`` and the users, sessions and
admin history in ``default``; and ``READ_DATABASE``: the dashboard and the metrics read
the replica alias, the job list and every change read and write the queue's database."""

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_cronqueue import jobs
from django_cronqueue.models import CronSchedule, Job, JobStatus, Pause
from tests.db.metrics.test_view import scrape, value
from tests.testapp import jobs as test_jobs

from .conftest import BOTH

CHANGELIST = reverse("admin:django_cronqueue_job_changelist")
DASHBOARD = reverse("admin:django_cronqueue_job_dashboard")
DASHBOARD_RESUME = reverse("admin:django_cronqueue_job_dashboard_resume")
SCHEDULE_ADD = reverse("admin:django_cronqueue_cronschedule_add")
METRICS = reverse("metrics")
REPORT = "testapp.send_report"


def failed_job(key):
    job = test_jobs.fails_now.enqueue(key=key)
    jobs.tick()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    return job


@pytest.mark.django_db(databases=BOTH)
def test_the_job_list_detail_and_retry_button_use_the_jobs_database(admin_client):
    failed = failed_job("to retry")
    pending = test_jobs.record.enqueue(key="listed")

    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    assert {job.pk for job in response.context["cl"].result_list} == {pending.pk, failed.pk}
    detail = reverse("admin:django_cronqueue_job_change", args=[failed.pk])
    assert admin_client.get(detail).status_code == 200

    retry = reverse("admin:django_cronqueue_job_retry", args=[failed.pk])
    response = admin_client.post(retry, follow=True)
    assert response.status_code == 200
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == (JobStatus.PENDING, 0)
    # The admin's history stays with the site's data.
    assert LogEntry.objects.using("default").filter(object_id=str(failed.pk)).exists()


def schedule_form(**values):
    return {
        "name": "reports.tenant-42",
        "job": REPORT,
        "payload": '{"tenant_id": 42}',
        "expression": "0 8 * * 1-5",
        "tz": "UTC",
        "catch_up": "latest",
        "catch_up_window": "",
        "max_catch_up": "10",
        "overlap": "allow",
        "retries": "",
        "queue": "",
        "priority": "",
        **values,
    }


@pytest.mark.django_db(databases=BOTH)
def test_a_dynamic_schedule_is_added_and_deleted_through_the_admin(admin_client):
    response = admin_client.post(SCHEDULE_ADD, schedule_form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = CronSchedule.objects.using("jobs").get(name="reports.tenant-42")
    assert LogEntry.objects.get(object_id=str(row.pk)).action_flag == ADDITION

    schedules = reverse("admin:django_cronqueue_cronschedule_changelist")
    assert admin_client.get(schedules).status_code == 200
    delete = reverse("admin:django_cronqueue_cronschedule_delete", args=[row.pk])
    assert admin_client.get(delete).status_code == 200
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not CronSchedule.objects.using("jobs").filter(pk=row.pk).exists()
    assert LogEntry.objects.filter(object_id=str(row.pk), action_flag=DELETION).exists()


@pytest.mark.django_db(databases=BOTH)
def test_the_dashboard_and_the_metrics_count_the_jobs_database(admin_client):
    failed_job("broken")
    test_jobs.record.enqueue(key="waiting")

    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    facts = response.context["facts"]
    assert (facts.counts[JobStatus.PENDING], facts.counts[JobStatus.FAILED]) == (1, 1)
    assert facts.failed_recently == 1

    found = scrape(admin_client)
    assert jobs_gauge(found, "pending", "testapp.record") == 1
    assert jobs_gauge(found, "failed", "testapp.fails_now") == 1


def jobs_gauge(found, status, name):
    return value(found, "cronqueue_jobs", status=status, name=name, queue="default")


@pytest.mark.django_db(databases=BOTH)
def test_a_batch_page_and_the_pauses_work_on_the_jobs_database(admin_client):
    batch = jobs.group([test_jobs.record.s(key="member")]).enqueue()
    response = admin_client.get(reverse("admin:django_cronqueue_batch_change", args=[batch.pk]))
    assert response.status_code == 200
    assert response.context["original"].pk == batch.pk

    add = reverse("admin:django_cronqueue_pause_add")
    form = {"queue": "", "name": "testapp.record", "until_0": "", "until_1": "", "reason": ""}
    assert admin_client.post(add, form).status_code == 302
    pause = Pause.objects.using("jobs").get()
    assert pause.name == "testapp.record"
    assert jobs.tick().claimed == 0  # the pause holds the member back
    assert admin_client.post(DASHBOARD_RESUME, {"name": "testapp.record"}).status_code == 302
    assert not Pause.objects.using("jobs").exists()
    assert jobs.tick().ran == 1


# --- READ_DATABASE ---------------------------------------------------------------------

WITH_REPLICA = [*BOTH, "jobs_replica"]


def queries_on(alias):
    return CaptureQueriesContext(connections[alias])


@pytest.mark.django_db(transaction=True, databases=WITH_REPLICA)
def test_the_dashboard_and_the_metrics_read_the_replica(admin_client):
    test_jobs.record.enqueue(key="waiting")
    with override_settings(CRONQUEUE={"DATABASE": "jobs", "READ_DATABASE": "jobs_replica"}):
        with queries_on("jobs") as primary, queries_on("jobs_replica") as replica:
            assert admin_client.get(DASHBOARD).status_code == 200
        assert len(replica.captured_queries) > 0
        assert primary.captured_queries == []

        with queries_on("jobs") as primary, queries_on("jobs_replica") as replica:
            found = scrape(admin_client)
        assert jobs_gauge(found, "pending", "testapp.record") == 1
        assert len(replica.captured_queries) > 0
        assert primary.captured_queries == []


@pytest.mark.django_db(transaction=True, databases=WITH_REPLICA)
def test_the_job_list_and_the_worker_never_read_the_replica(admin_client):
    job = test_jobs.record.enqueue(key="claimed")
    with override_settings(CRONQUEUE={"DATABASE": "jobs", "READ_DATABASE": "jobs_replica"}):
        with queries_on("jobs_replica") as replica:
            assert admin_client.get(CHANGELIST).status_code == 200
            assert jobs.tick().ran == 1
        assert replica.captured_queries == []
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
