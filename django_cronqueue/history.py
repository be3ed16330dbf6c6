"""The counts of finished rows (succeeded, failed, cancelled) per name and queue, kept
off the worker's per-job path so that no reader counts the history.

The counts are kept in all and, for the dashboard's chart of the last 24 hours, per hour
of ``finished_at`` over the last ``HOURS_KEPT``. A worker's completion writes nothing
here: a counter row updated by every completion
would serialize the workers on it. Instead the housekeeping of a tick
(``count_finished``, every ``COUNT_EVERY``) adds the rows finished since the last pass,
up to a little before ``now`` (``settle_margin``: a completion is written with its
worker's clock and committed a moment later), and moves ``counted_until`` there. What
takes a counted row out of a finished status takes it out of the counts in its own
transaction: the prune (``maintenance``), a retry and the workflow jobs a retry reopens
(``lifecycle.operator``, ``lifecycle.workflow``). The readers (``observe.counts``) add
the rows finished after ``counted_until``, read from the (status, finished_at) index, so
their figures are exact.

Every change of the counts first locks the one ``FinishedCountMark`` row
(``lock_mark``), so two housekeeping passes, a pass and a prune, or a pass and a retry
never count a row twice nor miss it.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncHour
from django.utils import timezone

from .conf import database_alias, max_clock_skew
from .models import FINISHED_STATUSES, FinishedCount, FinishedCountMark, Job

__all__ = [
    "COUNT_EVERY",
    "HOURS_KEPT",
    "ROW_FIELDS",
    "count_finished",
    "hour_of",
    "lock_mark",
    "settle_margin",
    "uncount",
    "uncount_groups",
]

COUNT_EVERY = dt.timedelta(minutes=1)
SETTLE = dt.timedelta(minutes=1)
#: What ``uncount`` needs of a row, in this order (``values_list(*ROW_FIELDS)``).
ROW_FIELDS = ("status", "name", "queue", "finished_at")

#: Hours of per-hour counts kept (the dashboard's chart reads the last 24).
HOURS_KEPT = dt.timedelta(hours=48)

# (status, name, queue, hour): hour None for the count in all
Key = tuple[str, str, str, dt.datetime | None]


def settle_margin() -> dt.timedelta:
    """How long before ``now`` a pass counts up to: a completion is stamped with its
    worker's clock (which may run behind the housekeeper's by up to the clock skew) and
    committed a moment later."""
    return max(SETTLE, dt.timedelta(seconds=2 * max_clock_skew()))


def lock_mark() -> dt.datetime | None:
    """Lock the mark row for the caller's transaction (creating it when missing) and
    return ``counted_until``: the rows finished up to it are counted (none when None)."""
    marks = FinishedCountMark.objects.using(database_alias()).filter(pk=FinishedCountMark.ONLY)
    for _ in range(2):
        found = list(marks.select_for_update().values_list("counted_until", flat=True))
        if found:
            return found[0]
        FinishedCountMark.objects.using(database_alias()).bulk_create(
            [FinishedCountMark(pk=FinishedCountMark.ONLY)], ignore_conflicts=True
        )
    raise RuntimeError("the FinishedCountMark row could not be created")


def count_finished(now: dt.datetime) -> int:
    """Add the rows finished since the last pass, up to ``now - settle_margin()``, to the
    counts (in all, and per hour for the last ``HOURS_KEPT`` hours). Returns how many rows
    it added. The first pass reads the whole history once; the next ones the rows of one
    interval, through the (status, finished_at) index. Never past this process's clock: a
    tick given a ``now`` in the future (as tests do) must not count up to an instant that
    the rows finishing meanwhile are stamped before."""
    upto = min(now, timezone.now()) - settle_margin()
    with transaction.atomic(using=database_alias()):
        counted_until = lock_mark()
        if counted_until is not None and upto <= counted_until:
            return 0
        finished = _jobs().filter(status__in=FINISHED_STATUSES, finished_at__lte=upto)
        if counted_until is not None:
            finished = finished.filter(finished_at__gt=counted_until)
        oldest_hour = hour_of(upto) - HOURS_KEPT
        added: Counter[Key] = Counter()
        totals = finished.order_by().values_list("status", "name", "queue").annotate(n=Count("*"))
        for status, name, queue, n in totals:
            added[(status, name, queue, None)] += n
        # The hours kept only: the first pass reads the whole history, not every hour of it.
        recent = finished.filter(finished_at__gte=oldest_hour).order_by()
        hours = (
            recent.annotate(hour=TruncHour("finished_at", tzinfo=dt.timezone.utc))
            .values_list("status", "name", "queue", "hour")
            .annotate(n=Count("*"))
        )
        for status, name, queue, hour, n in hours:
            added[(status, name, queue, hour_of(hour))] += n
        _apply(added)
        _counts().filter(hour__lt=oldest_hour).delete()
        _marks().update(counted_until=upto)
    return sum(n for key, n in added.items() if key[3] is None)


def uncount(rows: Iterable[tuple[Any, ...]], counted_until: dt.datetime | None) -> None:
    """Take ``rows`` (``ROW_FIELDS`` each, as they were before they left a finished
    status or were deleted) out of the counts: those finished up to ``counted_until``,
    the value ``lock_mark`` returned in this same transaction."""
    if counted_until is None:
        return
    removed: Counter[Key] = Counter()
    for status, name, queue, finished_at in rows:
        if status in FINISHED_STATUSES and finished_at is not None and finished_at <= counted_until:
            removed[(status, name, queue, None)] -= 1
            removed[(status, name, queue, hour_of(finished_at))] -= 1  # if kept
    _apply(removed)


def uncount_groups(groups: Iterable[tuple[Any, ...]]) -> None:
    """Take counted rows out of the counts by group: (status, name, queue, hour, rows),
    each row finished in that hour and counted (the caller holds the mark, ``lock_mark``).
    For the history tables dropped whole (``archive``)."""
    removed: Counter[Key] = Counter()
    for status, name, queue, hour, rows in groups:
        removed[(status, name, queue, None)] -= rows
        removed[(status, name, queue, hour_of(hour))] -= rows  # if kept
    _apply(removed)


def hour_of(instant: dt.datetime) -> dt.datetime:
    """The UTC hour that ``instant`` (aware, or naive UTC as some vendors return a
    truncated hour) falls in."""
    if timezone.is_naive(instant):
        instant = timezone.make_aware(instant, dt.timezone.utc)
    return instant.astimezone(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)


def _apply(changes: Mapping[Key, int]) -> None:
    """Add ``changes`` to the counts (under the mark's lock: nothing else writes them); a
    count that reaches zero loses its row, and an hour no longer kept is not made again."""
    changes = {key: n for key, n in changes.items() if n}
    if not changes:
        return
    hours = {key[3] for key in changes if key[3] is not None}
    rows = _counts().filter(Q(hour__isnull=True) | Q(hour__in=hours))
    existing = {(row.status, row.name, row.queue, row.hour): row for row in rows}
    updated: list[FinishedCount] = []
    created: list[FinishedCount] = []
    emptied: list[FinishedCount] = []
    for (status, name, queue, hour), n in changes.items():
        row = existing.get((status, name, queue, hour))
        if row is None:
            if n > 0:
                created.append(
                    FinishedCount(status=status, name=name, queue=queue, hour=hour, rows=n)
                )
            continue
        row.rows += n
        (updated if row.rows > 0 else emptied).append(row)
    _counts().bulk_create(created)
    _counts().bulk_update(updated, ["rows"])
    _counts().filter(pk__in=[row.pk for row in emptied]).delete()


def _counts() -> QuerySet[FinishedCount]:
    return FinishedCount.objects.using(database_alias())


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def _marks() -> QuerySet[FinishedCountMark]:
    return FinishedCountMark.objects.using(database_alias()).filter(pk=FinishedCountMark.ONLY)
