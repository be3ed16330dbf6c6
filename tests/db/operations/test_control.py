"""Control of running work (SPEC section 8), on every database: jobs.current(), cancel
of pending, running and finished jobs, Snooze, progress, and pauses in the claim."""

import asyncio
import datetime as dt
import os
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs, lifecycle, signals
from django_cronqueue.claiming import claim_due
from django_cronqueue.housekeeping.maintenance import recover_expired_leases
from django_cronqueue.lifecycle import Outcome
from django_cronqueue.models import Job, Pause
from django_cronqueue.operations.pauses import active_pauses, delete_ended_pauses
from django_cronqueue.running import execution
from django_cronqueue.running.context import JobContext
from django_cronqueue.running.execution import new_context
from django_cronqueue.worker import Worker as RunjobsWorker
from django_cronqueue.worker.held_jobs import HeldJob
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _forget_what_handlers_saw():
    test_jobs.CONTEXTS_SEEN.clear()
    test_jobs.FAILURES_SEEN.clear()
    yield
    test_jobs.CONTEXTS_SEEN.clear()
    test_jobs.FAILURES_SEEN.clear()


def claim_one(job: Job):
    [claimed] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert claimed.id == job.pk
    return claimed


# --- jobs.current() --------------------------------------------------------------------


def test_current_is_none_outside_a_handler():
    assert jobs.current() is None


@pytest.mark.parametrize("handler", [test_jobs.reports_context, test_jobs.async_reports_context])
def test_a_handler_sees_its_own_context_under_tick(handler):
    job = handler.enqueue(key="k1")
    assert jobs.tick().ran == 1
    [context] = test_jobs.CONTEXTS_SEEN
    assert isinstance(context, JobContext)
    assert (context.job_id, context.name, context.attempt) == (job.pk, handler.name, 1)
    assert (context.payload, context.scheduled_for) == ({"key": "k1"}, None)
    assert context.cancel_requested is False
    assert jobs.current() is None  # reset after the handler


def test_two_threads_running_handlers_each_see_their_own_job():
    first, second = (JobFactory(name="testapp.reports_context") for _ in range(2))
    claimed = claim_due(timezone.now(), queues=None, limit=2, worker_id="w")
    threads = [threading.Thread(target=execution.call, args=(job,)) for job in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(c.job_id for c in test_jobs.CONTEXTS_SEEN) == sorted([first.pk, second.pk])


# --- cancel ----------------------------------------------------------------------------


def test_cancel_of_a_pending_job_by_id_cancels_it_at_once():
    job = JobFactory()
    result = jobs.cancel(job.pk, reason="not needed")
    assert (bool(result), result.outcome) == (True, "cancelled")
    job.refresh_from_db()
    assert (job.status, job.last_error, job.active_dedupe_key) == ("cancelled", "not needed", None)


def test_cancel_of_a_running_job_requests_it_and_says_so():
    job = JobFactory()
    claim_one(job)
    now = timezone.now()
    result = jobs.cancel(job, reason="customer left", by="alice")
    assert (bool(result), result.outcome) == (True, "requested")
    assert "asked to stop" in result.message
    job.refresh_from_db()
    assert job.status == "running"
    assert job.cancel_requested_at >= now - dt.timedelta(seconds=1)
    assert (job.cancel_requested_by, job.cancel_reason) == ("alice", "customer left")
    again = jobs.cancel(job)
    assert (again.outcome, "already requested" in again.message) == ("requested", True)


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_cancel_of_a_finished_job_changes_nothing_and_says_so(status):
    job = JobFactory(status=status, last_error="")
    result = jobs.cancel(job, reason="too late")
    assert (bool(result), result.outcome) == (False, "finished")
    assert f"has already ended ({status})" in result.message
    job.refresh_from_db()
    assert (job.status, job.last_error, job.cancel_requested_at) == (status, "", None)


def test_cancel_of_an_unknown_id_raises_does_not_exist():
    with pytest.raises(Job.DoesNotExist):
        jobs.cancel(987654)


def test_a_handler_that_raises_after_a_cancel_request_ends_cancelled_without_retry():
    job = test_jobs.cancels_itself.enqueue(reason="enough")
    result = jobs.tick()
    assert (result.claimed, result.failed) == (1, 1)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.locked_until, job.lock_token) == (
        "cancelled",
        1,
        None,
        None,
    )
    assert job.last_error.startswith("cancelled while running: cancel requested by tests at ")
    assert job.last_error.endswith(": enough")
    assert "JobCancelled" in job.traceback
    assert test_jobs.FAILURES_SEEN == []  # on_failed is not called


def test_a_handler_that_returns_after_a_cancel_request_ends_succeeded():
    job = JobFactory(name="testapp.noop", payload={})
    claimed = claim_one(job)
    context = new_context(claimed)  # a worker's: told of the request by its heartbeat
    jobs.cancel(job, reason="too late")  # while it runs, after the heartbeat's last look
    outcome = execution.call(claimed, context)
    assert execution.record(outcome, timezone.now()) is Outcome.SUCCEEDED
    job.refresh_from_db()
    assert job.status == "succeeded"


def test_any_exception_after_a_cancel_request_ends_cancelled_and_signals_it():
    received = []

    def receiver(sender, job, requested_by, reason, **kwargs):
        received.append((sender, job.pk, requested_by, reason))

    job = JobFactory(name="testapp.always_fails", payload={})
    claimed = claim_one(job)
    jobs.cancel(job, reason="stop", by="bob")
    signals.job_cancelled.connect(receiver)
    try:
        outcome = execution.call(claimed, new_context(claimed))
        assert isinstance(outcome.error, RuntimeError)
        assert execution.record(outcome, timezone.now()) is Outcome.CANCELLED
    finally:
        signals.job_cancelled.disconnect(receiver)
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("cancelled", 1)
    assert received == [("testapp.always_fails", job.pk, "bob", "stop")]


def test_a_job_cancelled_after_its_claim_but_before_it_started_is_not_run():
    job = JobFactory(name="testapp.reports_context", payload={"key": "k"})
    claimed = claim_one(job)
    jobs.cancel(job)
    outcome = execution.call(claimed)
    assert test_jobs.CONTEXTS_SEEN == []
    assert execution.record(outcome, timezone.now()) is Outcome.CANCELLED
    job.refresh_from_db()
    assert job.status == "cancelled"


def test_a_claimed_job_given_back_after_a_cancel_request_ends_cancelled():
    job = JobFactory()
    claimed = claim_one(job)
    jobs.cancel(job, by="carol")
    assert lifecycle.release_unstarted([claimed]) == 0
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert job.last_error.startswith("cancelled before it started: cancel requested by carol")


def test_a_lost_lease_after_a_cancel_request_ends_cancelled_not_retried():
    job = JobFactory()
    claim_one(job)
    jobs.cancel(job, reason="stuck")
    later = timezone.now() + dt.timedelta(hours=1)
    assert recover_expired_leases(later) == 1
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert job.last_error.endswith("stuck (its lease was lost)")


def test_a_retry_of_a_job_cancelled_while_running_starts_with_no_cancel_request():
    job = JobFactory(name="testapp.always_fails", payload={})
    claimed = claim_one(job)
    jobs.cancel(job)
    execution.record(execution.call(claimed), timezone.now())
    job.refresh_from_db()
    assert job.retry()
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at, job.cancel_requested_by) == ("pending", None, "")


def test_an_async_handler_is_cancelled_on_its_event_loop():
    """The request cancels the handler's task: CancelledError inside it, and the row
    ends cancelled. A thread plays the worker's heartbeat."""
    started = threading.Event()
    seen = []

    async def handler(key: str) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("CancelledError")
            raise

    definition = test_jobs.async_reports_context
    job = JobFactory(name=definition.name, payload={"key": "k"})
    claimed = claim_one(job)
    context = new_context(claimed)
    original = definition.func
    definition.func = handler
    try:
        threading.Thread(target=lambda: started.wait(10) and context.request_cancel()).start()
        jobs.cancel(job)
        outcome = execution.call(claimed, context)
    finally:
        definition.func = original
    assert seen == ["CancelledError"]
    assert isinstance(outcome.error, jobs.JobCancelled)
    assert execution.record(outcome, timezone.now()) is Outcome.CANCELLED


def test_the_heartbeat_tells_held_jobs_of_their_cancel_request():
    job = JobFactory()
    claimed = claim_one(job)
    worker = RunjobsWorker()
    context = new_context(claimed)
    worker._held[claimed.id] = HeldJob(claimed, context, started=True)
    worker._beat()
    assert context.cancel_requested is False
    jobs.cancel(job)
    worker._beat()
    assert context.cancel_requested is True


# --- Snooze ----------------------------------------------------------------------------


def test_snooze_puts_the_job_back_later_and_gives_its_attempt_back():
    received = []

    def receiver(sender, job, run_at, **kwargs):
        received.append((sender, job.id, run_at))

    job = test_jobs.snoozes.enqueue(seconds=30)
    now = timezone.now()
    signals.job_snoozed.connect(receiver)
    try:
        jobs.tick(now=now)
    finally:
        signals.job_snoozed.disconnect(receiver)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.snoozes) == ("pending", 0, 1)
    assert job.run_at == now + dt.timedelta(seconds=30)
    assert (job.locked_until, job.lock_token, job.worker_id) == (None, None, "")
    assert received == [("testapp.snoozes", job.pk, now + dt.timedelta(seconds=30))]
    assert jobs.tick(now=now + dt.timedelta(seconds=29)).claimed == 0
    jobs.tick(now=now + dt.timedelta(seconds=30))
    job.refresh_from_db()
    assert (job.attempts, job.snoozes) == (0, 2)  # never runs out of attempts


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, TypeError),
        ({"seconds": 1, "delta": dt.timedelta(seconds=1)}, TypeError),
        ({"seconds": "30"}, TypeError),
        ({"seconds": -1}, ValueError),
        ({"seconds": float("nan")}, ValueError),
        ({"delta": 30}, TypeError),
    ],
)
def test_snooze_refuses_a_delay_it_cannot_use(kwargs, error):
    with pytest.raises(error):
        jobs.Snooze(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seconds": 1e13},
        {"seconds": 1e300},
        {"seconds": 36_501 * 86_400},
        {"delta": dt.timedelta(days=10**8)},
        {"delta": dt.timedelta(days=36_500, seconds=1)},
    ],
)
def test_a_snooze_past_the_calendar_is_refused_naming_the_limit(kwargs):
    with pytest.raises(ValueError, match="at most 36500 days"):
        jobs.Snooze(**kwargs)
    assert jobs.Snooze(delta=dt.timedelta(days=36_500)).delay.days == 36_500


def test_a_handler_snoozing_past_the_calendar_fails_and_never_stays_running():
    job = test_jobs.snoozes.enqueue(seconds=1e13)
    jobs.tick()
    job.refresh_from_db()
    assert (job.status, job.snoozes) == ("pending", 0)  # a failure, retried by its policy
    assert "at most 36500 days" in job.last_error
    assert job.locked_until is None


def test_snooze_takes_a_timedelta():
    assert jobs.Snooze(delta=dt.timedelta(minutes=5)).delay == dt.timedelta(minutes=5)


# --- progress --------------------------------------------------------------------------


def test_progress_is_written_at_completion():
    job = test_jobs.reports_progress.enqueue(steps=500)
    jobs.tick()
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert {k: job.progress[k] for k in ("done", "total", "message")} == {
        "done": 500,
        "total": 500,
        "message": "step 500",
    }
    assert dt.datetime.fromisoformat(job.progress["at"]) <= timezone.now()


def test_a_progress_message_with_a_lone_surrogate_never_fails_the_outcome_write():
    """A non-UTF-8 file name from os.listdir() in the message: the handler runs once and
    succeeds, the message stored escaped (no database driver can send a lone surrogate)."""
    job = test_jobs.reports_a_file_name.enqueue(raw_name="report-\xff.csv")
    assert jobs.tick().ran == 1
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == ("succeeded", 1, "done")
    assert job.progress["message"] == "read report-\\udcff.csv"
    assert SideEffect.objects.filter(key="report-\xff.csv").count() == 1


def test_the_heartbeat_writes_a_progress_message_with_a_lone_surrogate():
    job = JobFactory()
    claimed = claim_one(job)
    worker = RunjobsWorker()
    context = new_context(claimed)
    worker._held[claimed.id] = HeldJob(claimed, context, started=True)
    context.set_progress(1, message=os.fsdecode(b"\xfe\xff"))
    worker._beat()
    job.refresh_from_db()
    assert job.progress["message"] == "\\udcfe\\udcff"


def test_the_heartbeat_writes_progress_once_per_beat_however_often_it_was_set():
    job = JobFactory()
    claimed = claim_one(job)
    worker = RunjobsWorker()
    context = new_context(claimed)
    worker._held[claimed.id] = HeldJob(claimed, context, started=True)
    for step in range(1000):
        context.set_progress(step + 1, total=1000)
    with CaptureQueriesContext(connection) as queries:
        worker._beat()
        worker._beat()  # nothing new: no write
    writes = [
        q for q in queries.captured_queries if '"progress"' in q["sql"] or "`progress`" in q["sql"]
    ]
    assert len(writes) == 1
    job.refresh_from_db()
    assert (job.progress["done"], job.progress["total"]) == (1000, 1000)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("1",), TypeError),
        ((float("inf"),), ValueError),
        ((1, True), TypeError),
        ((1, 2, 3), TypeError),
    ],
)
def test_set_progress_refuses_what_is_not_a_number(args, error):
    context = JobContext(job_id=1, name="n", attempt=1, scheduled_for=None, payload={})
    with pytest.raises(error):
        context.set_progress(*args)


# --- pauses ----------------------------------------------------------------------------


def due_ids():
    return {job.id for job in claim_due(timezone.now(), queues=None, limit=100, worker_id="w")}


def test_a_paused_queue_is_not_claimed_and_others_are():
    paused = JobFactory(queue="emails")
    other = JobFactory(queue="default")
    jobs.pause(queue="emails", reason="SMTP down", by="ops")
    with CaptureQueriesContext(connection) as queries:
        assert due_ids() == {other.pk}
    assert not [q for q in queries.captured_queries if "emails" in q["sql"]]
    paused.refresh_from_db()
    assert (paused.status, paused.attempts) == ("pending", 0)  # never claimed
    assert jobs.resume(queue="emails") is True
    assert due_ids() == {paused.pk}


def test_a_paused_name_is_not_claimed_in_any_queue():
    paused = JobFactory(name="testapp.noop", payload={}, queue="q1")
    other = JobFactory(queue="q1")
    jobs.pause(name=test_jobs.noop)  # a handle works as well as a name
    assert due_ids() == {other.pk}
    assert jobs.resume(name="testapp.noop") is True
    assert jobs.resume(name="testapp.noop") is False
    assert due_ids() == {paused.pk}


def test_queues_and_names_that_differ_in_case_or_trailing_spaces_are_not_paused():
    """Exact on MySQL and MariaDB too: a pause of "Emails" holds back that queue only."""
    held = JobFactory(queue="Emails")
    others = {JobFactory(queue=queue).pk for queue in ("emails", "Emails ", "EMAILS")}
    jobs.pause(queue="Emails")
    assert due_ids() == others
    Job.objects.filter(pk__in=others).delete()
    jobs.resume(queue="Emails")
    held_name = JobFactory(name="testapp.noop", payload={})
    jobs.pause(name="Testapp.noop ")
    assert due_ids() == {held.pk, held_name.pk}


def test_a_worker_of_a_queue_claims_no_job_of_a_queue_differing_in_case_or_spaces():
    for queue in ("emails", "Emails", "emails ", "EMAILS"):
        JobFactory(queue=queue)
    claimed = claim_due(timezone.now(), queues=["emails"], limit=100, worker_id="w")
    assert [job.queue for job in claimed] == ["emails"]


def test_a_pause_with_until_ends_by_itself():
    job = JobFactory()
    now = timezone.now()
    jobs.pause(queue="default", until=now + dt.timedelta(seconds=60))
    assert claim_due(now, queues=None, limit=10, worker_id="w") == []
    later = now + dt.timedelta(seconds=61)
    assert [j.id for j in claim_due(later, queues=None, limit=10, worker_id="w")] == [job.pk]
    assert active_pauses(later) == []
    assert delete_ended_pauses(later) == 1
    assert not Pause.objects.exists()


def test_pausing_again_replaces_the_pause():
    jobs.pause(queue="default", reason="first")
    until = timezone.now() + dt.timedelta(hours=1)
    jobs.pause(queue="default", reason="second", until=until)
    [pause] = Pause.objects.all()
    assert (pause.reason, pause.until) == ("second", until)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"queue": "a", "name": "b"},
        {"queue": ""},
        {"queue": "x" * 101},
        {"name": 7},
        {"queue": "a", "until": dt.datetime(2030, 1, 1)},  # naive
    ],
)
def test_pause_refuses_a_target_it_cannot_use(kwargs):
    with pytest.raises(ValueError, match=r"queue|name|until"):
        jobs.pause(**kwargs)


def test_a_pause_does_not_stop_enqueue_nor_running_jobs():
    running = JobFactory()
    claimed = claim_one(running)
    jobs.pause(queue="default")
    job = test_jobs.record.enqueue(key="k")
    assert job.status == "pending"
    assert lifecycle.complete_success(claimed, now=timezone.now())


def test_in_eager_mode_a_snoozed_job_stays_pending_until_its_snooze_ends(settings):
    settings.CRONQUEUE = {"EAGER": True}
    job = test_jobs.snoozes.enqueue(seconds=60)
    assert (job.status, job.attempts, job.snoozes) == ("pending", 0, 1)
    assert job.run_at > timezone.now() + dt.timedelta(seconds=50)


def test_who_cancelled_a_pending_job_is_in_its_last_error():
    job = JobFactory()
    jobs.cancel(job, reason="duplicate", by="ops")
    job.refresh_from_db()
    assert (job.status, job.last_error) == ("cancelled", "cancelled by ops: duplicate")
