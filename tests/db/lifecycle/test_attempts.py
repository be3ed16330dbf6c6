"""django_cronqueue.lifecycle.attempts: the JobAttempt row each attempt writes when it ends
in anything but a first-attempt success, with the job's own status change; and none, nor
any statement more, for a first-attempt success."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import JobDefinition, registry
from django_cronqueue.exceptions import JobCancelled, Snooze
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.lifecycle import Outcome
from django_cronqueue.models import Job, JobAttempt
from django_cronqueue.running.execution import Call, Recorder
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def claim_one(now=None, worker_id="w"):
    [claimed] = claim_due(now or timezone.now(), queues=None, limit=1, worker_id=worker_id)
    return claimed


def definition():
    def handler(key: str) -> None:
        return None

    return JobDefinition(name="testapp.record", func=handler, backoff=lambda attempt: 0)


def attempts_of(job):
    return list(
        JobAttempt.objects.filter(job_id=job.pk)
        .order_by("id")
        .values_list("attempt", "outcome", "worker", "retry_at")
    )


def row_of(job):
    """The columns maintenance.recover_expired_leases reads for lose_lease."""
    return Job.objects.filter(pk=job.pk).values(
        "id", "name", "lock_token", "attempts", "max_attempts", "started_at", "worker_id"
    )[0]


def test_a_retry_then_a_success_writes_both_attempts():
    job = JobFactory(max_attempts=3)
    first = claim_one(worker_id="w1")
    started = Job.objects.get(pk=job.pk).started_at
    failed_at = timezone.now()
    outcome = lifecycle.complete_failure(
        first, ValueError("first try"), now=failed_at, definition=definition()
    )
    assert outcome is Outcome.RETRYING
    [row] = JobAttempt.objects.filter(job_id=job.pk)
    assert (row.attempt, row.outcome, row.worker) == (1, "failed", "w1")
    assert (row.started_at, row.finished_at, row.retry_at) == (started, failed_at, failed_at)
    assert row.error == "ValueError: first try"
    assert "ValueError: first try" in row.traceback

    second = claim_one(worker_id="w2")
    done_at = timezone.now()
    assert lifecycle.complete_success(second, now=done_at) is True
    assert attempts_of(job) == [(1, "failed", "w1", failed_at), (2, "succeeded", "w2", None)]
    success = JobAttempt.objects.get(job_id=job.pk, attempt=2)
    assert (success.finished_at, success.error, success.traceback) == (done_at, "", "")
    assert success.started_at == Job.objects.get(pk=job.pk).started_at


def test_a_final_failure_writes_its_attempt_without_a_retry():
    job = JobFactory(max_attempts=1)
    now = timezone.now()
    outcome = lifecycle.complete_failure(
        claim_one(), KeyError("gone"), now=now, definition=definition()
    )
    assert outcome is Outcome.FAILED
    assert attempts_of(job) == [(1, "failed", "w", None)]
    assert JobAttempt.objects.get(job_id=job.pk).error == "KeyError: 'gone'"


def test_a_snooze_writes_its_attempt_with_when_the_job_is_due_again():
    job = JobFactory(max_attempts=2)
    claimed = claim_one(worker_id="snoozer")
    now = timezone.now()
    outcome = lifecycle.complete_snooze(claimed, Snooze(seconds=30), now=now)
    assert outcome is Outcome.SNOOZED
    assert attempts_of(job) == [(1, "snoozed", "snoozer", now + dt.timedelta(seconds=30))]
    job.refresh_from_db()
    assert (job.attempts, job.snoozes, job.worker_id) == (0, 1, "")  # the attempt given back


def test_a_lease_lost_by_a_killed_worker_writes_a_lost_attempt():
    job = JobFactory(max_attempts=2)
    claim_one(worker_id="killed")
    later = timezone.now() + dt.timedelta(minutes=5)
    assert maintenance.recover_expired_leases(later) == 1
    [row] = JobAttempt.objects.filter(job_id=job.pk)
    assert (row.attempt, row.outcome, row.worker, row.retry_at) == (1, "lost", "killed", later)
    assert row.error.startswith("LeaseLost: lease lost: attempt 1 of 2")
    assert row.traceback == ""


def test_the_lost_lease_of_the_last_attempt_writes_a_lost_attempt_and_fails_the_job():
    job = JobFactory(max_attempts=1)
    claim_one(worker_id="killed")
    later = timezone.now() + dt.timedelta(minutes=5)
    assert maintenance.recover_expired_leases(later) == 1
    assert attempts_of(job) == [(1, "lost", "killed", None)]
    assert Job.objects.get(pk=job.pk).status == "failed"


def test_a_lease_lost_after_a_cancel_request_writes_a_lost_attempt_and_cancels():
    job = JobFactory(max_attempts=3)
    claim_one(worker_id="killed")
    jobs.cancel(job.pk, reason="stop", by="ops")
    later = timezone.now() + dt.timedelta(minutes=5)
    assert maintenance.recover_expired_leases(later) == 1
    assert attempts_of(job) == [(1, "lost", "killed", None)]
    assert "cancel requested by ops" in JobAttempt.objects.get(job_id=job.pk).error
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_a_cancel_while_running_writes_a_cancelled_attempt():
    job = JobFactory(max_attempts=3)
    claimed = claim_one(worker_id="w1")
    jobs.cancel(job.pk, reason="no longer needed", by="ops")
    outcome = lifecycle.complete_failure(
        claimed, JobCancelled("stopped"), now=timezone.now(), definition=definition()
    )
    assert outcome is Outcome.CANCELLED
    assert attempts_of(job) == [(1, "cancelled", "w1", None)]
    row = JobAttempt.objects.get(job_id=job.pk)
    assert "cancel requested by ops" in row.error
    assert "no longer needed" in row.error
    assert "JobCancelled: stopped" in row.traceback


def test_an_attempt_whose_lease_was_lost_writes_nothing():
    job = JobFactory(max_attempts=2)
    claimed = claim_one()
    Job.objects.filter(pk=job.pk).update(lock_token="another-claim")
    now = timezone.now()
    assert (
        lifecycle.complete_failure(claimed, RuntimeError("late"), now=now, definition=None)
        is Outcome.DISCARDED
    )
    assert lifecycle.complete_snooze(claimed, Snooze(seconds=5), now=now) is Outcome.DISCARDED
    assert lifecycle.lose_lease(row_of(job) | {"lock_token": "old"}, None, now) is False
    assert attempts_of(job) == []


def test_a_lost_lease_found_twice_writes_one_attempt():
    job = JobFactory(max_attempts=2)
    claim_one()
    row = row_of(job)
    later = timezone.now() + dt.timedelta(minutes=5)
    assert lifecycle.lose_lease(row, None, later) is True
    assert lifecycle.lose_lease(row, None, later) is False  # another reaper, too late
    assert len(attempts_of(job)) == 1


def test_an_error_text_the_database_refuses_is_stored_escaped_in_the_attempt_too():
    job = JobFactory(max_attempts=1)
    lifecycle.complete_failure(
        claim_one(), ValueError("caf\u00e9 \U0001f680 done"), now=timezone.now(), definition=None
    )
    error = JobAttempt.objects.get(job_id=job.pk).error
    assert error == Job.objects.get(pk=job.pk).last_error  # as stored, escaped or not
    assert error.endswith("done")


# --- a first-attempt success: no row, no statement ------------------------------------


def test_a_first_attempt_success_writes_no_attempt_and_one_statement():
    job = JobFactory()
    claimed = claim_one()
    with CaptureQueriesContext(connection) as queries:
        assert lifecycle.complete_success(claimed, now=timezone.now()) is True
    # The UPDATE of the success, as before attempts were kept: nothing else.
    assert [q["sql"].split()[0].upper() for q in queries] == ["UPDATE"]
    assert attempts_of(job) == []


def test_batched_first_attempt_successes_write_no_attempt_and_one_statement():
    jobs_ = JobFactory.create_batch(3, name="testapp.noop", payload={})
    claimed = claim_due(timezone.now(), queues=None, limit=3, worker_id="w")
    recorder = Recorder(timezone.now)
    recorder.MAX_WAIT = 3600.0
    for job in claimed:
        recorder.add(Call(job, registry.get(job.name)))
    with CaptureQueriesContext(connection) as queries:
        recorder.flush()
    assert [q["sql"].split()[0].upper() for q in queries if "SELECT" not in q["sql"][:7]] == [
        "UPDATE"
    ]
    assert JobAttempt.objects.filter(job_id__in=[job.pk for job in jobs_]).count() == 0
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}


def test_a_later_attempts_quick_success_is_not_batched_and_writes_its_attempt():
    job = JobFactory(name="testapp.noop", payload={}, max_attempts=3)
    lifecycle.complete_failure(
        claim_one(), RuntimeError("once"), now=timezone.now(), definition=None
    )
    second = claim_one(worker_id="w2")
    recorder = Recorder(timezone.now)
    recorder.MAX_WAIT = 3600.0
    recorder.add(Call(second, registry.get(second.name)))
    assert recorder.pending == []  # written at once, with its attempt
    assert [outcome for _, outcome, _, _ in attempts_of(job)] == ["failed", "succeeded"]
    assert Job.objects.get(pk=job.pk).status == "succeeded"
