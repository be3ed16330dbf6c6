"""Pausing a queue or a job name: ``jobs.pause()`` and ``jobs.resume()``.

A pause is a ``Pause`` row. The claim skips the pending jobs of paused queues and names
in its own statement (``claiming.base.NOT_PAUSED``), so nothing is claimed and given
back; running jobs finish, enqueue still works and cron still materializes. ``until``
ends a pause by itself (the claim compares it with its ``now``); housekeeping deletes
pauses that ended. Resuming wakes idle PostgreSQL workers.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from ..conf import database_alias
from ..db.notify import wake_workers
from ..models import Pause
from ..values.error_text import MAX_ERROR_CHARS, clean_text
from ..values.validation import MAX_NAME_LENGTH, MAX_QUEUE_LENGTH

__all__ = ["active_pauses", "delete_ended_pauses", "pause", "resume"]

logger = logging.getLogger("django_cronqueue")

MAX_PAUSED_BY_CHARS = 150  # Pause.created_by


def _pauses() -> QuerySet[Pause]:
    return Pause.objects.using(database_alias())


def _target(queue: str | None, name: object | None) -> tuple[str, str]:
    """(queue, name) of a pause, exactly one of them non-empty; ``name`` may be a job
    handle. Raises ValueError naming what is wrong."""
    job_name = getattr(name, "name", name)
    if (queue is None) == (job_name is None):
        raise ValueError("Pass exactly one of queue= and name= (a queue or a job name).")
    if queue is not None:
        if not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_LENGTH:
            raise ValueError(
                f"queue={queue!r}: a queue is a non-empty string of at most "
                f"{MAX_QUEUE_LENGTH} characters."
            )
        return queue, ""
    if not isinstance(job_name, str) or not job_name or len(job_name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"name={job_name!r}: a job name is a non-empty string of at most "
            f"{MAX_NAME_LENGTH} characters."
        )
    return "", job_name


def pause(
    queue: str | None = None,
    name: object | None = None,
    until: dt.datetime | None = None,
    reason: str = "",
    *,
    by: str = "",
) -> Pause:
    """Pause a queue or a job name (its name or handle): no worker claims its pending
    jobs until ``resume()`` or, when given, ``until`` (aware). Pausing what is already
    paused replaces that pause's ``until`` and reason. Returns the ``Pause`` row."""
    queue_value, name_value = _target(queue, name)
    if until is not None and (not isinstance(until, dt.datetime) or timezone.is_naive(until)):
        raise ValueError(f"until={until!r}: pass an aware datetime, or None for no end.")
    pause_row, _ = _pauses().update_or_create(
        queue=queue_value,
        name=name_value,
        defaults={
            "until": until,
            "reason": clean_text(reason, MAX_ERROR_CHARS),
            "created_by": clean_text(by, MAX_PAUSED_BY_CHARS),
            "created_at": timezone.now(),
        },
    )
    logger.info(
        "Paused %s%s%s",
        pause_row,
        f" until {until.isoformat()}" if until else "",
        f": {reason}" if reason else "",
    )
    return pause_row


def resume(queue: str | None = None, name: object | None = None) -> bool:
    """End the pause of a queue or a job name and wake idle workers. False when it was
    not paused."""
    queue_value, name_value = _target(queue, name)
    using = database_alias()
    with transaction.atomic(using=using):
        deleted, _ = _pauses().filter(queue=queue_value, name=name_value).delete()
        if deleted:
            now = timezone.now()
            wake_workers(using, [now], now)
    if deleted:
        logger.info("Resumed %s", f"queue {queue_value}" if queue_value else f"job {name_value}")
    return bool(deleted)


def active_pauses(now: dt.datetime | None = None) -> list[Pause]:
    """The pauses in force at ``now``."""
    now = now or timezone.now()
    return list(_pauses().filter(Q(until__isnull=True) | Q(until__gt=now)))


def delete_ended_pauses(now: dt.datetime) -> int:
    """Delete the pauses whose ``until`` has passed (the claim ignores them already)."""
    deleted, _ = _pauses().filter(until__lte=now).delete()
    return deleted
