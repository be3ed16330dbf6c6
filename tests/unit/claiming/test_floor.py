"""claiming.floor.ClaimFloors: which claims start at the floor and where the floor goes.
Database-free; the claims themselves are tested in tests/db/claiming/test_floor.py."""

import datetime as dt

import pytest

from django_cronqueue.claiming import ClaimedJob, ClaimFloor
from django_cronqueue.claiming import floor as floor_module
from django_cronqueue.claiming.floor import ClaimFloors
from tests.testapp import jobs as test_jobs

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def claimed(job_id: int, *, priority: int = 0, seconds: int = 0, name: str = "") -> ClaimedJob:
    return ClaimedJob(
        id=job_id,
        name=name or test_jobs.record.name,
        payload={},
        attempts=1,
        max_attempts=4,
        queue="default",
        priority=priority,
        run_at=T0 + dt.timedelta(seconds=seconds),
        scheduled_for=None,
        created_at=T0,
        token="t",
    )


@pytest.fixture
def clock(monkeypatch):
    """The monotonic clock the floors read, moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(floor_module.time, "monotonic", lambda: now[0])
    return now


def after_a_full_claim(*jobs: ClaimedJob) -> ClaimFloors:
    """Floors while held, after the first claim (a full one) returned ``jobs``."""
    floors = ClaimFloors(full_every=1.0)
    floors.set_held(True)
    assert floors.take() is None
    floors.advance(None, list(jobs))
    return floors


def test_outside_a_hold_every_claim_is_a_full_one(clock):
    floors = ClaimFloors(full_every=1.0)
    assert floors.take() is None
    floors.advance(None, [claimed(1)])
    assert floors.take() is None


def test_while_held_claims_start_after_the_last_row_claimed(clock):
    floors = ClaimFloors(full_every=1.0)
    floors.set_held(True)
    assert floors.take() is None  # no floor yet: a full claim
    floors.advance(None, [claimed(3, seconds=1), claimed(7, seconds=2), claimed(5, seconds=2)])
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=2), 7)
    floors.advance(ClaimFloor(0, T0 + dt.timedelta(seconds=2), 7), [claimed(9, seconds=3)])
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=3), 9)


def test_a_full_claim_runs_every_interval_and_starts_the_floor_where_it_stopped(clock):
    floors = after_a_full_claim(claimed(9, seconds=30))
    clock[0] += 0.9
    assert floors.take() is not None
    clock[0] += 0.1
    assert floors.take() is None  # the interval is over: from the head again
    # That claim found a back-dated row and a more urgent one: the floor goes back to
    # the last row it claimed, so nothing after it is skipped.
    floors.advance(None, [claimed(2, priority=5, seconds=60), claimed(4, seconds=1)])
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=1), 4)


def test_a_floor_claim_never_moves_the_floor_back(clock):
    floors = after_a_full_claim(claimed(9, seconds=30))
    at = floors.take()
    floors.advance(at, [claimed(4, seconds=1)])  # another slot's older floor
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=30), 9)


def test_lower_priorities_come_after_the_higher_ones_in_the_floor(clock):
    urgent, later = claimed(1, priority=5, seconds=9), claimed(2, priority=0, seconds=1)
    floors = after_a_full_claim(urgent, later)
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=1), 2)


def test_capped_jobs_leave_the_floor_alone(clock):
    """They come from the capped step, which reads rows the caps held back."""
    floors = ClaimFloors(full_every=1.0)
    floors.set_held(True)
    floors.take()
    capped = claimed(8, seconds=50, name=test_jobs.capped.name)
    floors.advance(None, [claimed(1, seconds=1), capped])
    assert floors.take() == ClaimFloor(0, T0 + dt.timedelta(seconds=1), 1)


def test_the_end_of_the_hold_drops_the_floor(clock):
    floors = after_a_full_claim(claimed(1))
    floors.set_held(False)
    assert floors.take() is None
    floors.set_held(True)
    assert floors.take() is None  # no floor left from before


def test_a_slow_full_claim_comes_back_less_often(clock):
    """It walks what the floor skips: at most a twentieth of the time goes to it."""
    floors = ClaimFloors(full_every=1.0)
    floors.set_held(True)
    assert floors.take() is None
    floors.advance(None, [claimed(1)], seconds=0.2)  # four seconds before the next
    clock[0] += 3.9
    assert floors.take() is not None
    clock[0] += 0.1
    assert floors.take() is None
    floors.advance(None, [], seconds=0.01)  # a quick one found nothing: the interval
    clock[0] += 1.0
    assert floors.take() is None
