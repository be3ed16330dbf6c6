"""``enqueue_on_commit``: checked at the call, written when the site's transaction commits,
dropped when it rolls back (for a queue in a database of its own; here the queue shares
the site's database, tests/queue_db has two). Every form: ``jobs.enqueue_on_commit``,
``handle.enqueue_on_commit``, ``handle.using(...).enqueue_on_commit``, with ``after=``,
and a chain's and a group's."""

import datetime as dt

import pytest
from django.db import transaction

from django_cronqueue import jobs
from django_cronqueue.models import Batch, Job, JobStatus
from tests.testapp.jobs import record
from tests.testapp.models import Note

COMMITTED = pytest.mark.django_db(transaction=True)


def keys():
    return sorted(Job.objects.values_list("payload__key", flat=True))


@COMMITTED
def test_the_job_is_written_when_the_transaction_commits():
    with transaction.atomic():
        Note.objects.create(text="order 1")
        jobs.enqueue_on_commit(record, {"key": "order 1"}, queue="emails", priority=3)
        assert not Job.objects.exists()
    job = Job.objects.get()
    assert (job.name, job.payload, job.queue, job.priority) == (
        "testapp.record",
        {"key": "order 1"},
        "emails",
        3,
    )
    assert job.status == JobStatus.PENDING


@COMMITTED
def test_a_rollback_drops_the_job():
    with transaction.atomic():
        Note.objects.create(text="order 2")
        record.enqueue_on_commit(key="order 2")
        transaction.set_rollback(True)  # as an exception leaving the block would
    assert not Note.objects.exists()
    assert not Job.objects.exists()


@COMMITTED
def test_a_rolled_back_savepoint_drops_only_its_own_jobs():
    with transaction.atomic():
        record.enqueue_on_commit(key="kept")
        with transaction.atomic():
            record.enqueue_on_commit(key="dropped")
            transaction.set_rollback(True)
    assert keys() == ["kept"]


@COMMITTED
def test_outside_a_transaction_it_enqueues_at_once():
    record.enqueue_on_commit(key="now")
    assert keys() == ["now"]


@COMMITTED
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: jobs.enqueue_on_commit("testapp.nope", {}), jobs.UnknownJob),
        (lambda: jobs.enqueue_on_commit(record, {"key": {1, 2}}), jobs.InvalidPayload),
        (lambda: record.enqueue_on_commit(nope=1), jobs.InvalidPayload),
        (
            lambda: record.using(run_at=dt.datetime(2026, 1, 1)).enqueue_on_commit(key="k"),
            ValueError,
        ),
        (
            lambda: record.using(dedupe_for=dt.timedelta(hours=1)).enqueue_on_commit(key="k"),
            ValueError,
        ),
        (lambda: jobs.enqueue_on_commit(record, {"key": "k"}, key="k"), TypeError),
    ],
)
def test_everything_is_checked_at_the_call(call, error):
    with transaction.atomic():
        with pytest.raises(error):
            call()
        Note.objects.create(text="the transaction goes on")
    assert not Job.objects.exists()
    assert Note.objects.count() == 1


@COMMITTED
def test_what_is_written_is_the_payload_as_it_was_at_the_call():
    payload = {"key": "as called"}
    with transaction.atomic():
        jobs.enqueue_on_commit(record, payload)
        payload["key"] = "changed later"
    assert keys() == ["as called"]


@COMMITTED
def test_options_and_dedupe_apply_at_the_commit():
    with transaction.atomic():
        record.using(dedupe_key="once", delay=dt.timedelta(hours=1)).enqueue_on_commit(key="a")
        record.using(dedupe_key="once").enqueue_on_commit(key="b")
    job = Job.objects.get()
    assert (job.payload, job.dedupe_key) == ({"key": "a"}, "once")
    assert job.run_at > job.created_at + dt.timedelta(minutes=59)


@COMMITTED
def test_a_job_that_waits_for_another_is_written_at_the_commit():
    upstream = record.enqueue(key="upstream")
    with transaction.atomic():
        record.using(after=[upstream]).enqueue_on_commit(key="downstream")
        assert Job.objects.count() == 1
    downstream = Job.objects.get(payload__key="downstream")
    assert downstream.blocked
    with pytest.raises(TypeError, match="never deduplicated"):
        record.using(after=[upstream], dedupe_key="k").enqueue_on_commit(key="x")


@COMMITTED
def test_a_chain_and_a_group_are_written_at_the_commit_or_not_at_all():
    with transaction.atomic():
        jobs.chain(record.s(key="c1"), record.s(key="c2")).enqueue_on_commit()
        jobs.group([record.s(key="g1")]).enqueue_on_commit()
        transaction.set_rollback(True)
    assert not Job.objects.exists()

    with transaction.atomic():
        jobs.chain(record.s(key="c1"), record.s(key="c2")).enqueue_on_commit()
        jobs.group([record.s(key="g1"), record.s(key="g2")]).then(
            record.s(key="t")
        ).enqueue_on_commit()
        assert not Job.objects.exists()
    assert keys() == ["c1", "c2", "g1", "g2", "t"]
    assert Batch.objects.get().size == 2
    assert Job.objects.get(payload__key="c2").blocked


@pytest.mark.django_db
def test_with_captured_callbacks_the_job_is_written_when_they_run(
    django_capture_on_commit_callbacks,
):
    """How a test inside one transaction (pytest-django's ``db``, Django's TestCase)
    sees the job: run the captured callbacks."""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        record.enqueue_on_commit(key="captured")
        assert not Job.objects.exists()
    assert len(callbacks) == 1
    assert keys() == ["captured"]
