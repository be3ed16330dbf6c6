"""Batched successes of sensitive jobs (SPEC section 16): the rows marked succeeded with
their secrets erased by the statement that marks them, beside the plain batch's own
statement, which stays as it was."""

import json

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due, claim_request, complete_and_claim
from django_cronqueue.claiming import complete_successes as claiming_complete_successes
from django_cronqueue.conf import database_alias
from django_cronqueue.definitions.registry import registry
from django_cronqueue.integrations import encryption
from django_cronqueue.models import Job
from django_cronqueue.running import execution
from django_cronqueue.running.execution import Call, Recorder
from tests.sensitive_keys import KEY_A, SECRET, registered, unregistered_handles
from tests.testapp import jobs as test_jobs
from tests.testapp.sensitive_jobs import charge, everything

pytestmark = pytest.mark.django_db(transaction=True)

HANDLES = unregistered_handles()

NOW = timezone.now()


@pytest.fixture(autouse=True)
def sensitive_defined():
    with registered(HANDLES), override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A]}):
        yield


def claim_all(count):
    claimed = claim_due(timezone.now(), queues=None, limit=count, worker_id="w")
    assert len(claimed) == count
    return claimed


def enqueue_charges(count):
    return [
        charge.enqueue(order_id=n, card_token=SECRET, email=f"e{n}@x.org") for n in range(count)
    ]


def erased_of(claimed):
    return {
        job.id: encryption.erase_payload(job.payload)
        for job in claimed
        if job.name.startswith("sensitive.")
    }


def updates(queries):
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]


def assert_succeeded_and_erased(job_id, order_id):
    row = Job.objects.get(pk=job_id)
    assert row.status == "succeeded" and row.lock_token is None and row.finished_at == NOW
    assert row.payload["order_id"] == order_id
    assert row.payload["card_token"] == encryption.erased() == row.payload["email"]
    stored = json.dumps(list(Job.objects.filter(pk=job_id).values_list("payload", "result")))
    assert '"$encrypted": null' in stored and SECRET not in stored


def complete(claimed, erased):
    return claiming_complete_successes(
        claimed, finished_at=NOW, using=database_alias(), erased=erased
    )


# --- the statement --------------------------------------------------------------------


def test_sensitive_successes_are_written_erased_in_one_update():
    enqueue_charges(3)
    claimed = claim_all(3)
    with CaptureQueriesContext(connection) as queries:
        written = complete(claimed, erased_of(claimed))
    assert len(updates(queries)) == 1, [q["sql"] for q in queries]
    assert written == {job.id for job in claimed}
    for job in claimed:
        assert_succeeded_and_erased(job.id, job.payload["order_id"])


def test_a_row_whose_lease_was_lost_is_not_written_and_keeps_its_values():
    enqueue_charges(2)
    kept, lost = claim_all(2)
    Job.objects.filter(pk=lost.id).update(lock_token="another-claim")
    assert complete([kept, lost], erased_of([kept, lost])) == {kept.id}
    assert_succeeded_and_erased(kept.id, kept.payload["order_id"])
    row = Job.objects.get(pk=lost.id)
    assert row.status == "running"  # its new run erases its values when it ends
    assert encryption.holds_encrypted(row.payload)


def test_a_mixed_batch_writes_the_plain_rows_with_their_payloads_unchanged():
    enqueue_charges(2)
    plain = [jobs.enqueue(test_jobs.record, {"key": f"k{n}"}) for n in range(2)]
    claimed = claim_all(4)
    with CaptureQueriesContext(connection) as queries:
        written = complete(claimed, erased_of(claimed))
    assert written == {job.id for job in claimed}
    assert len(updates(queries)) == 2  # the sensitive rows', then the plain batch's
    assert "CASE" not in updates(queries)[1].upper()
    for job in claimed:
        if job.name == charge.name:
            assert_succeeded_and_erased(job.id, job.payload["order_id"])
    for job in plain:
        job.refresh_from_db()
        assert job.status == "succeeded" and job.payload == {"key": job.payload["key"]}


def test_complete_and_claim_writes_sensitive_and_plain_successes_and_claims():
    enqueue_charges(1)
    jobs.enqueue(test_jobs.record, {"key": "plain"})
    claimed = claim_all(2)
    jobs.enqueue(test_jobs.record, {"key": "next"})
    request = claim_request(
        timezone.now(), queues=None, limit=5, worker_id="w", include_capped=False
    )
    with CaptureQueriesContext(connection) as queries:
        more, written = complete_and_claim(
            request, claimed, finished_at=NOW, using=database_alias(), erased=erased_of(claimed)
        )
    if connection.vendor == "postgresql":
        assert len(queries) == 1  # both kinds of success ride with the claim
    assert written == {job.id for job in claimed}
    assert [job.payload for job in more] == [{"key": "next"}]
    [sensitive] = [job for job in claimed if job.name == charge.name]
    assert_succeeded_and_erased(sensitive.id, 0)


def test_complete_and_claim_leaves_a_sensitive_row_whose_lease_was_lost():
    enqueue_charges(2)
    kept, lost = claim_all(2)
    Job.objects.filter(pk=lost.id).update(lock_token="another-claim")
    request = claim_request(
        timezone.now(), queues=None, limit=5, worker_id="w", include_capped=False
    )
    more, written = complete_and_claim(
        request,
        [kept, lost],
        finished_at=NOW,
        using=database_alias(),
        erased=erased_of([kept, lost]),
    )
    assert (more, written) == ([], {kept.id})
    assert_succeeded_and_erased(kept.id, kept.payload["order_id"])
    row = Job.objects.get(pk=lost.id)
    assert row.status == "running" and encryption.holds_encrypted(row.payload)


def test_a_plain_batch_with_its_claim_takes_the_statements_it_took():
    jobs.enqueue(test_jobs.record, {"key": "a"})
    claimed = claim_all(1)
    request = claim_request(
        timezone.now(), queues=None, limit=5, worker_id="w", include_capped=False
    )
    with CaptureQueriesContext(connection) as queries:
        complete_and_claim(request, claimed, finished_at=NOW, using=database_alias())
    assert not any("CASE" in q["sql"].upper() for q in queries)
    if connection.vendor == "postgresql":
        assert len(queries) == 1  # the successes ride with the claim
    else:
        assert len([sql for sql in updates(queries) if "succeeded" in sql]) == 1


# --- the Recorder ---------------------------------------------------------------------


@pytest.fixture
def recorder():
    recorder = Recorder(lambda: NOW)
    recorder.MAX_WAIT = 3600.0  # this test decides when the batch is written
    return recorder


def quick(job):
    return Call(job, registry.get(job.name), duration=0.0)


def test_a_quick_sensitive_success_waits_in_the_batch_and_is_written_erased(recorder):
    enqueue_charges(2)
    jobs.enqueue(test_jobs.record, {"key": "plain"})
    claimed = claim_all(3)
    with CaptureQueriesContext(connection) as queries:
        for job in claimed:
            recorder.add(quick(job))
    assert len(queries) == 0
    assert len(recorder.pending) == 3 and len(recorder.erased) == 2
    recorder.flush()
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    for job in claimed:
        if job.name == charge.name:
            assert_succeeded_and_erased(job.id, job.payload["order_id"])
    assert recorder.pending == [] and recorder.erased == {}


def test_a_job_sensitive_whole_is_erased_and_keeps_no_result(recorder):
    job = everything.enqueue(email=SECRET)
    [claimed] = claim_all(1)
    recorder.add(quick(claimed))
    recorder.flush()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "succeeded" and row.result is None
    assert row.payload == {"email": encryption.erased()}


def test_a_plain_batch_keeps_no_erased_payloads(recorder):
    jobs.enqueue(test_jobs.record, {"key": "plain"})
    [claimed] = claim_all(1)
    recorder.add(quick(claimed))
    batch, erased = recorder.take()
    assert [call.job.id for call in batch] == [claimed.id] and not erased


def test_a_failed_write_keeps_the_erased_payloads_for_the_next_flush(recorder, monkeypatch):
    enqueue_charges(1)
    [claimed] = claim_all(1)
    recorder.add(quick(claimed))
    real = execution.complete_successes

    def broken(*args, **kwargs):
        raise ConnectionError("database went away")

    monkeypatch.setattr(execution, "complete_successes", broken)
    with pytest.raises(ConnectionError):
        recorder.flush()
    assert list(recorder.erased) == [claimed.id]
    assert Job.objects.get(pk=claimed.id).status == "running"
    monkeypatch.setattr(execution, "complete_successes", real)
    recorder.flush()
    assert_succeeded_and_erased(claimed.id, 0)


def test_take_and_put_back_carry_the_erased_payloads(recorder):
    enqueue_charges(1)
    [claimed] = claim_all(1)
    recorder.add(quick(claimed))
    batch, erased = recorder.take()
    assert recorder.erased == {} and list(erased) == [claimed.id]
    recorder.put_back(batch, erased)
    assert recorder.pending == batch and recorder.erased == erased
