"""Rows per status, name and queue, exactly, without counting the history: what the
dashboard, ``cronqueue_status`` and ``MetricsView`` show.

- pending and running rows are counted where they are (on PostgreSQL the job table's
  pending rows from its (name, status, queue) index alone, the claim index leaving out a
  workflow's blocked rows; its running ones from the partial flow index; the history
  tables hold none but for a moment, read from their own status indexes);
- finished rows (succeeded, failed, cancelled) are the counts that housekeeping keeps up
  to ``FinishedCountMark.counted_until`` (``django_cronqueue.history.counting``) plus the rows
  finished after it (or without a ``finished_at``, which housekeeping never counts),
  read from the (status, finished_at) index: the rows of the last minute or two,
  however long the history.

The outcomes per hour of the dashboard's chart are read the same way
(``finished_per_hour``): the hours housekeeping keeps, plus the rows finished since.

The parts are read by one statement (so one snapshot: a housekeeping pass that commits
meanwhile cannot count a row twice), a ``UNION ALL`` without an ``ORDER BY`` (from Django
6.1 a union takes the model's default ordering unless told otherwise, which no part of
the union can satisfy). Until the first pass has counted the history (a
site just migrated), the finished rows are counted from the job table, as slowly as
before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import cast

from django.db.models import Count, QuerySet, Subquery
from django.db.models.functions import TruncHour

from ..history.counting import HOURS_KEPT, hour_of
from ..models import FINISHED_STATUSES, FinishedCount, FinishedCountMark, Job, JobStatus
from .base import jobs

__all__ = ["finished_per_hour", "job_counts", "status_totals"]

Key = tuple[str, str, str]
Rows = Iterable[tuple[str, str, dt.datetime, int]]


def job_counts() -> dict[Key, int]:
    """Rows per (status, name, queue), only the combinations that have rows, exactly:
    two queries (the mark, then one statement)."""
    pending, running = (_per_key(jobs().filter(status=status)) for status in _LIVE)
    finished = jobs().filter(status__in=FINISHED_STATUSES)
    mark = _counts_mark().values_list("counted_until", flat=True).first()
    if mark is None:  # nothing counted yet: every finished row is counted here
        return _summed(pending.union(running, _per_key(finished), all=True).order_by())
    counted = _counted().filter(hour__isnull=True).values_list("status", "name", "queue", "rows")
    # The mark read again inside the statement, in its snapshot: a pass that committed
    # since the read above moved it on, and its rows are in ``counted``, not recent. The
    # value read above only bounds the index range (a subquery's value is unknown to
    # the planner, which would read the whole table).
    since = Subquery(_counts_mark().values("counted_until"))
    recent = finished.filter(finished_at__gt=mark).filter(finished_at__gt=since)
    undated = finished.filter(finished_at__isnull=True)  # never counted by housekeeping
    parts = (counted, _per_key(recent), _per_key(undated))
    return _summed(pending.union(running, *parts, all=True).order_by())


def finished_per_hour(first: dt.datetime, now: dt.datetime, statuses: Sequence[str]) -> Rows:
    """(name, status, hour, rows) of the rows of ``statuses`` finished from ``first`` (a
    UTC hour) to ``now``, per UTC hour (aware, or naive UTC on vendors without time
    zones): the hours kept by housekeeping plus the rows finished since, in one
    statement; from the job table when the kept hours do not cover the span."""
    finished = jobs().filter(status__in=statuses, finished_at__gte=first, finished_at__lte=now)
    mark = _counts_mark().values_list("counted_until", flat=True).first()
    if mark is None or mark > now or first < hour_of(mark) - HOURS_KEPT:
        return _per_hour(finished)
    kept = _counted().filter(hour__gte=first, hour__lte=now, status__in=statuses)
    since = Subquery(_counts_mark().values("counted_until"))
    recent = finished.filter(finished_at__gt=mark).filter(finished_at__gt=since)
    kept_hours = kept.values_list("name", "status", "hour", "rows")  # hour: never null here
    return cast(Rows, kept_hours.union(_per_hour(recent), all=True).order_by())


def status_totals(counts: dict[Key, int]) -> dict[str, int]:
    """Rows per status of ``job_counts()``, every status present (0 when none)."""
    totals = dict.fromkeys(JobStatus.values, 0)
    for (status, _, _), n in counts.items():
        totals[status] += n
    return totals


_LIVE = (JobStatus.PENDING, JobStatus.RUNNING)


def _per_key(rows: QuerySet[Job]) -> QuerySet[Job, tuple[str, str, str, int]]:
    return rows.order_by().values_list("status", "name", "queue").annotate(n=Count("*"))


def _summed(rows: Iterable[tuple[str, str, str, int]]) -> dict[Key, int]:
    counts: dict[Key, int] = {}
    for status, name, queue, n in rows:
        counts[(status, name, queue)] = counts.get((status, name, queue), 0) + n
    return {key: n for key, n in counts.items() if n}


def _per_hour(rows: QuerySet[Job]) -> QuerySet[Job, tuple[str, str, dt.datetime, int]]:
    return (
        rows.order_by()
        .annotate(hour=TruncHour("finished_at", tzinfo=dt.timezone.utc))
        .values_list("name", "status", "hour")
        .annotate(n=Count("pk"))
    )


def _counted() -> QuerySet[FinishedCount]:
    return FinishedCount.objects.using(jobs().db)


def _counts_mark() -> QuerySet[FinishedCountMark]:
    return FinishedCountMark.objects.using(jobs().db).filter(pk=FinishedCountMark.ONLY)
