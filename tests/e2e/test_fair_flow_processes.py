"""Turns hold with flow control across workers (SPEC section 15): three real ``runjobs``
processes of two slots each drain a fair queue of a ``limit_by`` job (``concurrency=2``
per region) where one tenant has a backlog of 300 due jobs, ten consecutive jobs per
region, and eight other tenants two jobs each, enqueued after it.

Without turns every small tenant's job would wait for the whole backlog: the big
tenant's rows come first in claim order, and its regions are never all saturated at
once. With them each small tenant waits about one job per tenant with due work. Each
run marks its start and end (``SideEffect``): a run lies inside its claim, so the runs
of a region that overlap are never more than its running rows, which the limit bounds.
(The rows' ``started_at`` is the claim's clock reading, taken before it counts under the
lock: a claim may read its clock before another job's end is written and still count
that job as ended, so those intervals may overlap one more than the limit allows.)
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict

import pytest
from django.utils import timezone

from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job, JobStatus
from tests.fair_jobs import definitions as fair
from tests.processes import Runjobs, wait_until
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

SMALL_KEYS = [f"small-{index}" for index in range(8)]
BIG_JOBS = 300
PER_REGION = 2


@pytest.fixture
def regional():
    handles = {handle.name: handle for handle in fair.define_flow()}
    yield handles[fair.REGIONAL]
    for name in fair.FLOW:
        registry.unregister(name)


def max_overlap(intervals) -> int:
    """The most [start, end] intervals that overlap at one instant (an end first at a tie)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def runs_by_region() -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    marks = dict(SideEffect.objects.values_list("key", "created_at"))
    by_region = defaultdict(list)
    for key, started in marks.items():
        if key.startswith("start:"):
            run = key.removeprefix("start:")
            by_region[run.split("|")[0]].append((started, marks[f"end:{run}"]))
    return by_region


def test_small_tenants_start_before_a_limited_backlog_is_drained_within_the_limit(
    regional, tmp_path
):
    start = timezone.now() - dt.timedelta(hours=1)
    regional.using(run_at=start).enqueue_many(
        [{"tenant": "big", "region": f"r{n // 10}", "n": n} for n in range(BIG_JOBS)]
    )
    later = start + dt.timedelta(minutes=30)
    regional.using(run_at=later).enqueue_many(
        [{"tenant": key, "region": f"s-{key}", "n": n} for key in SMALL_KEYS for n in range(2)]
    )
    total = BIG_JOBS + 2 * len(SMALL_KEYS)
    runjobs = Runjobs(tmp_path, "tests.fair_jobs.settings")
    try:
        workers = [
            runjobs.start(
                "--queue", fair.QUEUE, "--concurrency", "2", settings={"POLL_INTERVAL": 0.1}
            )
            for _ in range(3)
        ]
        done = Job.objects.filter(status=JobStatus.SUCCEEDED)
        try:
            wait_until(lambda: done.count() == total, timeout=600, interval=0.2)
        except AssertionError:
            pytest.fail(f"{done.count()} of {total} done:\n{runjobs.logs()}")
        for worker in workers:
            assert runjobs.stop(worker) == 0, runjobs.logs()
    finally:
        runjobs.stop_all()

    logs = runjobs.logs()
    trouble = r"database (error|unavailable)|Discarded|Traceback|(?i:deadlock)"
    assert not re.search(trouble, logs), logs
    rows = list(Job.objects.values_list("fair_key", "status", "attempts", "started_at"))
    assert len(rows) == total
    assert {(status, attempts) for _, status, attempts, _ in rows} == {(JobStatus.SUCCEEDED, 1)}
    # The small tenants all started while most of the backlog still waited.
    last_small = max(started for key, _, _, started in rows if key != "big")
    big_before = sum(1 for key, _, _, started in rows if key == "big" and started < last_small)
    assert big_before <= 120, big_before  # about two turns of nine tenants, from six slots
    # The limit: never more than two runs of a region at once.
    by_region = runs_by_region()
    assert sum(len(runs) for runs in by_region.values()) == total
    overlaps = {region: max_overlap(runs) for region, runs in by_region.items()}
    assert max(overlaps.values()) <= PER_REGION, overlaps
