"""Attempt rows written by real runjobs processes: a worker killed mid-run leaves a lost
attempt, written by the worker that returns its job, and the run that then succeeds."""

import signal

import pytest

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobAttempt
from tests.testapp import jobs as test_jobs

from .conftest import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_killed_workers_attempt_is_recorded_lost_then_the_rescue_succeeded(runjobs):
    job = jobs.enqueue(test_jobs.slow_record, {"key": "survivor", "seconds": 2})
    settings = {"LEASE": 2, "POLL_INTERVAL": 0.2}
    doomed = runjobs.start(settings=settings)
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="running").exists())
    doomed_worker = Job.objects.get(pk=job.pk).worker_id
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)

    rescuer = runjobs.start(settings=settings)
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="succeeded").exists(), timeout=30)
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0
    lost, succeeded = JobAttempt.objects.filter(job_id=job.pk).order_by("id")
    assert (lost.attempt, lost.outcome, lost.worker) == (1, "lost", doomed_worker)
    assert lost.error.startswith("LeaseLost: lease lost: attempt 1 of")
    assert lost.retry_at is not None
    row = Job.objects.get(pk=job.pk)
    assert (succeeded.attempt, succeeded.outcome) == (2, "succeeded")
    assert (succeeded.worker, succeeded.started_at, succeeded.finished_at) == (
        row.worker_id,
        row.started_at,
        row.finished_at,
    )
    assert succeeded.worker != doomed_worker
