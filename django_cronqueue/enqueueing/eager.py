"""Eager mode, for tests: ``CRONQUEUE = {"EAGER": True}``.

With eager mode on, ``jobs.enqueue`` (and ``enqueue_many``, ``handle.enqueue``, the
Django Tasks backend, ``CronSchedule.run_now``) checks the payload and writes the row
as usual, then at once claims that row and runs its handler in the calling thread,
through the same code a worker uses: the row ends ``succeeded`` or ``failed``, signals
are sent and ``on_failed`` is called. A failing job runs all its attempts back to back,
without the backoff delays. ``run_at``/``delay`` are ignored: the job runs now. A handler
that raises ``jobs.Snooze`` leaves its row pending, due at the snooze's end.
Inside ``transaction.atomic()`` the handler runs inside the caller's transaction.

Not for production: it turns every enqueue into a synchronous call.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence

from django.utils import timezone

from ..claiming import claim_one
from ..conf import database_alias
from ..history import counting
from ..lifecycle import Outcome
from ..models import Job, JobStatus
from ..running.execution import run_claimed


def worker_id() -> str:
    return f"eager:{socket.gethostname()}:{os.getpid()}"[:100]


def run_eagerly(job: Job) -> Job:
    """Run the handler of a just-enqueued pending row until it succeeds or fails for
    good. Returns the row, refreshed."""
    using = database_alias()
    for _ in range(max(job.max_attempts, 1)):
        claimed = claim_one(job.pk, worker_id=worker_id())
        if claimed is None:  # not pending any more (e.g. the handler cancelled it)
            break
        with counting.untrusted_clock():  # this host's clock, never measured
            _, outcome = run_claimed(claimed, timezone.now)
        if outcome == Outcome.SNOOZED:  # it asked to run later: it stays pending till then
            break
        status = Job.objects.using(using).filter(pk=job.pk).values_list("status", flat=True)
        if status.first() != JobStatus.PENDING:
            break
    job.refresh_from_db(using=using)
    return job


def run_many_eagerly(rows: Sequence[Job], now: dt.datetime) -> list[Job]:
    """``run_eagerly`` for rows from ``bulk_create``. On MySQL (no RETURNING) their ids
    are unknown, so they are found again by name and creation time."""
    if not rows:
        return []
    if any(row.pk is None for row in rows):
        rows = list(
            Job.objects.using(database_alias())
            .filter(name=rows[0].name, created_at=now, status=JobStatus.PENDING)
            .order_by("id")
        )
    return [run_eagerly(row) for row in rows]
