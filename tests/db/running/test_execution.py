"""django_cronqueue.running.execution: calling handlers, recording their outcome, and the
Recorder that writes a worker slot's quick successes in one UPDATE."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import signals
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import registry
from django_cronqueue.lifecycle import Outcome
from django_cronqueue.models import Job
from django_cronqueue.running import execution
from django_cronqueue.running.execution import Call, Recorder
from django_cronqueue.values.validation import MAX_JSON_DEPTH
from tests.factories import JobFactory
from tests.refusals import refusing
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

NOW = timezone.now()


def clock():
    return NOW


def claim(count, name="testapp.noop", payload=None, **fields):
    JobFactory.create_batch(count, name=name, payload=payload or {}, **fields)
    claimed = claim_due(timezone.now(), queues=None, limit=count, worker_id="w")
    assert len(claimed) == count
    return claimed


def quick(job, result=None, duration=0.0):
    return Call(job, registry.get(job.name), duration=duration, result=result)


def updates(queries):
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]


def statuses():
    return dict(Job.objects.values_list("id", "status"))


@pytest.fixture
def recorder():
    recorder = Recorder(clock)
    recorder.MAX_WAIT = 3600.0  # this test decides when the batch is written
    return recorder


@pytest.fixture
def announced():
    seen = []

    def receiver(sender, job, **kwargs):
        seen.append(job.id)

    signals.job_succeeded.connect(receiver)
    yield seen
    signals.job_succeeded.disconnect(receiver)


# --- the Recorder -------------------------------------------------------------------


def test_quick_successes_wait_and_are_written_in_one_update(recorder, announced):
    claimed = claim(5)
    with CaptureQueriesContext(connection) as queries:
        for job in claimed:
            recorder.add(quick(job))
    assert len(queries) == 0
    assert set(statuses().values()) == {"running"}
    assert announced == []

    with CaptureQueriesContext(connection) as queries:
        recorder.flush()
    assert len(updates(queries)) == 1, [q["sql"] for q in queries]
    assert len(queries) <= 2  # MySQL may read back which rows it wrote
    assert set(statuses().values()) == {"succeeded"}
    assert set(Job.objects.values_list("finished_at", flat=True)) == {NOW}
    assert set(Job.objects.values_list("lock_token", flat=True)) == {None}
    assert sorted(announced) == sorted(job.id for job in claimed)
    assert recorder.pending == []


def test_a_flush_with_nothing_waiting_writes_nothing(recorder):
    with CaptureQueriesContext(connection) as queries:
        recorder.flush()
    assert len(queries) == 0


def test_a_failure_writes_the_waiting_batch_first_then_itself(recorder):
    successes = claim(3)
    [failing] = claim(1, name="testapp.always_fails")
    for job in successes:
        recorder.add(quick(job))
    with CaptureQueriesContext(connection) as queries:
        recorder.add(Call(failing, test_jobs.always_fails, error=RuntimeError("boom")))
    assert len(updates(queries)) == 2
    assert " IN (" in updates(queries)[0].upper()  # the batch's UPDATE, before the failure's
    assert statuses() == {
        **{job.id: "succeeded" for job in successes},
        failing.id: "pending",  # retrying
    }
    assert recorder.pending == []


def test_a_success_with_a_result_or_a_slow_one_is_written_at_once(recorder):
    with_result, slow = claim(2)
    recorder.add(quick(with_result, result={"n": 1}))
    recorder.add(quick(slow, duration=Recorder.QUICK))
    assert recorder.pending == []
    assert statuses() == {with_result.id: "succeeded", slow.id: "succeeded"}
    assert Job.objects.get(pk=with_result.id).result == {"n": 1}


def test_the_batch_is_written_once_it_has_waited_max_wait():
    claimed = claim(2)
    recorder = Recorder(clock)
    recorder.MAX_WAIT = 0.0
    recorder.add(quick(claimed[0]))
    assert recorder.pending == []
    assert Job.objects.get(pk=claimed[0].id).status == "succeeded"


def test_a_batched_success_whose_lease_was_lost_is_not_written_nor_announced(recorder, announced):
    kept, lost = claim(2)
    Job.objects.filter(pk=lost.id).update(lock_token="another-claim")
    recorder.add(quick(kept))
    recorder.add(quick(lost))
    recorder.flush()
    assert statuses() == {kept.id: "succeeded", lost.id: "running"}
    assert announced == [kept.id]


def test_a_batch_whose_write_failed_is_kept_for_the_next_flush(recorder, monkeypatch):
    claimed = claim(2)
    for job in claimed:
        recorder.add(quick(job))
    real = execution.complete_successes

    def broken(*args, **kwargs):
        raise ConnectionError("database went away")

    monkeypatch.setattr(execution, "complete_successes", broken)
    with pytest.raises(ConnectionError):
        recorder.flush()
    assert [call.job.id for call in recorder.pending] == [job.id for job in claimed]
    monkeypatch.setattr(execution, "complete_successes", real)
    recorder.flush()
    assert set(statuses().values()) == {"succeeded"}


def test_take_hands_over_the_batch_and_put_back_restores_it(recorder):
    claimed = claim(2)
    recorder.add(quick(claimed[0]))
    batch, erased = recorder.take()
    assert [call.job.id for call in batch] == [claimed[0].id] and not erased
    assert recorder.pending == []
    recorder.add(quick(claimed[1]))
    recorder.put_back(batch)
    assert [call.job.id for call in recorder.pending] == [claimed[0].id, claimed[1].id]


# --- call and record ----------------------------------------------------------------


def test_call_keeps_whatever_the_handler_raises_even_system_exit():
    [job] = claim(1, name="testapp.exits", max_attempts=1)
    outcome = execution.call(job)
    assert isinstance(outcome.error, SystemExit)
    assert outcome.succeeded is False
    assert execution.record(outcome, NOW) is Outcome.FAILED
    assert Job.objects.get().last_error == "SystemExit: 3"


def test_call_and_record_a_success_with_its_result():
    [job] = claim(1, name="testapp.returns_value", payload={"value": 4})
    outcome = execution.call(job)
    assert (outcome.succeeded, outcome.result) == (True, {"doubled": 8})
    assert execution.record(outcome, NOW) is Outcome.SUCCEEDED
    row = Job.objects.get()
    assert (row.status, row.result, row.finished_at) == ("succeeded", {"doubled": 8}, NOW)


def test_a_result_the_database_cannot_store_is_dropped_not_an_error():
    [job] = claim(1, name="testapp.returns_value", payload={"value": 4})
    outcome = Call(job, test_jobs.returns_value, result={"when": dt.datetime.now()})
    assert execution.record(outcome, NOW) is Outcome.SUCCEEDED
    row = Job.objects.get()
    assert (row.status, row.result) == ("succeeded", None)


def nested(levels):
    value = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def test_the_deepest_result_is_stored_and_read_back():
    # The result is the whole document: MAX_JSON_DEPTH levels, MariaDB's last accepted.
    [job] = claim(1, name="testapp.returns_value", payload={"value": 4})
    deepest = nested(MAX_JSON_DEPTH)
    assert execution.record(Call(job, test_jobs.returns_value, result=deepest), NOW) is (
        Outcome.SUCCEEDED
    )
    assert Job.objects.get().result == deepest


def test_a_result_too_deep_for_a_database_is_dropped_and_the_log_says_why(caplog):
    [job] = claim(1, name="testapp.returns_value", payload={"value": 4})
    outcome = Call(job, test_jobs.returns_value, result=nested(40))
    assert execution.record(outcome, NOW) is Outcome.SUCCEEDED
    row = Job.objects.get()
    assert (row.status, row.result) == ("succeeded", None)
    [warning] = [r for r in caplog.records if getattr(r, "outcome", "") == "result_dropped"]
    assert warning.levelname == "WARNING"
    assert warning.getMessage().startswith(
        f"Job testapp.returns_value #{job.id} succeeded, but its return value was dropped "
        "(result is None): return value 'result[0]"
    )
    assert "nested 32 levels deep" in warning.getMessage()


def test_a_result_the_database_refuses_is_dropped_and_the_success_recorded(caplog):
    """A limit no check knew of: the database's IntegrityError on the success write is
    not an error of the run, and the row still ends succeeded, once."""
    [job] = claim(1, name="testapp.returns_value", payload={"value": 4})
    with refusing("result", "refuse-me"):
        outcome = Call(job, test_jobs.returns_value, result={"note": "refuse-me"})
        assert execution.record(outcome, NOW) is Outcome.SUCCEEDED
    row = Job.objects.get()
    assert (row.status, row.result, row.lock_token) == ("succeeded", None, None)
    [warning] = [r for r in caplog.records if getattr(r, "outcome", "") == "result_dropped"]
    assert "the database refused its return value" in warning.getMessage()
    assert "IntegrityError" in warning.getMessage()


def test_a_job_unregistered_since_its_claim_is_released_not_run(monkeypatch):
    [job] = claim(1)
    monkeypatch.setattr(registry, "_definitions", {})
    outcome = execution.call(job)
    assert (outcome.definition, outcome.succeeded) == (None, False)
    assert execution.record(outcome, NOW) is Outcome.RELEASED
    row = Job.objects.get()
    assert (row.status, row.attempts, row.lock_token) == ("pending", 0, None)


def test_run_claimed_reports_the_handler_and_the_outcome():
    [noop] = claim(1)
    assert execution.run_claimed(noop, clock) == (True, Outcome.SUCCEEDED)
    [failing] = claim(1, name="testapp.always_fails", max_attempts=2)
    assert execution.run_claimed(failing, clock) == (False, Outcome.RETRYING)
    [failing] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert execution.run_claimed(failing, clock) == (False, Outcome.FAILED)
