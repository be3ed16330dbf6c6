"""The public API: ``from django_cronqueue import jobs``.

``jobs.job``, ``jobs.cron``, ``jobs.CronRun``,
``jobs.enqueue``, ``jobs.enqueue_many``, ``jobs.tick``, ``jobs.exponential``,
``jobs.UnknownJob``, ``jobs.InvalidPayload`` and ``jobs.TickResult``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.apps import apps

from .backoff import exponential
from .cronspec import CronRun
from .decorators import JobHandle, cron, job
from .exceptions import InvalidPayload, LeaseLost, UnknownJob
from .registry import JobDefinition
from .results import TickResult

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "CronRun",
    "InvalidPayload",
    "JobDefinition",
    "JobHandle",
    "LeaseLost",
    "TickResult",
    "UnknownJob",
    "cron",
    "enqueue",
    "enqueue_many",
    "exponential",
    "job",
    "tick",
]


def enqueue(
    job: str | JobDefinition,
    payload: Mapping[str, Any] | None = None,
    *,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> Job:
    """Enqueue one run of ``job`` (its name or handle); see ``django_cronqueue.enqueue``."""
    from .enqueue import enqueue as _enqueue

    return _enqueue(
        job,
        payload,
        run_at=run_at,
        delay=delay,
        dedupe_key=dedupe_key,
        priority=priority,
        queue=queue,
    )


def enqueue_many(
    job: str | JobDefinition,
    payloads: Iterable[Mapping[str, Any]],
    *,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> list[Job]:
    """Enqueue one run per payload, one INSERT per batch."""
    from .enqueue import enqueue_many as _enqueue_many

    return _enqueue_many(job, payloads, run_at=run_at, delay=delay, priority=priority, queue=queue)


def tick(now: dt.datetime | None = None, queues: Sequence[str] | None = None) -> TickResult:
    """Run one tick in this process (handlers inline); returns TickResult."""
    from .ticks import tick as _tick

    housekeeping = apps.get_app_config("django_cronqueue").housekeeping  # type: ignore[attr-defined]
    return _tick(now=now, queues=queues, housekeeping=housekeeping)
