"""Priority aging on every vendor (SPEC section 15): a waiting job ranks one priority
higher for every EVERY seconds past AFTER, so a low-priority job under a steady stream
of higher-priority ones starts within AFTER + EVERY x (highest - its priority); the
stored priority never changes, and without the setting the order is the plain one.

Time is injected (``claim_due(now, ...)``)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.claiming.aging import effective_priority
from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

AGING = {"PRIORITY_AGING": {"AFTER": 60, "EVERY": 30}}
T0 = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def enqueue(key: str, priority: int, run_at: dt.datetime) -> Job:
    return jobs.enqueue(test_jobs.record, {"key": key}, priority=priority, run_at=run_at)


def claim_keys(now: dt.datetime, limit: int = 1) -> list[str]:
    return [job.payload["key"] for job in claim_due(now, queues=None, limit=limit, worker_id="w")]


@pytest.mark.parametrize(
    ("waited", "expected"),
    [(0, 0), (60, 0), (89.9, 0), (90, 1), (150, 3), (-30, 0)],
)
def test_effective_priority_adds_one_per_every_past_after(waited, expected):
    assert effective_priority(2, T0, at(waited), (60, 30)) == 2 + expected


def test_without_the_setting_the_higher_priority_goes_first_however_old_the_other():
    enqueue("old-low", 0, at(-3600))
    enqueue("new-high", 5, at(0))
    assert claim_keys(at(1)) == ["new-high"]


@override_settings(CRONQUEUE=AGING)
def test_an_old_low_priority_job_outranks_a_newer_higher_one():
    enqueue("old-low", 0, at(-300))  # waited 300 s: 60 + 8 x 30, ranks as 8
    enqueue("new-high", 5, at(0))
    assert claim_keys(at(0)) == ["old-low"]
    assert Job.objects.get(payload__key="old-low").priority == 0  # stored as it was


@override_settings(CRONQUEUE=AGING)
def test_under_a_steady_stream_of_higher_priority_a_job_starts_within_the_bound():
    enqueue("low", 0, at(0))
    highest = 3
    started = None
    for second in range(0, 400, 10):  # a new priority-3 job every 10 s, one claim each
        enqueue(f"high-{second}", highest, at(second))
        if claim_keys(at(second)) == ["low"]:
            started = second
            break
    assert started is not None
    assert started <= 60 + 30 * highest


@override_settings(CRONQUEUE=AGING)
def test_a_batch_takes_the_best_aged_rows_of_every_priority():
    enqueue("p0-old", 0, at(-600))  # ranks 18
    enqueue("p9-new", 9, at(0))  # ranks 9
    enqueue("p5-old", 5, at(-120))  # ranks 7
    enqueue("p0-new", 0, at(0))  # ranks 0
    assert claim_keys(at(0), limit=3) == ["p0-old", "p9-new", "p5-old"]
    assert claim_keys(at(0), limit=3) == ["p0-new"]


@override_settings(CRONQUEUE=AGING)
def test_aging_leaves_paused_and_future_jobs_alone():
    enqueue("future", 0, at(600))
    jobs.pause(name=test_jobs.slow_record.name)
    jobs.enqueue(test_jobs.slow_record, {"key": "paused", "seconds": 0}, run_at=at(-3600))
    assert claim_keys(at(0)) == []
