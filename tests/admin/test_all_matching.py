"""A job action on all the jobs the filters match (the list's "Select all N"): a
confirmation page states N and the filters first; its Yes acts on every matching row in
batches, each batch its own transaction, re-checking each row's status in the UPDATE."""

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from django_cronqueue.models import Job, JobStatus
from django_cronqueue.operations import bulk
from tests.admin.conftest import messages_of
from tests.factories import JobFactory

JOBS = reverse("admin:django_cronqueue_job_changelist")
FILTERED = JOBS + "?status=failed&queue=emails"
#: More than two batches.
N = 2 * bulk.BATCH_SIZE + 1
SELECT_ALL = {"action": "retry_jobs", "select_across": 1, "index": 0, "_selected_action": [1]}


def failed_jobs(n, queue="emails"):
    finished = timezone.now()
    Job.objects.bulk_create(
        JobFactory.build(status=JobStatus.FAILED, queue=queue, finished_at=finished)
        for _ in range(n)
    )
    return list(Job.objects.filter(queue=queue).order_by("pk").values_list("pk", flat=True))


def statuses(queue="emails"):
    return set(Job.objects.filter(queue=queue).values_list("status", flat=True))


@pytest.mark.django_db
def test_select_all_asks_first_stating_n_and_the_filters(admin_client):
    failed_jobs(N)
    failed_jobs(3, queue="other")  # filtered out
    JobFactory(queue="emails")  # pending: does not match status=failed
    page = admin_client.post(FILTERED, SELECT_ALL)
    assert page.status_code == 200
    assert page.templates[0].name == "django_cronqueue/admin/all_matching_confirmation.html"
    assert page.context["total"] == N
    assert page.context["filters"] == [("status", "failed"), ("queue", "emails")]
    html = page.content.decode()
    assert f"<strong>{N:,} jobs</strong>" in html
    assert "status: <code>failed</code>" in html and "queue: <code>emails</code>" in html
    assert f'value="Yes, retry all {N:,} jobs"' in html
    assert 'name="select_across" value="1"' in html and 'name="post" value="yes"' in html
    assert statuses() == {JobStatus.FAILED, JobStatus.PENDING}
    assert Job.objects.filter(status=JobStatus.FAILED, queue="emails").count() == N
    assert not LogEntry.objects.exists()


@pytest.mark.django_db
def test_the_page_says_what_the_action_skips_and_what_a_cancel_stops(admin_client):
    failed_jobs(2)
    JobFactory.create_batch(3, queue="emails")
    JobFactory(queue="emails", status=JobStatus.RUNNING)
    data = {**SELECT_ALL, "action": "cancel_jobs"}
    page = admin_client.post(JOBS + "?queue=emails", data)
    context = page.context
    assert (context["total"], context["applicable"], context["skipped"]) == (6, 4, 2)
    assert context["running"] == 1
    assert "1 of them is running" in page.content.decode()
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == 0


@pytest.mark.django_db
def test_confirming_acts_on_every_matching_job(admin_client):
    ids = failed_jobs(N)
    others = failed_jobs(3, queue="other")
    response = admin_client.post(FILTERED, {**SELECT_ALL, "post": "yes"}, follow=True)
    assert messages_of(response)[0].startswith(f"Retried {N:,} jobs: #{ids[0]}, ")
    assert statuses() == {JobStatus.PENDING}
    assert statuses("other") == {JobStatus.FAILED}
    logged = set(LogEntry.objects.values_list("object_id", flat=True))
    assert logged == {str(pk) for pk in ids}
    assert not logged & {str(pk) for pk in others}


@pytest.mark.django_db
def test_a_job_that_changed_meanwhile_is_skipped(admin_client, monkeypatch):
    """A worker claims a job of the second batch after the batch was read: the UPDATE's
    WHERE skips it, and the other jobs of that batch are retried and logged."""
    ids = failed_jobs(N)
    claimed = ids[bulk.BATCH_SIZE + 10]
    read = bulk._batches

    def read_then_claim(jobs, size):
        for number, batch in enumerate(read(jobs, size)):
            if number == 1:
                Job.objects.filter(pk=claimed).update(status=JobStatus.RUNNING, attempts=1)
            yield batch

    monkeypatch.setattr(bulk, "_batches", read_then_claim)
    response = admin_client.post(FILTERED, {**SELECT_ALL, "post": "yes"}, follow=True)
    retried, skipped = messages_of(response)
    assert retried.startswith(f"Retried {N - 1:,} jobs: #{ids[0]}, ")
    assert skipped == "Skipped 1 job (changed meanwhile)."
    job = Job.objects.get(pk=claimed)
    assert (job.status, job.attempts) == (JobStatus.RUNNING, 1)
    assert Job.objects.filter(pk__in=ids, status=JobStatus.PENDING).count() == N - 1
    logged = set(LogEntry.objects.values_list("object_id", flat=True))
    assert logged == {str(pk) for pk in ids if pk != claimed}


@pytest.mark.django_db(transaction=True)
def test_the_updates_are_batched_each_batch_its_own_transaction(admin_client):
    """Every retry UPDATE is bounded by the batch size, each batch commits before the next
    one's UPDATE (no transaction spans all of them), and a batch's history entries are
    written in its own transaction."""
    failed_jobs(N)
    events = []

    def record(execute, sql, params, many, context):
        if sql.startswith("UPDATE") and "attempts" in sql:
            events.append(("update", len(params)))
            transaction.on_commit(lambda: events.append(("commit", 0)), using=connection.alias)
        elif sql.startswith("INSERT") and "django_admin_log" in sql:
            events.append(("history", 0))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = admin_client.post(FILTERED, {**SELECT_ALL, "post": "yes"})
    assert response.status_code == 302
    assert statuses() == {JobStatus.PENDING}
    updates = [size for kind, size in events if kind == "update"]
    assert len(updates) == 3  # 500, 500 and 1 rows
    # each names its batch's ids twice (the rows read, the rows locked), never all N
    assert all(size <= 2 * bulk.BATCH_SIZE + 20 for size in updates), updates
    # a batch's history may take several INSERTs (SQLite's limit of 999 parameters)
    kinds = [kind for kind, _ in events]
    steps = [kind for number, kind in enumerate(kinds) if number == 0 or kinds[number - 1] != kind]
    assert steps == ["update", "history", "commit"] * 3
    assert LogEntry.objects.count() == N


@pytest.mark.django_db
def test_the_filters_on_the_page_are_escaped(admin_client):
    failed_jobs(2)
    page = admin_client.post(JOBS + "?q=<b>x</b>&queue=emails", SELECT_ALL)
    html = page.content.decode()
    assert "search: <code>&lt;b&gt;x&lt;/b&gt;</code>" in html
    assert "<b>x</b>" not in html
