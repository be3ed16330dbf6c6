"""Control of running work (SPEC section 8), the worker's side run in-process: the
heartbeat and the listener's cancel notices, a stop while slots claim, cancel requests
racing the row's own moves; and paths of the core that test_control.py leaves out.
Most of these were found by the multi-process tests (tests/e2e/test_control.py)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import registry
from django_cronqueue.exceptions import JobCancelled, Snooze
from django_cronqueue.lifecycle import Outcome
from django_cronqueue.models import Job
from django_cronqueue.running import context as context_module
from django_cronqueue.running.execution import Recorder, call, new_context
from django_cronqueue.worker import Worker
from django_cronqueue.worker import loop as worker_module
from django_cronqueue.worker.held_jobs import HeldJob, pass_on_cancel_requests, write_progress
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def claim_one(name="testapp.record", payload=None, **fields):
    job = JobFactory(name=name, payload=payload if payload is not None else {"key": "k"}, **fields)
    claimed = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert [c.id for c in claimed] == [job.pk]
    return claimed[0]


def row(claimed) -> Job:
    return Job.objects.get(pk=claimed.id)


def updates(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]


@pytest.fixture
def handler():
    """Registers handlers for one test: ``handler(func, name=..., **options)``."""
    names = []

    def define(func, name, **options):
        names.append(name)
        return jobs.job(name=name, **options)(func)

    yield define
    for name in names:
        registry.unregister(name)


# --- cancel requests in the worker's threads ----------------------------------------


def async_returned(handler):
    """A claimed async job whose handler already returned (its loop is closed) and whose
    row is still running: the window before the worker writes its outcome."""

    async def quick() -> str:
        return "done"

    handler(quick, "tests.control.async_quick", retries=0)
    claimed = claim_one("tests.control.async_quick", {})
    context = new_context(claimed)
    outcome = call(claimed, context)
    assert outcome.error is None and outcome.result == "done"
    return claimed, context


def test_a_cancel_request_after_an_async_handler_returned_is_harmless(handler):
    """It used to raise RuntimeError('Event loop is closed') from the callback that
    cancels the handler's task, in whichever thread passed the request on."""
    _, context = async_returned(handler)
    context.request_cancel()
    assert context.cancel_requested


def test_the_heartbeat_survives_a_cancel_of_an_async_job_whose_handler_returned(handler):
    """The heartbeat passes a cancel on to a job it holds; when that job's async handler
    had returned, the RuntimeError of its closed loop ended the heartbeat thread (no
    more lease renewals for any job of the worker)."""
    claimed, context = async_returned(handler)
    worker = Worker(concurrency=1)
    worker._held[claimed.id] = HeldJob(claimed, context, started=True)
    assert lifecycle.request_cancel_rows([claimed.id], "", timezone.now(), by="operator")
    worker._beat()  # raised RuntimeError
    assert context.cancel_requested


def test_a_cancel_callback_that_raises_is_logged_and_the_others_still_run(caplog):
    context = context_module.JobContext(
        job_id=1, name="x", attempt=1, scheduled_for=None, payload={}
    )
    ran = []

    def broken() -> None:
        raise ValueError("broken callback")

    context.on_cancel(broken)
    context.on_cancel(lambda: ran.append(True))
    with caplog.at_level(logging.ERROR, logger="django_cronqueue"):
        context.request_cancel()
    assert ran == [True]
    assert "A cancel callback of <JobContext x #1 attempt 1> raised" in caplog.text


def test_a_cancel_notice_between_a_claim_and_its_holding_reaches_the_handler(monkeypatch):
    """On PostgreSQL the listener passes a cancel on to the jobs the worker holds. A
    slot holds its claims only after the claim committed: a notice that came in
    between matched nothing and was lost, and the handler learnt of the cancel only at
    the next heartbeat (LEASE / 3, 10 s by default), not within 1 s."""
    worker = Worker(concurrency=1)
    worker._measure_clock()
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    real_claim = worker_module.write_and_claim

    def claim_then_cancel(*args, **kwargs):
        claimed, written = real_claim(*args, **kwargs)
        assert jobs.cancel(job.pk, by="operator").outcome == "requested"
        worker._cancel_requested([job.pk])  # the listener, before the slot holds the job
        return claimed, written

    monkeypatch.setattr(worker_module, "write_and_claim", claim_then_cancel)
    [claimed] = worker._claim(1, Recorder(worker.clock.now))
    assert worker._held[claimed.id].context.cancel_requested


def test_a_stale_cancel_notice_does_not_cancel_a_later_claim_of_the_row():
    """A notice is checked against the row: one about another run (another worker's,
    or a run before a retry) cancels nothing."""
    worker = Worker(concurrency=1)
    worker._measure_clock()
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    worker._cancel_requested([job.pk])  # not held: remembered
    [claimed] = worker._claim(1, Recorder(worker.clock.now))
    assert not worker._held[claimed.id].context.cancel_requested
    # The notice was used up: the next claims are not asked about again.
    assert worker._notices.take([job.pk]) == []


# --- cancel: the operator's side ----------------------------------------------------


def test_a_second_cancel_of_a_running_job_keeps_the_first_request_and_says_so():
    claimed = claim_one()
    first = jobs.cancel(claimed.id, by="alice")
    second = jobs.cancel(claimed.id, by="bob")
    job = row(claimed)
    assert (first.outcome, second.outcome) == ("requested", "requested")
    assert job.cancel_requested_by == "alice"
    assert f"a cancel was already requested at {job.cancel_requested_at.isoformat()}" in (
        second.message
    )


@pytest.mark.parametrize("value", [None, 1.5, True, ["1"]])
def test_cancel_refuses_what_is_not_a_job_or_an_id(value):
    with pytest.raises(TypeError, match="takes a Job or a job id"):
        jobs.cancel(value)


def moved_while_cancelling(monkeypatch, before: dict, after: dict | None = None):
    """The running row moves on between cancel_job's statements: ``before`` is applied
    just before its first request_cancel_rows (so that it fails), ``after`` just after."""
    from django_cronqueue.lifecycle import operator

    real = operator.request_cancel_rows
    calls = []

    def moving(ids, *args, **kwargs):
        calls.append(ids)
        if len(calls) > 1:
            return real(ids, *args, **kwargs)
        Job.objects.filter(pk__in=ids).update(**before)
        updated = real(ids, *args, **kwargs)
        if after:
            Job.objects.filter(pk__in=ids).update(**after)
        return updated

    monkeypatch.setattr(operator, "request_cancel_rows", moving)


def test_a_job_retried_to_pending_while_being_cancelled_is_cancelled(monkeypatch):
    """Its handler failed and the row went back to pending (a retry) between the two
    UPDATEs: cancel_job used to say it "has already ended (pending); cancelling it
    changes nothing" and leave it to run again."""
    claimed = claim_one()
    moved_while_cancelling(monkeypatch, {"status": "pending", "lock_token": None})
    result = jobs.cancel(claimed.id, by="alice")
    assert result.outcome == "cancelled", result.message
    assert row(claimed).status == "cancelled"


def test_a_job_retried_and_claimed_again_while_being_cancelled_gets_the_request(monkeypatch):
    """Retried, then claimed again, around the second UPDATE: running without a
    request, which cancel_job used to take for an earlier request (and raise
    AttributeError on its None ``cancel_requested_at``)."""
    claimed = claim_one()
    moved_while_cancelling(
        monkeypatch,
        {"status": "pending", "lock_token": None},
        {"status": "running", "lock_token": "a-later-claim"},
    )
    result = jobs.cancel(claimed.id, by="alice")
    assert result.outcome == "requested", result.message
    assert row(claimed).cancel_requested_by == "alice"


# --- cancel: the worker's side --------------------------------------------------------


def requested(claimed, by="operator", reason="not needed"):
    assert lifecycle.request_cancel_rows([claimed.id], reason, timezone.now(), by=by)
    return row(claimed).cancel_requested_at


def test_a_completion_under_a_lost_lease_writes_nothing_even_after_a_request():
    claimed = claim_one()
    requested(claimed)
    Job.objects.filter(pk=claimed.id).update(lock_token="someone-else")
    outcome = lifecycle.complete_failure(
        claimed, JobCancelled("x"), now=timezone.now(), definition=None
    )
    assert outcome == Outcome.DISCARDED
    assert row(claimed).status == "running"


def test_the_heartbeat_passes_requests_on_in_one_query_to_the_held_jobs_asked_only():
    for key in "abc":
        jobs.enqueue(test_jobs.record, {"key": key})
    claimed = claim_due(timezone.now(), queues=None, limit=3, worker_id="w")
    held = [HeldJob(job, new_context(job), started=True) for job in claimed]
    requested(claimed[1])
    with CaptureQueriesContext(connection) as queries:
        pass_on_cancel_requests(held)
    assert len(queries) == 1
    assert [entry.context.cancel_requested for entry in held] == [False, True, False]
    with CaptureQueriesContext(connection) as queries:
        pass_on_cancel_requests([held[1]])  # already told: not asked again
    assert len(queries) == 0


def test_an_async_handler_that_swallows_the_cancel_and_returns_succeeds(handler):
    import asyncio

    started = threading.Event()

    async def stubborn() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    handler(stubborn, "tests.control.async_stubborn", retries=0)
    claimed = claim_one("tests.control.async_stubborn", {})
    context = new_context(claimed)
    outcomes = []
    thread = threading.Thread(target=lambda: outcomes.append(call(claimed, context)))
    thread.start()
    assert started.wait(10)
    context.request_cancel()
    thread.join(10)
    assert (outcomes[0].error, outcomes[0].result) == (None, "finished anyway")


# --- the context: jobs.current() ------------------------------------------------------


def test_jobs_tick_gives_the_handler_its_context_and_sees_a_cancel_in_the_row(handler, monkeypatch):
    monkeypatch.setattr(context_module, "POLL_INTERVAL", 0.0)  # ask the row every time
    seen = {}

    def looks_at_itself(key: str) -> None:
        context = jobs.current()
        seen.update(
            job_id=context.job_id,
            name=context.name,
            attempt=context.attempt,
            payload=context.payload,
            before=context.cancel_requested,
        )
        jobs.cancel(context.job_id, by="itself")
        seen["after"] = context.cancel_requested
        context.set_progress(1, total=2, message="half")
        context.check_cancelled()

    handler(looks_at_itself, "tests.control.looks_at_itself", retries=3)
    job = jobs.enqueue("tests.control.looks_at_itself", {"key": "k"})
    result = jobs.tick()
    assert (result.claimed, result.ran, result.failed) == (1, 0, 1)
    assert seen == {
        "job_id": job.pk,
        "name": "tests.control.looks_at_itself",
        "attempt": 1,
        "payload": {"key": "k"},
        "before": False,
        "after": True,
    }
    job = row(job)
    assert (job.status, job.attempts) == ("cancelled", 1)
    assert job.progress["done"] == 1 and job.progress["message"] == "half"


def test_a_context_asks_the_database_at_most_once_a_second():
    claimed = claim_one()
    context = new_context(claimed, ask_database=True)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(100):
            assert not context.cancel_requested
    assert len(queries) == 1


def test_set_progress_keeps_only_the_latest_value_and_hands_it_over_once():
    context = context_module.JobContext(
        job_id=1, name="x", attempt=1, scheduled_for=None, payload={}
    )
    for done in range(1000):
        context.set_progress(done, total=1000, message="x\x00" * 600)
    latest = context.take_unwritten_progress()
    assert (latest["done"], latest["total"]) == (999, 1000)
    assert latest["message"] == "x" * context_module.MAX_PROGRESS_MESSAGE_CHARS
    assert context.take_unwritten_progress() is None  # nothing new since
    assert context.progress == latest


# --- progress: the heartbeat's writes -------------------------------------------------


def test_the_heartbeat_writes_each_started_jobs_latest_progress_once():
    for key in "abc":
        jobs.enqueue(test_jobs.record, {"key": key})
    claimed = claim_due(timezone.now(), queues=None, limit=3, worker_id="w")
    held = [HeldJob(job, new_context(job), started=index < 2) for index, job in enumerate(claimed)]
    for entry in held:
        for done in range(50):
            entry.context.set_progress(done)
    with CaptureQueriesContext(connection) as queries:
        write_progress(held)
    assert len(updates(queries)) == 2  # the unstarted one is not written
    stored = dict(Job.objects.values_list("id", "progress"))
    assert [stored[job.id] and stored[job.id]["done"] for job in claimed] == [49, 49, None]
    with CaptureQueriesContext(connection) as queries:
        write_progress(held)  # nothing new
    assert updates(queries) == []


def test_a_progress_write_under_a_lost_lease_writes_nothing():
    claimed = claim_one()
    Job.objects.filter(pk=claimed.id).update(lock_token="someone-else")
    assert lifecycle.write_progress([(claimed, {"done": 1})]) == 0
    assert row(claimed).progress is None


# --- snooze ---------------------------------------------------------------------------


def test_a_snooze_after_a_cancel_request_ends_cancelled():
    claimed = claim_one()
    requested(claimed)
    outcome = lifecycle.complete_snooze(claimed, Snooze(seconds=30), now=timezone.now())
    assert outcome == Outcome.CANCELLED
    job = row(claimed)
    assert (job.status, job.snoozes) == ("cancelled", 0)


def test_a_snooze_under_a_lost_lease_writes_nothing():
    claimed = claim_one()
    Job.objects.filter(pk=claimed.id).update(lock_token="someone-else")
    outcome = lifecycle.complete_snooze(claimed, Snooze(seconds=30), now=timezone.now())
    assert outcome == Outcome.DISCARDED
    assert (row(claimed).status, row(claimed).snoozes) == ("running", 0)


def test_a_handler_snoozing_in_a_tick_runs_again_later_without_using_an_attempt(handler):
    calls = []

    def snoozes_once() -> None:
        calls.append(jobs.current().attempt)
        if len(calls) == 1:
            raise jobs.Snooze(seconds=60)

    handler(snoozes_once, "tests.control.snoozes_once", retries=0)
    job = jobs.enqueue("tests.control.snoozes_once")
    now = timezone.now()
    jobs.tick(now=now)
    assert (row(job).status, row(job).attempts, row(job).snoozes) == ("pending", 0, 1)
    assert jobs.tick(now=now + dt.timedelta(seconds=30)).claimed == 0
    jobs.tick(now=now + dt.timedelta(seconds=61))
    job = row(job)
    assert (job.status, job.attempts, job.snoozes) == ("succeeded", 1, 1)
    assert calls == [1, 1]


# --- pauses ---------------------------------------------------------------------------


def test_resume_wakes_postgresql_workers_and_pause_does_not():
    with CaptureQueriesContext(connection) as pausing:
        jobs.pause(queue="slow")
    with CaptureQueriesContext(connection) as resuming:
        jobs.resume(queue="slow")
    wakes = 1 if connection.vendor == "postgresql" else 0
    assert [q for q in pausing if "NOTIFY" in q["sql"]] == []
    assert len([q for q in resuming if "NOTIFY" in q["sql"]]) == wakes


# --- stopping: found by the pause test (an idle worker with a long poll interval) ------


def test_a_stop_while_one_slot_claims_and_another_waits_stops_both_at_once(monkeypatch):
    """SIGTERM sets ``stopping`` and the shared ``wake`` event. A slot that was waiting
    woke, cleared ``wake``, and left; a slot that was claiming at that moment then
    waited the whole poll interval (60 s here) on the cleared event: the worker outlived
    its shutdown timeout with an idle slot. Seen as a runjobs that did not exit within
    30 s of SIGTERM in test_paused_queue_and_name_stay_pending_while_others_run_until_resumed."""
    worker = Worker(concurrency=2, poll_interval=60, shutdown_timeout=5)
    real_claim = worker._claim
    first_claimed, second_claiming, release = (threading.Event() for _ in range(3))

    def claim(limit, recorder):
        slot = threading.current_thread().name
        if slot == "cronqueue-slot-1" and not release.is_set():
            second_claiming.set()
            release.wait(10)  # claiming while the stop comes
        claimed = real_claim(limit, recorder)
        if slot == "cronqueue-slot-0":
            first_claimed.set()
        return claimed

    def stop_meanwhile():
        assert first_claimed.wait(10) and second_claiming.wait(10)
        worker.stop()
        deadline = time.monotonic() + 2  # let the idle slot clear wake, if it does
        while worker.wake.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()

    monkeypatch.setattr(worker, "_claim", claim)
    stopper = threading.Thread(target=stop_meanwhile)
    stopper.start()
    started = time.monotonic()
    assert worker.run() == 0
    stopper.join(10)
    assert worker.unfinished == []
    assert time.monotonic() - started < 5
