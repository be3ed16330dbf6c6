"""Registered jobs' options as a worker applies them, on the real database (the
decorator and the registry themselves are tested in tests/unit/definitions/test_registry.py)."""

import datetime as dt

import pytest
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry


@pytest.fixture(autouse=True)
def _restore_registry():
    """Jobs defined by a test do not outlive it."""
    saved = dict(registry._definitions)
    yield
    registry._definitions.clear()
    registry._definitions.update(saved)


@pytest.mark.django_db(transaction=True)
def test_the_worker_uses_a_callable_backoff_verbatim():
    @jobs.job(name="custom.backoff.flaky", retries=3, backoff=lambda attempt: 10 * attempt)
    def flaky() -> None:
        raise RuntimeError("flaky")

    job = flaky.enqueue()
    now = timezone.now()
    assert jobs.tick(now=now).failed == 1
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 1)
    assert job.run_at == now + dt.timedelta(seconds=10)
    later = job.run_at
    assert jobs.tick(now=later).failed == 1
    job.refresh_from_db()
    assert job.run_at == later + dt.timedelta(seconds=20)


@pytest.mark.django_db(transaction=True)
def test_the_worker_uses_the_default_backoff():
    @jobs.job(name="default.backoff.flaky")
    def flaky() -> None:
        raise RuntimeError("flaky")

    job = flaky.enqueue()
    now = timezone.now()
    jobs.tick(now=now)
    job.refresh_from_db()
    delay = (job.run_at - now).total_seconds()
    assert 0.8 <= delay <= 1.2
