"""The public API: ``from django_cronqueue import jobs``.

``jobs.job``, ``jobs.cron``, ``jobs.CronRun``, ``jobs.enqueue``, ``jobs.aenqueue``,
``jobs.enqueue_on_commit``, ``jobs.enqueue_many``, ``jobs.tick``, ``jobs.exponential``,
``jobs.UnknownJob``, ``jobs.InvalidPayload`` and ``jobs.TickResult``; control of running work:
``jobs.current``, ``jobs.JobContext``, ``jobs.cancel``, ``jobs.acancel``,
``jobs.JobCancelled``, ``jobs.Snooze``, ``jobs.Discard``, ``jobs.pause`` and ``jobs.resume``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.apps import apps

from .cron.spec import CronRun
from .definitions.backoff import exponential
from .definitions.registry import JobDefinition
from .enqueueing.decorators import JobHandle, cron, job
from .exceptions import (
    ChildDied,
    DecryptionError,
    Discard,
    InvalidPayload,
    JobCancelled,
    LeaseLost,
    Snooze,
    SoftTimeLimitExceeded,
    TimeLimitExceeded,
    UnknownJob,
)
from .running.context import JobContext, current
from .worker.results import TickResult

if TYPE_CHECKING:
    from .enqueueing.workflows import Chain, Group, Signature
    from .lifecycle import Cancellation
    from .models import Batch, Job, Pause

__all__ = [
    "Batch",
    "Chain",
    "ChildDied",
    "CronRun",
    "DecryptionError",
    "Discard",
    "Group",
    "InvalidPayload",
    "JobCancelled",
    "JobContext",
    "JobDefinition",
    "JobHandle",
    "LeaseLost",
    "Signature",
    "Snooze",
    "SoftTimeLimitExceeded",
    "TickResult",
    "TimeLimitExceeded",
    "UnknownJob",
    "acancel",
    "aenqueue",
    "cancel",
    "chain",
    "cron",
    "current",
    "enqueue",
    "enqueue_many",
    "enqueue_on_commit",
    "exponential",
    "group",
    "job",
    "pause",
    "resume",
    "set_weight",
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
    dedupe_for: dt.timedelta | None = None,
    **arguments: Any,
) -> Job:
    """Enqueue one run of ``job`` (its name or handle) with ``payload``, or with keyword
    arguments (``jobs.enqueue(send_receipt, order_id=1)``); see
    ``django_cronqueue.enqueueing.enqueue``."""
    from .enqueueing.enqueue import enqueue as _enqueue

    return _enqueue(
        job,
        _payload_or_arguments("enqueue", job, payload, arguments),
        run_at=run_at,
        delay=delay,
        dedupe_key=dedupe_key,
        priority=priority,
        queue=queue,
        dedupe_for=dedupe_for,
    )


def enqueue_on_commit(
    job: str | JobDefinition,
    payload: Mapping[str, Any] | None = None,
    *,
    using: str | None = None,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    dedupe_for: dt.timedelta | None = None,
    **arguments: Any,
) -> None:
    """``jobs.enqueue``, checked now but written when the transaction on the site's
    database ``using`` (``default`` when None) commits; a rollback drops it. For a queue
    in a database of its own (``CRONQUEUE["DATABASE"]``); see
    ``django_cronqueue.enqueueing.on_commit``."""
    from .enqueueing.on_commit import enqueue_on_commit as _enqueue_on_commit

    _enqueue_on_commit(
        job,
        _payload_or_arguments("enqueue_on_commit", job, payload, arguments),
        using=using,
        run_at=run_at,
        delay=delay,
        dedupe_key=dedupe_key,
        priority=priority,
        queue=queue,
        dedupe_for=dedupe_for,
    )


def _payload_or_arguments(
    verb: str, job: object, payload: Mapping[str, Any] | None, arguments: dict[str, Any]
) -> Mapping[str, Any] | None:
    """The payload of ``jobs.<verb>(job, payload)`` or ``jobs.<verb>(job, **arguments)``."""
    if not arguments:
        return payload
    if payload is not None:
        raise TypeError(
            f"jobs.{verb}({_job_name(job)!r}, ...) got a payload dict and keyword "
            f"arguments ({', '.join(arguments)}): pass one or the other."
        )
    return arguments


def _job_name(job: object) -> str:
    return job.name if isinstance(job, JobDefinition) else str(job)


async def aenqueue(
    job: str | JobDefinition, payload: Mapping[str, Any] | None = None, **options: Any
) -> Job:
    """``jobs.enqueue`` for async code (run in a thread by ``sync_to_async``)."""
    return await sync_to_async(enqueue)(job, payload, **options)


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
    from .enqueueing.enqueue import enqueue_many as _enqueue_many

    return _enqueue_many(job, payloads, run_at=run_at, delay=delay, priority=priority, queue=queue)


def tick(now: dt.datetime | None = None, queues: Sequence[str] | None = None) -> TickResult:
    """Run one tick in this process (handlers inline); returns TickResult."""
    from .worker.tick import tick as _tick

    housekeeping = apps.get_app_config("django_cronqueue").housekeeping  # type: ignore[attr-defined]
    return _tick(now=now, queues=queues, housekeeping=housekeeping)


def cancel(job: Job | int, reason: str = "", *, by: str = "") -> Cancellation:
    """Cancel a job (its row or id): a pending one becomes ``cancelled`` at once; a
    running one's handler is asked to stop (``jobs.current().cancel_requested``), and if
    it then raises, the row ends ``cancelled``; a finished one is left as it is. The
    result is true when something changed, and its ``message`` says what."""
    from .lifecycle import cancel_job
    from .models import Job as JobModel

    row = job if isinstance(job, JobModel) else _job_row(job)
    return cancel_job(row, reason=reason, by=by)


async def acancel(job: Job | int, reason: str = "", *, by: str = "") -> Cancellation:
    """``jobs.cancel`` for async code (run in a thread by ``sync_to_async``)."""
    return await sync_to_async(cancel)(job, reason, by=by)


def _job_row(job_id: object) -> Job:
    from .conf import database_alias
    from .models import Job as JobModel

    if isinstance(job_id, bool) or not isinstance(job_id, (int, str)):
        raise TypeError(f"jobs.cancel() takes a Job or a job id, got {job_id!r}.")
    return JobModel.objects.using(database_alias()).get(pk=job_id)


def pause(
    queue: str | None = None,
    name: str | JobDefinition | None = None,
    until: dt.datetime | None = None,
    reason: str = "",
    *,
    by: str = "",
) -> Pause:
    """Pause a queue or a job name: its pending jobs are not claimed until ``resume()``
    or ``until``; see ``django_cronqueue.operations.pauses``."""
    from .operations.pauses import pause as _pause

    return _pause(queue=queue, name=name, until=until, reason=reason, by=by)


def resume(queue: str | None = None, name: str | JobDefinition | None = None) -> bool:
    """End a pause and wake idle workers. False when it was not paused."""
    from .operations.pauses import resume as _resume

    return _resume(queue=queue, name=name)


def set_weight(queue: str, key: str, weight: int | None) -> None:
    """Give the fair key ``key`` of ``queue`` ``weight`` turns to another key's 1 (1 to
    1000; None: back to 1); see ``django_cronqueue.operations.fair_shares``."""
    from .operations.fair_shares import set_weight as _set_weight

    _set_weight(queue, key, weight)


def chain(*signatures: Signature) -> Chain:
    """``jobs.chain(a.s(...), b.s(...)).enqueue()``: each job waits for the one before
    it; see ``django_cronqueue.enqueueing.workflows``."""
    from .enqueueing.workflows import Chain

    return Chain(*signatures)


def group(signatures: Iterable[Signature]) -> Group:
    """``jobs.group([...]).then(sig).finally_(sig).enqueue()`` -> ``jobs.Batch``."""
    from .enqueueing.workflows import Group

    return Group(signatures)


def __getattr__(name: str) -> Any:
    if name == "Batch":  # the model, once the app registry is ready
        from .models import Batch as BatchModel

        return BatchModel
    if name in ("Chain", "Group", "Signature"):  # workflows: loaded when first used
        from .enqueueing import workflows

        return getattr(workflows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
