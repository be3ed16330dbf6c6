"""``enqueue_on_commit`` with the queue in ``jobs`` and the site's transaction on
``default``: the job is written to ``jobs`` when ``default`` commits, and never when it
rolls back; before the commit no worker can claim it."""

import pytest
from django.db import transaction

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobStatus
from tests.testapp import jobs as test_jobs
from tests.testapp.models import Note, SideEffect

from .conftest import BOTH

pytestmark = pytest.mark.django_db(transaction=True, databases=BOTH)


def test_a_rollback_of_the_site_transaction_leaves_no_job():
    with transaction.atomic():
        Note.objects.create(text="order 1")
        test_jobs.record.enqueue_on_commit(key="order 1")
        transaction.set_rollback(True)
    assert not Note.objects.exists()
    assert not Job.objects.using("jobs").exists()


def test_a_commit_of_the_site_transaction_leaves_one_job_that_then_runs():
    with transaction.atomic():
        note = Note.objects.create(text="order 2")
        jobs.enqueue_on_commit(test_jobs.record, {"key": f"note {note.pk}"})
        # Nothing in the queue yet: a worker ticking now finds nothing to claim.
        assert jobs.tick().claimed == 0
    job = Job.objects.using("jobs").get()
    assert job.payload == {"key": f"note {note.pk}"}
    assert jobs.tick().ran == 1
    assert Job.objects.using("jobs").get().status == JobStatus.SUCCEEDED
    assert SideEffect.objects.get().key == f"note {note.pk}"


def test_the_site_database_is_the_one_that_counts():
    """A transaction on the queue's own database does not hold the job back: only the
    one named by ``using`` (here ``default``) does."""
    with transaction.atomic(using="jobs"):
        test_jobs.record.enqueue_on_commit(key="at once")
    with transaction.atomic(using="default"), transaction.atomic(using="jobs"):
        jobs.enqueue_on_commit(test_jobs.record, {"key": "queue commit"}, using="jobs")
        transaction.set_rollback(True, using="default")
    assert sorted(Job.objects.values_list("payload__key", flat=True)) == ["at once", "queue commit"]
