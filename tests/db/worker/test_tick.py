"""jobs.tick() on a real database (SQLite, PostgreSQL or MariaDB): what one tick claims, runs,
records and prunes."""

import datetime as dt
import logging

import pytest
from django.db import OperationalError, connection
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.history import counting
from django_cronqueue.models import FinishedCountMark, Job, NameLock
from django_cronqueue.running import execution
from django_cronqueue.worker.tick import Housekeeping
from tests.db.row_locks import row_held_elsewhere
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def keys():
    return list(SideEffect.objects.order_by("id").values_list("key", flat=True))


def test_tick_runs_due_jobs_in_priority_then_run_at_then_id_order():
    now = timezone.now()
    JobFactory(payload={"key": "late-low"}, run_at=now - dt.timedelta(seconds=1))
    JobFactory(payload={"key": "early-low"}, run_at=now - dt.timedelta(seconds=5))
    JobFactory(payload={"key": "high"}, priority=10, run_at=now)
    JobFactory(payload={"key": "same-time-a"}, run_at=now - dt.timedelta(seconds=3))
    JobFactory(payload={"key": "same-time-b"}, run_at=now - dt.timedelta(seconds=3))
    result = jobs.tick(now=now)
    assert result == jobs.TickResult(claimed=5, ran=5, failed=0)
    assert keys() == ["high", "early-low", "same-time-a", "same-time-b", "late-low"]


def test_tick_leaves_future_jobs_alone():
    now = timezone.now()
    future = JobFactory(payload={"key": "x"}, run_at=now + dt.timedelta(minutes=5))
    assert jobs.tick(now=now).claimed == 0
    assert jobs.tick(now=now + dt.timedelta(minutes=6)).ran == 1
    future.refresh_from_db()
    assert future.status == "succeeded"


def test_rows_of_names_no_code_defines_are_never_claimed():
    for name in ("os.system", "builtins.eval", "shop.removed_job"):
        JobFactory(name=name, payload={"command": "touch /tmp/pwned"})
    assert jobs.tick().claimed == 0
    assert set(Job.objects.values_list("status", flat=True)) == {"pending"}


def test_queues_filter_claims_only_those_queues():
    JobFactory(payload={"key": "emails"}, queue="emails")
    JobFactory(payload={"key": "default"})
    assert jobs.tick(queues=["emails"]).claimed == 1
    assert keys() == ["emails"]


def test_success_records_timestamps_result_and_clears_the_lease():
    job = jobs.enqueue(test_jobs.returns_value, {"value": 21})
    now = timezone.now()
    jobs.tick(now=now)
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert job.attempts == 1
    assert job.result == {"doubled": 42}
    assert job.started_at == now and job.finished_at == now
    assert job.locked_until is None and job.lock_token is None


def test_failures_retry_until_attempts_run_out_then_fail():
    job = jobs.enqueue(test_jobs.always_fails, {"reason": "nope"})  # retries=2, backoff 0
    now = timezone.now()
    for attempt, status in [(1, "pending"), (2, "pending"), (3, "failed")]:
        result = jobs.tick(now=now)
        assert result == jobs.TickResult(claimed=1, ran=0, failed=1)
        job.refresh_from_db()
        assert (job.attempts, job.status) == (attempt, status)
    assert job.last_error == "RuntimeError: nope"
    assert "Traceback" in job.traceback and "RuntimeError: nope" in job.traceback
    assert job.finished_at == now
    assert jobs.tick(now=now).claimed == 0


def test_default_backoff_is_exponential_with_jitter():
    @jobs.job(name="tests.flaky_default_backoff")
    def flaky() -> None:
        raise RuntimeError("x")

    try:
        job = jobs.enqueue(flaky)
        now = timezone.now()
        expected = [1, 2, 4]
        for delay in expected:
            jobs.tick(now=now)
            job.refresh_from_db()
            waited = (job.run_at - now).total_seconds()
            assert delay * 0.8 <= waited <= delay * 1.2
            now = job.run_at
    finally:
        from django_cronqueue.definitions.registry import registry

        registry.unregister("tests.flaky_default_backoff")


def test_on_failed_is_called_once_after_the_final_attempt():
    test_jobs.FAILURES_SEEN.clear()
    job = jobs.enqueue(test_jobs.fails_with_hook)
    jobs.tick()
    assert test_jobs.FAILURES_SEEN == []
    jobs.tick()
    jobs.tick()
    assert [(job.pk, "ValueError")] == test_jobs.FAILURES_SEEN


def test_errors_of_on_failed_are_logged_not_raised(caplog):
    job = jobs.enqueue(test_jobs.fails_with_broken_hook)
    with caplog.at_level(logging.ERROR, logger="django_cronqueue"):
        assert jobs.tick().failed == 1
    job.refresh_from_db()
    assert job.status == "failed"
    assert "on_failed of job testapp.fails_with_broken_hook" in caplog.text


def test_system_exit_in_a_handler_is_a_failure_not_an_exit():
    job = jobs.enqueue(test_jobs.exits)
    assert jobs.tick().failed == 1
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.last_error == "SystemExit: 3"


def test_async_handlers_run_to_completion():
    job = jobs.enqueue(test_jobs.async_record, {"key": "async"})
    assert jobs.tick().ran == 1
    job.refresh_from_db()
    assert job.status == "succeeded" and job.result == "async"
    assert keys() == ["async"]


def test_a_failed_record_gives_back_the_rest_of_the_claimed_batch(monkeypatch, caplog):
    """The outcome of the second job cannot be written: tick() raises, and the jobs it
    claimed but had not started are pending again at once (claim and attempt undone),
    not left running until their leases expire."""
    now = timezone.now()
    first, failing, *rest = [
        JobFactory(payload={"key": f"k{index}"}, run_at=now - dt.timedelta(seconds=10 - index))
        for index in range(4)
    ]
    real_record = execution.record

    def record(outcome, when):
        if outcome.job.id == failing.pk:
            raise OperationalError("server closed the connection unexpectedly")
        return real_record(outcome, when)

    monkeypatch.setattr(execution, "record", record)
    with pytest.raises(OperationalError):
        jobs.tick(now=now)

    assert Job.objects.get(pk=first.pk).status == "succeeded"
    # It ran, but nothing says so: its lease expires and it runs again (at-least-once).
    assert Job.objects.get(pk=failing.pk).status == "running"
    for job in rest:
        job.refresh_from_db()
        assert (job.status, job.attempts, job.lock_token, job.worker_id) == ("pending", 0, None, "")
    assert keys() == ["k0", "k1"]
    assert (
        f"Job testapp.record #{failing.pk}: could not record the outcome; "
        "gave back the 2 job(s) claimed with it"
    ) in caplog.text


def test_concurrency_cap_limits_running_rows_of_a_name():
    for index in range(5):
        jobs.enqueue(test_jobs.capped, {"key": f"c{index}"})
    now = timezone.now()
    first = claim_due(now, queues=None, limit=10, worker_id="w1")
    assert len(first) == 2
    assert claim_due(now, queues=None, limit=10, worker_id="w2") == []
    lifecycle.complete_success(first[0], now=now)
    third = claim_due(now, queues=None, limit=10, worker_id="w2")
    assert len(third) == 1
    assert Job.objects.filter(status="running").count() == 2


def test_a_deleted_name_lock_row_is_recreated_and_the_cap_still_holds():
    for index in range(4):
        jobs.enqueue(test_jobs.capped, {"key": f"c{index}"})
    now = timezone.now()
    claim_due(now, queues=None, limit=1, worker_id="w0")  # the lock row exists now
    NameLock.objects.all().delete()
    assert len(claim_due(now, queues=None, limit=10, worker_id="w1")) == 1
    assert NameLock.objects.filter(name=test_jobs.capped.name).exists()
    assert claim_due(now, queues=None, limit=10, worker_id="w2") == []


def test_a_capped_name_at_its_cap_does_not_starve_other_jobs():
    for index in range(3):
        jobs.enqueue(test_jobs.capped, {"key": f"c{index}"}, priority=100)
    jobs.enqueue(test_jobs.record, {"key": "other"})
    now = timezone.now()
    assert len(claim_due(now, queues=None, limit=2, worker_id="w1")) == 2
    claimed = claim_due(now, queues=None, limit=2, worker_id="w2")
    assert [job.name for job in claimed] == ["testapp.record"]


def test_pruning_runs_hourly():
    now = timezone.now()
    with override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60}):
        jobs.tick(now=now)
        JobFactory(status="succeeded", finished_at=now - dt.timedelta(hours=1))
        jobs.tick(now=now + dt.timedelta(minutes=30))
        assert Job.objects.count() == 1
        jobs.tick(now=now + dt.timedelta(minutes=61))
        assert Job.objects.count() == 0


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no row locks")
def test_a_pass_leaves_its_count_and_prune_to_the_next_while_another_holds_the_counts():
    """Another process counting, pruning or retrying (or frozen with the counts in hand):
    a pass waits for none of it (a wait would fail here after two seconds), and the next
    pass does what it left."""
    now = timezone.now()
    counting.count_finished(now - dt.timedelta(hours=4))  # the counts' mark row exists
    old = JobFactory(status="succeeded", finished_at=now - dt.timedelta(hours=3))
    housekeeping = Housekeeping()
    with override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600}):
        with row_held_elsewhere(FinishedCountMark.ONLY, model=FinishedCountMark):
            housekeeping.run(now)
        assert Job.objects.filter(pk=old.pk).exists()
        assert FinishedCountMark.objects.get().counted_until < old.finished_at
        housekeeping.run(now + dt.timedelta(seconds=1))
    assert not Job.objects.filter(pk=old.pk).exists()
    assert FinishedCountMark.objects.get().counted_until > old.finished_at


def test_tick_needs_an_aware_now():
    with pytest.raises(ValueError, match="aware"):
        jobs.tick(now=dt.datetime(2026, 1, 1))


def test_status_strings_are_the_documented_ones():
    assert [choice for choice, _ in Job.Status.choices] == [
        "pending",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ]


def test_a_signal_receiver_that_raises_does_not_break_the_tick(caplog):
    from django_cronqueue import signals

    def broken(**kwargs):
        raise RuntimeError("receiver bug")

    signals.job_started.connect(broken)
    signals.job_succeeded.connect(broken)
    try:
        job = jobs.enqueue(test_jobs.record, {"key": "k"})
        with caplog.at_level(logging.ERROR, logger="django_cronqueue"):
            assert jobs.tick().ran == 1
    finally:
        signals.job_started.disconnect(broken)
        signals.job_succeeded.disconnect(broken)
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert "receiver bug" in caplog.text


def test_while_a_transaction_is_held_expired_leases_are_looked_for_every_ten_seconds():
    """Held: each scan for expired leases walks the entries of every row that ran since
    the transaction began, so the housekeeping makes it every 10 s, not every poll."""
    now = timezone.now()
    housekeeping = Housekeeping()
    lapsed = {"status": "running", "lock_token": "t", "attempts": 1}

    def expire_one():
        return JobFactory(**lapsed, locked_until=now - dt.timedelta(seconds=1))

    first = expire_one()
    housekeeping.run(now, materialize=False, held=True)
    assert Job.objects.get(pk=first.pk).status == "pending"
    second = expire_one()
    housekeeping.run(now + dt.timedelta(seconds=9), materialize=False, held=True)
    assert Job.objects.get(pk=second.pk).status == "running"
    housekeeping.run(now + dt.timedelta(seconds=10), materialize=False, held=True)
    assert Job.objects.get(pk=second.pk).status == "pending"
    third = expire_one()
    housekeeping.run(now + dt.timedelta(seconds=11), materialize=False)  # no longer held
    assert Job.objects.get(pk=third.pk).status == "pending"


def test_a_tick_fails_a_run_that_returned_past_its_timeout():
    """The handler sleeps 1.5 s past its 1 s timeout and returns: its run fails with
    TimeLimitExceeded (the success came too late), and the job is retried by its policy,
    as a runjobs worker does."""
    job = jobs.enqueue(test_jobs.hangs, {"key": "late", "seconds": 1.5})
    now = timezone.now()
    assert jobs.tick(now=now) == jobs.TickResult(claimed=1, ran=0, failed=1)
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 1)
    assert job.last_error.startswith(
        f"TimeLimitExceeded: Job testapp.hangs #{job.pk} ran past its timeout of 1s "
        "(it returned after 1."
    ), job.last_error
    assert keys() == ["late"]  # it ran to its end: a thread cannot be stopped
