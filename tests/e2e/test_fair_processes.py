"""Turns across workers (SPEC section 15): two real ``runjobs --burst`` processes of two
slots each drain a fair queue where one key has a backlog of 300 due jobs and ten other
keys two jobs each, enqueued after it. Without turns every small key's job would wait
for the 300; with them each waits about one job per key with due work."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job, JobStatus
from tests.fair_jobs import definitions as fair
from tests.processes import Runjobs

pytestmark = pytest.mark.django_db(transaction=True)

SMALL_KEYS = [f"small-{index}" for index in range(10)]


@pytest.fixture
def by_tenant():
    handles = fair.define()
    yield handles[0]
    for name in (fair.BY_TENANT, fair.BY_REGION, fair.PLAIN):
        registry.unregister(name)


def test_small_keys_start_long_before_a_backlog_is_drained_by_two_workers(by_tenant, tmp_path):
    start = timezone.now() - dt.timedelta(hours=1)
    by_tenant.using(run_at=start).enqueue_many([{"tenant": "big", "n": n} for n in range(300)])
    later = start + dt.timedelta(minutes=30)
    by_tenant.using(run_at=later).enqueue_many(
        [{"tenant": key, "n": n} for key in SMALL_KEYS for n in range(2)]
    )
    runjobs = Runjobs(tmp_path, "tests.fair_jobs.settings")
    try:
        workers = [
            runjobs.start("--burst", "--queue", fair.QUEUE, "--concurrency", "2") for _ in range(2)
        ]
        for worker in workers:
            assert worker.wait(300) == 0, runjobs.logs()
    finally:
        runjobs.stop_all()

    logs = runjobs.logs()
    assert not re.search(r"database (error|unavailable)|Discarded", logs), logs
    rows = list(Job.objects.values_list("fair_key", "status", "attempts", "started_at"))
    assert len(rows) == 320
    assert {(status, attempts) for _, status, attempts, _ in rows} == {
        (JobStatus.SUCCEEDED, 1)
    }  # every job ran, once
    last_small = max(started for key, _, _, started in rows if key != "big")
    big_before = sum(1 for key, _, _, started in rows if key == "big" and started < last_small)
    # Two turns of eleven keys, whatever the claims' interleaving: far from 300.
    assert big_before <= 40, big_before
