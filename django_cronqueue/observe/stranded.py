"""Stranded jobs: due pending jobs whose name no live worker defines.

Names are the only link between a row and code: a job enqueued from a module the workers
never import (a ``tasks.py`` that ``CRONQUEUE["DISCOVER"]`` does not list, an app missing
from the workers' ``INSTALLED_APPS``) waits forever. Each worker records the names its
code defines on its row (``Worker.job_names``); the due pending rows of the other names
are stranded. Nothing is stranded while no live worker has recorded its names (no live
worker at all is a problem of its own; a worker of an older version records none).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Min

from ..models import Job, JobStatus, Worker
from .base import due_jobs, live_window, read_alias

#: At most this many stranded names are read (the longest waiting first).
STRANDED_SHOWN = 50


@dataclass
class StrandedName:
    name: str
    count: int  # its due pending rows
    oldest_run_at: dt.datetime
    waited_seconds: float  # by its oldest due pending row


def defined_names(now: dt.datetime, lease: float | None = None) -> set[str] | None:
    """The job names the live workers define, together; None when no live worker
    recorded its names."""
    since = now - dt.timedelta(seconds=live_window(lease))
    rows = (
        Worker.objects.using(read_alias())
        .filter(last_seen__gte=since)
        .values_list("job_names", flat=True)
    )
    recorded = [names for names in rows if isinstance(names, list)]
    if not recorded:
        return None
    return {name for names in recorded for name in names}


def stranded_names(
    now: dt.datetime, lease: float | None = None, limit: int = STRANDED_SHOWN
) -> list[StrandedName]:
    """The names of due pending jobs that no live worker defines, the longest waiting
    first: two queries (the workers, and one GROUP BY over the due rows of other names)."""
    defined = defined_names(now, lease)
    if defined is None:
        return []
    rows = (
        due_jobs(now)
        .exclude(name__in=defined)
        .order_by()
        .values_list("name")
        .annotate(count=Count("pk"), oldest=Min("run_at"))
    )
    found = [
        StrandedName(name, count, oldest, (now - oldest).total_seconds())
        for name, count, oldest in rows
    ]
    return sorted(found, key=lambda s: (s.oldest_run_at, s.name))[:limit]


def mark_stranded(rows: Iterable[Job], now: dt.datetime) -> None:
    """Set ``stranded`` on each row: True for a due pending job no live worker defines
    (one query, only when a row is due and pending)."""
    page = list(rows)
    due = [
        job
        for job in page
        if job.status == JobStatus.PENDING and not job.blocked and job.run_at <= now
    ]
    defined = defined_names(now) if due else None
    for job in page:
        job.stranded = defined is not None and job in due and job.name not in defined  # type: ignore[attr-defined]
