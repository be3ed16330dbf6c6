"""A job's attempt rows (JobAttempt) go with it: pruned with each batch of jobs, with each
day's history table dropped (PostgreSQL), deleted with the job; while the job sits in
history (PostgreSQL's history tables, MariaDB's history partition) they are still read."""

import datetime as dt

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.history import archive
from django_cronqueue.history.archive import postgresql as pg_history
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import Job, JobAttempt
from django_cronqueue.observe.timeline import job_timeline
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

keeps_history = pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite keeps no history apart"
)


def claim_at(at):
    [claimed] = claim_due(at, queues=None, limit=1, worker_id="w")
    return claimed


def retried_then(at, ending):
    """A job that failed once at ``at``, then failed for good or succeeded."""
    job = JobFactory(max_attempts=2, run_at=at - dt.timedelta(seconds=1))
    lifecycle.complete_failure(claim_at(at), RuntimeError("first"), now=at, definition=None)
    second = claim_at(at)
    if ending == "fail":
        lifecycle.complete_failure(second, RuntimeError("second"), now=at, definition=None)
    else:
        assert lifecycle.complete_success(second, now=at) is True
    return job


def jobs_with_attempts():
    return set(JobAttempt.objects.values_list("job_id", flat=True))


def timeline_outcomes(job):
    timeline = job_timeline(Job.objects.get(pk=job.pk))
    return [event.attempt.outcome for event in timeline.events if event.attempt is not None]


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600, "FAILED_RETENTION": 3600})
def test_pruning_deletes_the_attempts_of_the_jobs_it_deletes_only():
    past = timezone.now() - dt.timedelta(hours=3)
    old_failed = retried_then(past, "fail")
    old_succeeded = retried_then(past, "succeed")
    recent = retried_then(timezone.now() - dt.timedelta(minutes=1), "fail")
    assert jobs_with_attempts() == {old_failed.pk, old_succeeded.pk, recent.pk}

    assert maintenance.prune(timezone.now()) == 2
    assert list(Job.objects.values_list("pk", flat=True)) == [recent.pk]
    assert jobs_with_attempts() == {recent.pk}
    assert JobAttempt.objects.count() == 2


def test_deleting_a_job_deletes_its_attempts():
    doomed = retried_then(timezone.now(), "fail")
    kept = retried_then(timezone.now(), "succeed")
    Job.objects.get(pk=doomed.pk).delete()
    assert jobs_with_attempts() == {kept.pk}


@keeps_history
@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 86400, "FAILED_RETENTION": 86400})
def test_attempts_of_jobs_in_history_are_read_and_pruned_with_them():
    past = timezone.now() - dt.timedelta(days=3)
    failed = retried_then(past, "fail")
    succeeded = retried_then(past, "succeed")
    kept = retried_then(timezone.now() - dt.timedelta(minutes=1), "succeed")

    assert archive.archive(timezone.now()) == 3
    if connection.vendor == "postgresql":  # the rows left the job table for history tables
        day = pg_history.day_table(past.astimezone(dt.timezone.utc).date())
        assert day in pg_history.history_tables(connection)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM ONLY {Job._meta.db_table}")
            assert cursor.fetchone()[0] == 0
    else:  # the rows moved to the history partition
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {Job._meta.db_table} WHERE archived = 1")
            assert cursor.fetchone()[0] == 3
    assert timeline_outcomes(failed) == ["failed", "failed"]
    assert timeline_outcomes(succeeded) == ["failed", "succeeded"]

    maintenance.prune(timezone.now())
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    assert jobs_with_attempts() == {kept.pk}
    if connection.vendor == "postgresql":  # the succeeded job's day went whole
        assert day not in pg_history.history_tables(connection)
