"""Hostile handlers: whatever a handler does, the worker survives, the row records a
bounded, readable error and the other jobs are unaffected (on every database).

tests/db/worker/test_tick.py::test_system_exit_in_a_handler_is_a_failure_not_an_exit covers
SystemExit under ``jobs.tick()``; here everything runs in one real ``runjobs`` process
with a single slot, so a slot thread that died would stop all the work behind it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from django.db import connection

from django_cronqueue import jobs
from django_cronqueue.models import Job
from django_cronqueue.values import error_text as errors
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import log_records, marks, postgres_only, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# name, payload, status, what last_error starts with, result
TIMED_OUT = "TimeLimitExceeded: Job rel.hostile.hangs #"
HOSTILE = [
    ("rel.hostile.system_exit", {}, "failed", "SystemExit: the handler called sys.exit", None),
    ("rel.hostile.keyboard_interrupt", {}, "failed", "KeyboardInterrupt", None),
    ("rel.hostile.base_exception", {}, "failed", "Doom: a BaseException subclass", None),
    ("rel.hostile.async_system_exit", {}, "failed", "SystemExit: 4", None),
    ("rel.hostile.hangs", {"seconds": 4}, "failed", TIMED_OUT, None),
    ("rel.hostile.deep_recursion", {}, "failed", "RecursionError: maximum recursion depth", None),
    ("rel.hostile.huge_message", {"characters": 5_000_000}, "failed", "ValueError: €€€€", None),
    ("rel.hostile.surrogate_message", {}, "failed", "ValueError: a lone surrogate \\ud800", None),
    ("rel.hostile.nul_message", {}, "failed", "ValueError: a NUL \\x00 in the message", None),
    ("rel.hostile.unprintable", {}, "failed", "Unprintable: <unprintable exception>", None),
    ("rel.hostile.exiting_on_failed", {}, "failed", "ValueError: fails, then its on_failed", None),
    ("rel.hostile.prints", {"megabytes": 8}, "succeeded", "", None),
    ("rel.hostile.returns", {"kind": "json"}, "succeeded", "", rel.RETURNED["json"]()),
    *[
        ("rel.hostile.returns", {"kind": kind}, "succeeded", "", None)
        for kind in ["set", "object", "nan", "nul", "surrogate", "deep", "huge"]
    ],
]


def test_hostile_handlers_leave_the_worker_and_the_other_jobs_unharmed(runjobs):
    hostile, normal = [], []
    for index, (name, payload, *_) in enumerate(HOSTILE):
        hostile.append(jobs.enqueue(name, payload))
        normal.append(jobs.enqueue(rel.tracked, {"key": f"ok-{index}"}))
    worker = runjobs.start("--concurrency", "1", settings={"LEASE": 1, "POLL_INTERVAL": 0.2})
    wait_until(
        lambda: not Job.objects.filter(status__in=["pending", "running"]).exists(),
        timeout=90,
        interval=0.2,
    )
    assert worker.poll() is None, runjobs.log(worker)  # still alive

    for job, (name, payload, status, error, result) in zip(hostile, HOSTILE, strict=True):
        row = Job.objects.get(pk=job.pk)
        context = (name, payload, row.status, row.last_error[:300])
        assert row.status == status, context
        assert row.last_error.startswith(error), context
        assert len(row.last_error) <= errors.MAX_ERROR_CHARS, context
        assert len(row.traceback) <= errors.MAX_TRACEBACK_CHARS, context
        assert row.result == result, context
        if status == "failed" and name != "rel.hostile.hangs":
            assert row.traceback.startswith("Traceback (most recent call last):"), context
    huge = Job.objects.get(pk=hostile[6].pk)
    assert "characters cut" in huge.last_error and "characters cut" in huge.traceback

    assert Job.objects.filter(pk__in=[job.pk for job in normal], status="succeeded").count() == len(
        normal
    )
    ended = sorted(key for key, _, _ in marks("end"))
    assert ended == sorted(f"ok-{i}" for i in range(len(HOSTILE)))

    log = runjobs.log(worker)
    assert "Exception in thread" not in log  # no slot thread died
    assert len(log) > 8 * 1024 * 1024  # the printed megabytes went to stdout
    assert runjobs.stop(worker) == 0, log[-3000:]
    assert "on_failed of job rel.hostile.exiting_on_failed" in log
    levels = {level for level, _ in log_records(log)}
    assert "CRITICAL" not in levels


# --- handlers past their timeout: a bounded worker --------------------------------


def sessions_named(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads line for process {pid}")


@postgres_only
def test_handlers_past_their_timeout_never_take_the_worker_past_its_threads_and_sessions(runjobs):
    """Six handlers that overrun their 1 s timeout, one slot. The slot keeps the first
    until it returns and takes no new work meanwhile, so the worker never holds more than
    its bound of threads and sessions: the main thread, the slot, the heartbeat and the
    listener, each with one connection (docs/workers.md). Every sample is checked, from
    start-up to the end: the bound is a guarantee, whatever the timing."""
    concurrency = 1
    bound = concurrency + 3
    name = f"cronqueue-bound-{os.getpid()}"
    hung = [jobs.enqueue(rel.hangs_until_released, {"key": f"h{index}"}) for index in range(6)]
    worker = runjobs.start(
        "--concurrency",
        str(concurrency),
        settings={"LEASE": 1, "POLL_INTERVAL": 0.2},
        env={"PGAPPNAME": name},
    )
    samples: list[tuple[int, int]] = []

    def sample() -> tuple[int, int]:
        samples.append((sessions_named(name), threads_of(worker.pid)))
        return samples[-1]

    # The first handler overran: it keeps its lease (and its slot) until it returns.
    wait_until(lambda: sample() and marks("timed_out"), timeout=30)
    for _ in range(20):  # a few more heartbeats: it still holds the only slot
        sample()
        time.sleep(0.1)
    assert max(session for session, _ in samples) <= bound, samples
    assert max(thread for _, thread in samples) <= bound, samples
    assert [key for key, _, _ in marks("start")] == ["h0"], runjobs.log(worker)
    assert [key for key, _, _ in marks("timed_out")] == ["h0:1"]

    SideEffect.objects.create(key="release", pid=os.getpid())
    wait_until(
        lambda: sample() and not Job.objects.filter(status__in=["pending", "running"]).exists(),
        timeout=60,
    )
    sample()
    assert max(session for session, _ in samples) == bound, samples  # all were counted
    assert max(session for session, _ in samples) <= bound, samples
    assert max(thread for _, thread in samples) <= bound, samples
    statuses = dict(Job.objects.values_list("payload__key", "status"))
    assert statuses == {"h0": "failed", **{f"h{index}": "succeeded" for index in range(1, 6)}}
    log = runjobs.log(worker)
    assert f"Job rel.hostile.hangs_until_released #{hung[0].pk} ran past its timeout" in log
    assert runjobs.stop(worker) == 0, log
