"""The process pool's forker (the one child that forks the others) killed under a working
``runjobs``: the worker gives back what it claimed, records the runs that died with it,
and exits with status 4 for its supervisor, instead of living on with dead slot threads."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.reliability import jobs as rel

from .conftest import marks, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE": 5, "POLL_INTERVAL": 0.2}


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_worker_whose_forker_dies_gives_back_its_jobs_and_exits_with_status_4(runjobs):
    jobs.enqueue_many(rel.tracked, [{"key": f"j{i}", "seconds": 1.0} for i in range(8)])
    worker = runjobs.start("--pool", "processes", "--concurrency", "2", settings=FAST)
    wait_until(lambda: len(marks("start")) >= 2, timeout=120)
    [forker] = children(worker.pid)  # the worker's one child; the job children are its
    os.kill(forker, signal.SIGKILL)

    assert worker.wait(120) == 4, runjobs.log(worker)
    log = runjobs.log(worker)
    assert "the process pool's forker" in log and "is gone" in log
    assert "Exception in thread" not in log  # no slot thread died
    # The runs that died with the forker are recorded, the claimed jobs were given back:
    # nothing waits for a lease to expire.
    assert not Job.objects.filter(status="running").exists()

    again = runjobs.start("--pool", "processes", "--burst", settings=FAST)
    assert again.wait(240) == 0, runjobs.log(again)
    assert Job.objects.filter(status="succeeded").count() == 8
