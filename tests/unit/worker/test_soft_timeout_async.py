"""An ``async def`` handler's soft_timeout (every pool): its task is cancelled at the
soft limit and the call fails with jobs.SoftTimeLimitExceeded."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from django_cronqueue import jobs
from django_cronqueue.running.cancellable import run_cancellable
from django_cronqueue.running.context import JobContext


def test_an_async_handler_past_its_soft_timeout_gets_soft_time_limit_exceeded():
    seen = []

    async def slow() -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cleanup")
            raise

    context = JobContext(job_id=1, name="t.slow", attempt=1, scheduled_for=None, payload={})
    with pytest.raises(jobs.SoftTimeLimitExceeded, match=r"soft time limit of 0\.2s"):
        async_to_sync(run_cancellable)(context, slow, (), {}, 0.2)
    assert seen == ["cleanup"]


def test_an_async_handler_within_its_soft_timeout_returns():
    async def quick() -> int:
        return 7

    context = JobContext(job_id=1, name="t.quick", attempt=1, scheduled_for=None, payload={})
    assert async_to_sync(run_cancellable)(context, quick, (), {}, 5) == 7
