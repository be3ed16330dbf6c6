"""django_cronqueue.housekeeping.maintenance on a real database: expired leases, pruning of finished
rows, forgetting dead workers. (PruneClock, which needs no database, is tested in
tests/unit/housekeeping/test_maintenance.py.)"""

import datetime as dt

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import Batch, Job, Worker
from tests.db.row_locks import row_held_elsewhere
from tests.factories import JobFactory, WorkerFactory
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def statuses():
    return dict(Job.objects.values_list("id", "status"))


# --- recover_expired_leases ---------------------------------------------------------


def test_expired_lease_sends_the_job_back_to_pending_due_at_once():
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    now = timezone.now()
    claim_due(now, queues=None, limit=1, worker_id="crashed-worker")
    later = now + dt.timedelta(seconds=31)
    result = jobs.tick(now=later)
    assert result.claimed == 1 and result.ran == 1
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert job.attempts == 2
    assert "lease lost" in job.last_error and "crashed-worker" in job.last_error


def test_expired_lease_of_the_last_attempt_fails_the_job_and_calls_on_failed():
    test_jobs.FAILURES_SEEN.clear()
    job = jobs.enqueue(test_jobs.fails_with_hook)  # retries=1: two attempts
    now = timezone.now()
    jobs.tick(now=now)  # attempt 1 fails
    claim_due(now, queues=None, limit=1, worker_id="dies")  # attempt 2 is lost
    maintenance.recover_expired_leases(now + dt.timedelta(minutes=1))
    job.refresh_from_db()
    assert job.status == "failed"
    assert "lease lost" in job.last_error
    assert [(job.pk, "LeaseLost")] == test_jobs.FAILURES_SEEN


def test_lease_past_timeout_is_reported_as_a_timeout():
    job = jobs.enqueue(test_jobs.slow_record, {"key": "k", "seconds": 0})
    now = timezone.now()
    claim_due(now, queues=None, limit=1, worker_id="w")
    maintenance.recover_expired_leases(now + dt.timedelta(seconds=120))  # timeout is 60 s
    job.refresh_from_db()
    assert job.status == "pending"
    assert "past its timeout" in job.last_error


def test_only_running_rows_whose_lease_expired_are_recovered():
    now = timezone.now()
    expired = JobFactory(
        status="running", attempts=1, lock_token="t1", locked_until=now - dt.timedelta(seconds=1)
    )
    alive = JobFactory(
        status="running", attempts=1, lock_token="t2", locked_until=now + dt.timedelta(seconds=1)
    )
    exactly = JobFactory(status="running", attempts=1, lock_token="t3", locked_until=now)
    pending = JobFactory(locked_until=now - dt.timedelta(hours=1))
    assert maintenance.recover_expired_leases(now) == 1
    assert statuses() == {
        expired.pk: "pending",
        alive.pk: "running",
        exactly.pk: "running",
        pending.pk: "pending",
    }
    assert maintenance.recover_expired_leases(now) == 0


def test_rows_of_names_no_code_defines_are_recovered_too():
    now = timezone.now()
    JobFactory(
        name="shop.removed_job",
        status="running",
        attempts=1,
        max_attempts=1,
        lock_token="t",
        locked_until=now - dt.timedelta(minutes=1),
    )
    assert maintenance.recover_expired_leases(now) == 1
    job = Job.objects.get()
    assert (job.status, job.finished_at) == ("failed", now)
    assert "lease lost: attempt 1 of 1" in job.last_error


def test_recovery_counts_every_expired_row():
    for key in "abc":
        jobs.enqueue(test_jobs.record, {"key": key})
    now = timezone.now()
    assert len(claim_due(now, queues=None, limit=10, worker_id="gone")) == 3
    assert maintenance.recover_expired_leases(now + dt.timedelta(minutes=1)) == 3
    assert set(statuses().values()) == {"pending"}


# --- prune --------------------------------------------------------------------------


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600, "FAILED_RETENTION": 7200})
def test_pruning_deletes_only_finished_rows_past_retention():
    now = timezone.now()
    old, recent = now - dt.timedelta(hours=3), now - dt.timedelta(minutes=30)
    doomed = [
        JobFactory(status="succeeded", finished_at=old),
        JobFactory(status="failed", finished_at=old),
        JobFactory(status="cancelled", finished_at=old),
    ]
    kept = [
        JobFactory(status="succeeded", finished_at=recent),
        JobFactory(status="failed", finished_at=now - dt.timedelta(hours=1)),
        JobFactory(status="pending", created_at=old, run_at=now + dt.timedelta(days=1)),
        JobFactory(status="running", created_at=old, locked_until=now + dt.timedelta(minutes=1)),
    ]
    jobs.tick(now=now)
    remaining = set(Job.objects.values_list("id", flat=True))
    assert remaining == {job.id for job in kept}
    assert not remaining & {job.id for job in doomed}


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no row locks")
@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600, "FAILED_RETENTION": 3600})
def test_pruning_leaves_a_row_another_transaction_holds_to_its_next_pass():
    """A move to history or a retry holding a row past its retention: the prune goes on
    without it (waiting on it could deadlock with the move) and takes it next time."""
    now = timezone.now()
    old = now - dt.timedelta(hours=3)
    held = JobFactory(status="failed", finished_at=old)
    others = [JobFactory(status="succeeded", finished_at=old) for _ in range(3)]
    with row_held_elsewhere(held.id):
        assert maintenance.prune(now) == 3
    assert set(Job.objects.values_list("id", flat=True)) == {held.id}
    assert not Job.objects.filter(pk__in=[job.pk for job in others]).exists()
    assert maintenance.prune(now) == 1
    assert not Job.objects.exists()


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "PRUNE_BATCH_SIZE": 7})
def test_pruning_works_in_batches():
    old = timezone.now() - dt.timedelta(hours=1)
    JobFactory.create_batch(30, status="succeeded", finished_at=old)
    assert maintenance.prune(timezone.now()) == 30
    assert Job.objects.count() == 0


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": None})
def test_retention_none_keeps_rows_forever():
    JobFactory(status="succeeded", finished_at=timezone.now() - dt.timedelta(days=3650))
    jobs.tick()
    assert Job.objects.count() == 1


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 0, "FAILED_RETENTION": 0})
def test_pruning_never_touches_pending_or_running_rows_whatever_their_timestamps():
    ancient = timezone.now() - dt.timedelta(days=3650)
    kept = [
        JobFactory(status="pending", created_at=ancient, run_at=ancient, finished_at=ancient),
        JobFactory(
            status="running",
            created_at=ancient,
            started_at=ancient,
            finished_at=ancient,
            locked_until=timezone.now() + dt.timedelta(minutes=1),
        ),
    ]
    doomed = JobFactory(status="succeeded", finished_at=ancient)
    assert maintenance.prune(timezone.now()) == 1
    assert set(statuses()) == {job.pk for job in kept}
    assert doomed.pk not in statuses()


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600, "FAILED_RETENTION": None})
def test_failed_retention_none_keeps_failed_and_cancelled_rows():
    old = timezone.now() - dt.timedelta(days=30)
    failed = JobFactory(status="failed", finished_at=old)
    cancelled = JobFactory(status="cancelled", finished_at=old)
    JobFactory(status="succeeded", finished_at=old)
    assert maintenance.prune(timezone.now()) == 1
    assert set(statuses()) == {failed.pk, cancelled.pk}


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600})
def test_retention_is_measured_from_finished_at_to_the_given_now():
    now = timezone.now()
    on_the_edge = JobFactory(status="succeeded", finished_at=now - dt.timedelta(seconds=3600))
    past_it = JobFactory(status="succeeded", finished_at=now - dt.timedelta(seconds=3601))
    assert maintenance.prune(now) == 1
    assert set(statuses()) == {on_the_edge.pk}
    assert past_it.pk not in statuses()
    assert maintenance.prune(now + dt.timedelta(seconds=1)) == 1
    assert statuses() == {}


def test_pruning_forgets_workers_not_seen_for_a_day():
    now = timezone.now()
    dead = WorkerFactory(last_seen=now - dt.timedelta(days=1, seconds=1))
    quiet = WorkerFactory(last_seen=now - dt.timedelta(hours=23))
    maintenance.prune(now)
    assert list(Worker.objects.values_list("id", flat=True)) == [quiet.id]
    assert not Worker.objects.filter(id=dead.id).exists()


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "FAILED_RETENTION": None})
def test_a_finished_batch_is_pruned_with_the_last_of_its_jobs():
    """A batch outlives none of its jobs: it goes once its members and its callback were
    pruned, and stays while any of them (a failed member, kept forever) is left, or while
    it is not finished."""
    done = (
        jobs.group([test_jobs.record.s(key="a"), test_jobs.record.s(key="b")])
        .then(test_jobs.record.s(key="then"))
        .enqueue()
    )
    kept = jobs.group([test_jobs.fails_now.s(key="x"), test_jobs.record.s(key="c")]).enqueue()
    while jobs.tick().claimed:
        pass
    unfinished = jobs.group([test_jobs.record.s(key="d")]).enqueue()
    maintenance.prune(timezone.now() + dt.timedelta(hours=1))
    assert set(Batch.objects.values_list("pk", flat=True)) == {kept.pk, unfinished.pk}
    assert not Batch.objects.filter(pk=done.pk).exists()
    assert list(Job.objects.filter(batch=kept).values_list("status", flat=True)) == ["failed"]


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "FAILED_RETENTION": None})
def test_pruned_jobs_take_their_workflow_links_along_and_their_batch_keeps_a_null_callback():
    """What ``QuerySet.delete()`` did, one statement per table: a pruned job's dependency
    links go with it, and a batch that outlives its pruned callback (a failed member is
    kept) points at no callback instead of a missing row."""
    from django_cronqueue.models import JobDependency

    jobs.chain(test_jobs.record.s(key="first"), test_jobs.record.s(key="second")).enqueue()
    batch = (
        jobs.group([test_jobs.fails_now.s(key="x")])
        .finally_(test_jobs.record.s(key="after"))
        .enqueue()
    )
    while jobs.tick().claimed:
        pass
    assert JobDependency.objects.count() == 1
    assert Batch.objects.get(pk=batch.pk).finally_job_id is not None

    assert maintenance.prune(timezone.now() + dt.timedelta(hours=1)) == 3

    assert list(Job.objects.values_list("status", flat=True)) == ["failed"]
    assert not JobDependency.objects.exists()
    kept = Batch.objects.get(pk=batch.pk)
    assert kept.finally_job_id is None
