"""Concurrency across processes.

Already proven, and run on MariaDB as on PostgreSQL and SQLite (the test modules take
the database from CRONQUEUE_TEST_DB): 8 processes enqueueing the same dedupe keys create
one job per key (tests/db/enqueueing/test_dedupe_concurrency.py), and six processes ticking the same
cron schedules create and run each occurrence exactly once
(tests/e2e/test_cron_processes.py).
"""

from __future__ import annotations

import time

import pytest

from django_cronqueue import jobs
from django_cronqueue.models import Job, Worker
from tests.reliability import jobs as rel

from .conftest import marks, max_overlap, needs_server, wait_until


def test_max_overlap():
    assert max_overlap([]) == 0
    assert max_overlap([(0, 2), (1, 3), (2, 4)]) == 2  # an end and a start at 2 do not overlap
    assert max_overlap([(0, 10), (1, 2), (3, 4), (1.5, 3.5)]) == 3


@needs_server
@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_concurrency_cap_of_2_is_never_exceeded_across_4_worker_processes(runjobs):
    capped = 24
    workers = [
        runjobs.start("--concurrency", "2", settings={"POLL_INTERVAL": 0.1}) for _ in range(4)
    ]
    # All four are polling before any work exists, so no early starter takes it all.
    wait_until(lambda: Worker.objects.count() == 4, timeout=60)
    jobs.enqueue_many(rel.capped, [{"key": f"c{i}", "seconds": 0.25} for i in range(capped)])
    # Uncapped work beside it keeps every slot claiming all the time.
    jobs.enqueue_many(rel.tracked, [{"key": f"u{i}", "seconds": 0.01} for i in range(200)])
    peak_running = 0
    deadline = time.monotonic() + 120
    while Job.objects.filter(name="rel.capped", status="succeeded").count() < capped:
        assert time.monotonic() < deadline, "the capped jobs did not finish"
        running = Job.objects.filter(name="rel.capped", status="running").count()
        peak_running = max(peak_running, running)
        time.sleep(0.02)
    wait_until(lambda: not Job.objects.exclude(status="succeeded").exists(), timeout=60)
    for worker in workers:
        assert runjobs.stop(worker) == 0, runjobs.log(worker)

    starts = {key: (pid, at) for key, pid, at in marks("start") if key.startswith("c")}
    ends = {key: at for key, _, at in marks("end") if key.startswith("c")}
    assert len(starts) == len(ends) == capped
    overlap = max_overlap((starts[key][1], ends[key]) for key in starts)
    # The guarantee only: never more than the cap. How many ran at once below it, and
    # which processes won the claims, is scheduling.
    assert overlap <= 2
    assert peak_running <= 2
    assert set(Job.objects.filter(name="rel.capped").values_list("attempts", flat=True)) == {1}
