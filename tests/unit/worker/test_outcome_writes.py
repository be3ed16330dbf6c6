"""worker.Worker._write_outcomes: which errors of an outcome write are an outage (the
write is tried again, with backoff) and which are the database refusing the data
(raised at once: the same write would be refused again). Database-free: the writes are
stand-ins; tests/reliability/test_bad_input.py runs the real thing."""

import pytest
from django.db import DataError, IntegrityError, OperationalError

from django_cronqueue.worker import OUTCOME_WRITE_ATTEMPTS, Worker


@pytest.fixture
def worker(monkeypatch):
    instance = Worker(concurrency=1)
    instance.backoffs = []
    monkeypatch.setattr(
        instance, "_database_backoff", lambda exc, failures: instance.backoffs.append(type(exc))
    )
    return instance


def failing(error, times):
    """A write that raises ``error`` on its first ``times`` calls, then succeeds."""
    calls = []

    def write():
        calls.append(error)
        if len(calls) <= times:
            raise error

    return write, calls


@pytest.mark.parametrize(
    "error",
    [IntegrityError("CONSTRAINT `result` failed"), DataError("value too long")],
    ids=["IntegrityError", "DataError"],
)
def test_a_write_the_database_refuses_is_raised_at_once_not_retried_as_an_outage(worker, error):
    write, calls = failing(error, times=1)
    with pytest.raises(type(error)):
        worker._write_outcomes(write)
    assert len(calls) == 1
    assert worker.backoffs == []


def test_a_write_that_meets_an_outage_is_tried_again_with_backoff(worker):
    write, calls = failing(OperationalError("server closed the connection"), times=2)
    worker._write_outcomes(write)
    assert len(calls) == 3
    assert worker.backoffs == [OperationalError, OperationalError]


def test_an_outage_longer_than_the_tries_is_raised(worker):
    write, calls = failing(OperationalError("down"), times=OUTCOME_WRITE_ATTEMPTS)
    with pytest.raises(OperationalError):
        worker._write_outcomes(write)
    assert len(calls) == OUTCOME_WRITE_ATTEMPTS
