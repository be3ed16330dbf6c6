"""The claim a slot sends ahead (worker/claims.py): what happens to the successes its
statement was to write when it fails, and what a closed ``ClaimAhead`` leaves."""

import datetime as dt
import threading

import pytest
from django.db import OperationalError

from django_cronqueue.claiming import ClaimedJob, ClaimRequest
from django_cronqueue.execution import Call, Recorder
from django_cronqueue.worker.claims import Claim, ClaimAhead

NOW = dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc)


def claimed(job_id: int) -> ClaimedJob:
    return ClaimedJob(
        id=job_id,
        name="tests.noop",
        payload={},
        attempts=1,
        max_attempts=3,
        queue="default",
        priority=0,
        run_at=NOW,
        scheduled_for=None,
        created_at=NOW,
        token="t",
    )


def a_claim(succeeded: list[Call]) -> Claim:
    request = ClaimRequest(
        now=NOW, lease_until=NOW, token="t", worker_id="w", limit=10, names=["tests.noop"]
    )
    return Claim(request, True, succeeded, NOW, "cronqueue-slot-0", 0.0)


def test_a_failed_claim_puts_its_successes_back_for_the_next_statement():
    def fails(claim: Claim):
        raise OperationalError("server closed the connection unexpectedly")

    recorder = Recorder(lambda: NOW)
    success = Call(claimed(1), None)
    ahead = ClaimAhead("cronqueue-slot-0", fails, lambda: None)
    ahead.send(a_claim([success]))
    assert ahead.in_flight
    with pytest.raises(OperationalError):
        ahead.take(recorder)
    assert not ahead.in_flight
    assert recorder.pending == [success]
    assert ahead.close(recorder) is None


def test_closing_waits_for_the_claim_in_flight_and_hands_back_what_it_claimed():
    release = threading.Event()
    jobs = [claimed(2), claimed(3)]

    def waits(claim: Claim):
        release.wait(10)
        return jobs, {1}

    recorder = Recorder(lambda: NOW)
    ahead = ClaimAhead("cronqueue-slot-0", waits, lambda: None)
    claim = a_claim([Call(claimed(1), None)])
    ahead.send(claim)
    threading.Timer(0.05, release.set).start()
    assert ahead.close(recorder) == (claim, (jobs, {1}))
    assert recorder.pending == []
