"""django_cronqueue.lifecycle: every status transition, its guard, and its False cases."""

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs, lifecycle, signals
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import JobDefinition
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.lifecycle import Outcome
from django_cronqueue.models import Job
from tests.factories import JobFactory
from tests.refusals import refusing
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def claim_one(now=None, worker_id="w"):
    [claimed] = claim_due(now or timezone.now(), queues=None, limit=1, worker_id=worker_id)
    return claimed


def definition(backoff=lambda attempt: 0, on_failed=None):
    """A definition to hand to the transitions, not registered anywhere."""

    def handler(key: str) -> None:
        return None

    return JobDefinition(name="testapp.record", func=handler, backoff=backoff, on_failed=on_failed)


def row_of(job):
    """The columns maintenance.recover_expired_leases reads for lose_lease."""
    return Job.objects.filter(pk=job.pk).values(
        "id", "name", "lock_token", "attempts", "max_attempts", "started_at", "worker_id"
    )[0]


# --- Outcome ------------------------------------------------------------------------


def test_outcomes_are_the_strings_logs_and_results_show():
    assert [outcome.value for outcome in Outcome] == [
        "succeeded",
        "retrying",
        "failed",
        "discarded",
        "released",
        "cancelled",
        "snoozed",
    ]
    assert Outcome.RETRYING == "retrying"
    assert str(Outcome.DISCARDED) == "discarded"
    assert f"{Outcome.FAILED}" == "failed"


# --- complete_success ---------------------------------------------------------------


def test_complete_success_finishes_the_row_and_frees_its_dedupe_key():
    job = JobFactory(dedupe_key="d", active_dedupe_key="d")
    claimed = claim_one()
    now = timezone.now()
    assert lifecycle.complete_success(claimed, now=now, result={"ok": 1}) is True
    job.refresh_from_db()
    assert (job.status, job.finished_at, job.result) == ("succeeded", now, {"ok": 1})
    assert (job.locked_until, job.lock_token, job.active_dedupe_key) == (None, None, None)
    assert job.dedupe_key == "d"


def test_completion_is_guarded_by_the_lease_token():
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    now = timezone.now()
    [first_claim] = claim_due(now, queues=None, limit=1, worker_id="w1")
    # The lease expires and another worker claims the job again.
    later = now + dt.timedelta(minutes=5)
    maintenance.recover_expired_leases(later)
    [second_claim] = claim_due(later, queues=None, limit=1, worker_id="w2")
    assert second_claim.attempts == 2
    assert lifecycle.complete_success(first_claim, now=later) is False
    assert (
        lifecycle.complete_failure(first_claim, RuntimeError("late"), now=later, definition=None)
        == "discarded"
    )
    job.refresh_from_db()
    assert (job.status, job.worker_id) == ("running", "w2")
    assert lifecycle.complete_success(second_claim, now=later) is True
    job.refresh_from_db()
    assert job.status == "succeeded"


# --- complete_failure ---------------------------------------------------------------


def test_a_failure_with_attempts_left_is_retried_after_the_backoff():
    job = JobFactory(max_attempts=3)
    claimed = claim_one()
    retrying = []

    def receiver(sender, **kwargs):
        retrying.append((sender, kwargs["run_at"], type(kwargs["exc"]).__name__))

    now = timezone.now()
    signals.job_retrying.connect(receiver)
    try:
        outcome = lifecycle.complete_failure(
            claimed,
            ValueError("bad input"),
            now=now,
            definition=definition(backoff=lambda attempt: 7 * attempt),
        )
    finally:
        signals.job_retrying.disconnect(receiver)
    assert outcome is Outcome.RETRYING
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 1)
    assert job.run_at == now + dt.timedelta(seconds=7)
    assert (job.locked_until, job.lock_token, job.finished_at) == (None, None, None)
    assert job.last_error == "ValueError: bad input"
    assert "ValueError: bad input" in job.traceback
    assert retrying == [("testapp.record", job.run_at, "ValueError")]


def test_a_failure_keeps_its_dedupe_key_while_retrying():
    job = JobFactory(dedupe_key="d", active_dedupe_key="d")
    lifecycle.complete_failure(claim_one(), RuntimeError("x"), now=timezone.now(), definition=None)
    job.refresh_from_db()
    assert (job.status, job.active_dedupe_key) == ("pending", "d")


def test_a_backoff_that_raises_retries_at_once():
    JobFactory()
    claimed = claim_one()
    now = timezone.now()

    def broken(attempt):
        raise ZeroDivisionError

    outcome = lifecycle.complete_failure(
        claimed, RuntimeError("x"), now=now, definition=definition(backoff=broken)
    )
    assert outcome is Outcome.RETRYING
    assert Job.objects.get().run_at == now


def test_a_negative_backoff_retries_at_once():
    JobFactory()
    now = timezone.now()
    lifecycle.complete_failure(
        claim_one(), RuntimeError("x"), now=now, definition=definition(backoff=lambda a: -60)
    )
    assert Job.objects.get().run_at == now


def test_the_failure_of_the_last_attempt_fails_the_row_and_calls_on_failed():
    seen = []
    job = JobFactory(max_attempts=1, dedupe_key="d", active_dedupe_key="d")
    claimed = claim_one()
    now = timezone.now()
    outcome = lifecycle.complete_failure(
        claimed,
        KeyError("gone"),
        now=now,
        definition=definition(on_failed=lambda row, exc: seen.append((row.pk, row.status, exc))),
    )
    assert outcome is Outcome.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.finished_at) == ("failed", 1, now)
    assert (job.active_dedupe_key, job.lock_token, job.locked_until) == (None, None, None)
    assert job.last_error == "KeyError: 'gone'"
    assert len(seen) == 1
    assert seen[0][:2] == (job.pk, "failed")
    assert isinstance(seen[0][2], KeyError)


def test_a_failure_whose_lease_was_lost_is_discarded():
    job = JobFactory(max_attempts=1)
    claimed = claim_one()
    Job.objects.filter(pk=job.pk).update(lock_token="another-claim")
    seen = []
    outcome = lifecycle.complete_failure(
        claimed,
        RuntimeError("late"),
        now=timezone.now(),
        definition=definition(on_failed=lambda row, exc: seen.append(row)),
    )
    assert outcome is Outcome.DISCARDED
    job.refresh_from_db()
    assert (job.status, job.last_error) == ("running", "")
    assert seen == []


# --- what a failure records --------------------------------------------------------


class Declined(Exception):
    """Not a builtin: its class path is this module's."""


# Error text that names other classes, one of them in a module no code imports.
TEXT_NAMING_CLASSES = "bad input\nos.path.ValueError: x\ntests.testapp.never_imported.Boom: y"


@pytest.mark.parametrize(
    ("exc", "path"),
    [
        (ValueError(TEXT_NAMING_CLASSES), "builtins.ValueError"),
        (Declined(TEXT_NAMING_CLASSES), f"{__name__}.Declined"),
    ],
)
@pytest.mark.parametrize(("max_attempts", "status"), [(2, "pending"), (1, "failed")])
def test_a_failure_records_the_class_raised_not_one_its_text_names(exc, path, max_attempts, status):
    job = JobFactory(max_attempts=max_attempts)
    lifecycle.complete_failure(claim_one(), exc, now=timezone.now(), definition=definition())
    job.refresh_from_db()
    assert (job.status, job.exception_class_path) == (status, path)
    assert job.last_error.endswith("tests.testapp.never_imported.Boom: y")


def test_a_lost_lease_records_lease_lost_without_an_earlier_attempts_traceback():
    job = JobFactory(max_attempts=2)
    lifecycle.complete_failure(
        claim_one(), ValueError("first"), now=timezone.now(), definition=definition()
    )
    claim_one(worker_id="crashed")
    now = timezone.now() + dt.timedelta(minutes=5)
    assert lifecycle.lose_lease(row_of(job), definition(), now) is True
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.exception_class_path == "django_cronqueue.exceptions.LeaseLost"
    assert job.last_error.startswith("LeaseLost: lease lost: attempt 2 of 2")
    assert job.traceback == ""  # not the ValueError of attempt 1


@pytest.fixture
def utf8mb3_last_error():
    """Job.last_error in utf8mb3, as in a database that migration 0004 could not convert;
    restored afterwards. Only MySQL and MariaDB have character sets per column."""
    if connection.vendor != "mysql":
        pytest.skip("character sets per column are MySQL's and MariaDB's")
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s AND column_name = 'last_error'",
            [Job._meta.db_table],
        )
        column_type, collation = cursor.fetchone()
        cursor.execute(
            f"ALTER TABLE {table} MODIFY last_error {column_type} CHARACTER SET utf8mb3 NOT NULL"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE {table} MODIFY last_error {column_type} "
                f"CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
            )


@pytest.mark.parametrize(
    ("job_function", "payload", "status", "raised"),
    [
        (test_jobs.fails_with_value_error, {"message": "échec 🚀"}, "failed", "ValueError"),
        (test_jobs.always_fails, {"reason": "échec 🚀"}, "pending", "RuntimeError"),
    ],
)
def test_a_failure_the_database_cannot_store_is_stored_escaped(
    utf8mb3_last_error, job_function, payload, status, raised, caplog
):
    job = jobs.enqueue(job_function, payload)
    assert jobs.tick().failed == 1
    job.refresh_from_db()
    error = f"{raised}: \\xe9chec \\U0001f680"
    assert (job.status, job.last_error, job.lock_token) == (status, error, None)
    assert job.traceback.endswith(f"{error}\n")
    assert job.exception_class_path == f"builtins.{raised}"
    assert "cannot store a character of its error" in caplog.text


def test_a_final_failure_fails_the_row_with_attempts_left():
    seen = []
    job = JobFactory(max_attempts=4, dedupe_key="d", active_dedupe_key="d")
    outcome = lifecycle.complete_failure(
        claim_one(),
        TypeError("cannot be stored"),
        now=timezone.now(),
        definition=definition(on_failed=lambda row, exc: seen.append(exc)),
        final=True,
    )
    assert outcome is Outcome.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts, job.active_dedupe_key) == ("failed", 1, None)
    assert job.last_error == "TypeError: cannot be stored"
    assert [type(exc) for exc in seen] == [TypeError]


@pytest.mark.parametrize("attempts_left", [True, False], ids=["retrying", "failed"])
def test_an_error_text_the_database_refuses_is_recorded_escaped(attempts_left, caplog):
    """The failure is still recorded, once: not an outage to retry, not a lost run."""
    job = JobFactory(max_attempts=2 if attempts_left else 1)
    claimed = claim_one()
    with refusing("last_error", "⛔"):
        outcome = lifecycle.complete_failure(
            claimed, ValueError("input ⛔"), now=timezone.now(), definition=definition()
        )
    assert outcome is (Outcome.RETRYING if attempts_left else Outcome.FAILED)
    job.refresh_from_db()
    assert job.status == ("pending" if attempts_left else "failed")
    assert job.lock_token is None
    assert job.last_error == "ValueError: input \\u26d4"
    assert job.traceback.isascii() and job.traceback.endswith("ValueError: input \\u26d4\n")
    assert job.exception_class_path == "builtins.ValueError"
    assert f"Job testapp.record #{job.pk}: the database refused the text of its error" in (
        caplog.text
    )


# --- release_unstarted --------------------------------------------------------------


def test_release_unstarted_undoes_the_claim():
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    claimed = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert lifecycle.release_unstarted(claimed) == 1
    job.refresh_from_db()
    assert (job.status, job.attempts, job.lock_token, job.worker_id) == ("pending", 0, None, "")
    assert job.started_at is None


def test_release_unstarted_leaves_a_row_claimed_again_since():
    job = JobFactory()
    claimed = claim_one()
    Job.objects.filter(pk=job.pk).update(lock_token="another-claim")
    assert lifecycle.release_unstarted([claimed]) == 0
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("running", 1)


# --- renew_leases -------------------------------------------------------------------


def test_renewal_extends_the_leases_of_these_claims_only():
    renewed, other = JobFactory(), JobFactory()
    [mine] = [
        job
        for job in claim_due(timezone.now(), queues=None, limit=2, worker_id="w")
        if job.id == renewed.pk
    ]
    until = timezone.now() + dt.timedelta(hours=1)
    assert lifecycle.renew_leases([mine], until=until) == 1
    assert Job.objects.get(pk=renewed.pk).locked_until == until
    assert Job.objects.get(pk=other.pk).locked_until < until


def test_a_claim_whose_job_was_taken_over_cannot_renew_the_new_holders_lease():
    """The renewal is keyed on the lease token, not the worker id: here the retry is
    claimed under the same worker id (as every jobs.tick() of one process does), and
    the old claim must still not extend the new one's lease."""
    job = JobFactory()
    now = timezone.now()
    old = claim_one(now, worker_id="tick:web-1:4242")
    assert lifecycle.lose_lease(row_of(job), None, now)
    new = claim_one(now, worker_id="tick:web-1:4242")
    assert new.token != old.token
    held_until = Job.objects.get(pk=job.pk).locked_until

    assert lifecycle.renew_leases([old], until=now + dt.timedelta(hours=1)) == 0
    assert Job.objects.get(pk=job.pk).locked_until == held_until
    assert lifecycle.renew_leases([new], until=now + dt.timedelta(hours=1)) == 1


# --- lose_lease ---------------------------------------------------------------------


def test_lose_lease_with_attempts_left_makes_the_row_due_at_once():
    job = JobFactory(max_attempts=2)
    claim_one(worker_id="crashed")
    now = timezone.now() + dt.timedelta(seconds=40)  # past the lease, within the timeout
    assert lifecycle.lose_lease(row_of(job), definition(), now) is True
    job.refresh_from_db()
    assert (job.status, job.run_at, job.attempts) == ("pending", now, 1)
    assert (job.lock_token, job.locked_until, job.finished_at) == (None, None, None)
    assert job.last_error.startswith("LeaseLost: lease lost: attempt 1 of 2")
    assert "crashed" in job.last_error


def test_lose_lease_of_the_last_attempt_fails_the_row_and_calls_on_failed():
    seen = []
    job = JobFactory(max_attempts=1, dedupe_key="d", active_dedupe_key="d")
    claim_one()
    now = timezone.now() + dt.timedelta(minutes=5)
    hook = definition(on_failed=lambda row, exc: seen.append(type(exc).__name__))
    assert lifecycle.lose_lease(row_of(job), hook, now) is True
    job.refresh_from_db()
    assert (job.status, job.finished_at, job.active_dedupe_key) == ("failed", now, None)
    assert "lease lost" in job.last_error
    assert seen == ["LeaseLost"]


def test_lose_lease_of_a_row_that_moved_on_does_nothing():
    job = JobFactory(max_attempts=1)
    claim_one()
    row = row_of(job)
    Job.objects.filter(pk=job.pk).update(lock_token="another-claim")
    seen = []
    hook = definition(on_failed=lambda r, exc: seen.append(exc))
    assert lifecycle.lose_lease(row, hook, timezone.now()) is False
    job.refresh_from_db()
    assert (job.status, job.last_error) == ("running", "")
    assert seen == []


# --- retry --------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_retry_makes_a_failed_or_cancelled_job_pending_again_from_scratch(status):
    past = timezone.now() - dt.timedelta(hours=1)
    job = JobFactory(
        status=status,
        attempts=4,
        run_at=past,
        started_at=past,
        finished_at=past,
        worker_id="w",
        dedupe_key="d",
        active_dedupe_key=None,
        last_error="boom",
    )
    now = timezone.now()
    assert lifecycle.retry(job, now=now) is True
    assert (job.status, job.attempts, job.run_at) == ("pending", 0, now)  # the instance too
    job.refresh_from_db()
    assert (job.status, job.attempts, job.run_at) == ("pending", 0, now)
    assert (job.started_at, job.finished_at, job.worker_id) == (None, None, "")
    assert job.active_dedupe_key == "d"
    assert job.last_error == "boom"  # the last error stays visible


@pytest.mark.parametrize("status", ["pending", "running", "succeeded"])
def test_retry_of_a_job_that_is_not_failed_or_cancelled_is_refused(status):
    job = JobFactory(status=status, attempts=1)
    before = Job.objects.filter(pk=job.pk).values().get()
    assert lifecycle.retry(job, now=timezone.now() + dt.timedelta(days=1)) is False
    assert job.status == status
    assert Job.objects.filter(pk=job.pk).values().get() == before


def test_retry_of_a_job_whose_dedupe_key_is_taken_again_is_refused():
    first = jobs.enqueue(test_jobs.record, {"key": "a"}, dedupe_key="same")
    first.cancel()
    second = jobs.enqueue(test_jobs.record, {"key": "b"}, dedupe_key="same")
    assert second.pk != first.pk
    assert first.retry() is False
    first.refresh_from_db()
    assert first.status == "cancelled"


# --- cancel -------------------------------------------------------------------------


def test_cancel_of_a_pending_job_records_why_and_frees_its_dedupe_key():
    job = JobFactory(dedupe_key="d", active_dedupe_key="d")
    now = timezone.now()
    assert lifecycle.cancel(job, reason="customer left\x00", now=now) is True
    assert job.status == "cancelled"
    job.refresh_from_db()
    assert (job.status, job.finished_at, job.active_dedupe_key) == ("cancelled", now, None)
    assert job.last_error == "customer left\\x00"
    assert test_jobs.record.using(dedupe_key="d").enqueue(key="again").pk != job.pk


def test_cancel_without_a_reason_says_cancelled():
    job = JobFactory()
    assert lifecycle.cancel(job) is True
    job.refresh_from_db()
    assert job.last_error == "cancelled"


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_cancel_of_a_finished_job_changes_nothing(status):
    job = JobFactory(status=status, last_error="")
    assert lifecycle.cancel(job, reason="too late") is False
    assert job.status == status
    job.refresh_from_db()
    assert (job.status, job.last_error) == (status, "")


# --- run_now ------------------------------------------------------------------------


def test_run_now_makes_a_pending_job_due_at_once():
    job = JobFactory(run_at=timezone.now() + dt.timedelta(days=1))
    now = timezone.now()
    assert lifecycle.run_now(job, now=now) is True
    assert job.run_at == now
    job.refresh_from_db()
    assert (job.status, job.run_at) == ("pending", now)


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "cancelled"])
def test_run_now_of_a_job_that_is_not_pending_is_refused(status):
    later = timezone.now() + dt.timedelta(days=1)
    job = JobFactory(status=status, run_at=later)
    assert lifecycle.run_now(job) is False
    job.refresh_from_db()
    assert job.run_at == later
