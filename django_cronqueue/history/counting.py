"""The counts of finished rows (succeeded, failed, cancelled) per name and queue, kept
off the worker's per-job path so that no reader counts the history.

The counts are kept in all, per UTC day of ``finished_at`` while the day has rows (so
that a day's history table is dropped without reading it: ``uncount_day``) and, for the
dashboard's chart of the last 24 hours, per hour over the last ``HOURS_KEPT``. A
worker's completion writes nothing here: a counter row updated by every completion would
serialize the workers on it. Instead the housekeeping of a tick
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
never count a row twice nor miss it. A pass looks only after ``counted_until``: the writes
that stamp ``finished_at`` with a clock that may lie behind it (``jobs.tick()``, eager
mode, a cancel from a web host: ``untrusted_clock``, ``counting_stamped``) hold the mark
and count the rows they finish at or before it themselves.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from contextvars import ContextVar
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from ..conf import database_alias, max_clock_skew
from ..models import (
    FINISHED_STATUSES,
    FinishedCount,
    FinishedCountMark,
    FinishedDayCount,
    Job,
    JobStatus,
)
from . import Busy

__all__ = [
    "COUNT_EVERY",
    "HOURS_KEPT",
    "ROW_FIELDS",
    "count_finished",
    "counting_stamped",
    "ensure_mark",
    "finishing",
    "hour_of",
    "lock_mark",
    "settle_margin",
    "uncount",
    "uncount_day",
    "untrusted_clock",
]

COUNT_EVERY = dt.timedelta(minutes=1)
SETTLE = dt.timedelta(minutes=1)
#: What ``uncount`` needs of a row, in this order (``values_list(*ROW_FIELDS)``).
ROW_FIELDS = ("status", "name", "queue", "finished_at")

#: Hours of per-hour counts kept (the dashboard's chart reads the last 24).
HOURS_KEPT = dt.timedelta(hours=48)

# (status, name, queue, hour): hour None for the count in all
Key = tuple[str, str, str, dt.datetime | None]
# (status, name, queue, UTC day)
DayKey = tuple[str, str, str, dt.date]


def settle_margin() -> dt.timedelta:
    """How long before ``now`` a pass counts up to: a completion is stamped with its
    worker's clock (which may run behind the housekeeper's by up to the clock skew) and
    committed a moment later."""
    return max(SETTLE, dt.timedelta(seconds=2 * max_clock_skew()))


def lock_mark(*, wait: bool = True) -> dt.datetime | None:
    """Lock the mark row for the caller's transaction (creating it when missing) and
    return ``counted_until``: the rows finished up to it are counted (none when None).

    With ``wait`` False, raise ``Busy`` at once when another transaction holds it or the
    row is missing (a pass makes it first, in a transaction of its own: ``ensure_mark``): a
    housekeeping pass (``count_finished``, the prune) leaves its work to a later pass
    rather than wait on a worker that may be frozen (SIGSTOP) with the mark in hand, its
    own pass then stuck and the expired leases it returns with it. (Made inside a
    transaction, the row would be that transaction's until it ends: another pass making
    it too would wait on it.)"""
    locked = _marks().select_for_update(skip_locked=not wait)
    for _ in range(2):
        found = list(locked.values_list("counted_until", flat=True))
        if found:
            return found[0]
        if not wait:
            raise Busy
        _make_mark()
    raise RuntimeError("the FinishedCountMark row could not be created")


def ensure_mark() -> None:
    """Make the mark row (counting nothing yet) if it is missing, committed at once when
    called outside a transaction, as a pass does before it takes the mark without
    waiting (``lock_mark``)."""
    if not _marks().exists():
        _make_mark()


def _make_mark() -> None:
    """Insert the mark row unless it is there. In the caller's transaction, one INSERT
    that leaves an existing row alone. Outside one, a statement that commits as it runs
    (a conflict is another process's row): ``bulk_create`` would wrap its INSERT in a
    transaction of its own, and a worker frozen (SIGSTOP) between the two left the row
    uncommitted, every other pass's insert waiting on it."""
    alias = database_alias()
    mark = FinishedCountMark(pk=FinishedCountMark.ONLY)
    if connections[alias].in_atomic_block:
        FinishedCountMark.objects.using(alias).bulk_create([mark], ignore_conflicts=True)
        return
    with suppress(IntegrityError):
        mark.save(using=alias, force_insert=True)


def _counted_by_day() -> bool:
    """Whether the counts are kept per day too (``FinishedDayCount``); read under the
    mark's lock (``lock_mark``), in the caller's transaction."""
    return bool(_marks().values_list("by_day", flat=True).first())


def count_finished(now: dt.datetime) -> int:
    """Add the rows finished since the last pass, up to ``now - settle_margin()``, to the
    counts (in all, per day, and per hour for the last ``HOURS_KEPT`` hours). Returns how
    many rows it added. The first pass reads the whole history once (and so does the
    first one after an upgrade from counts kept without their days); the next ones the
    rows of one interval, through the (status, finished_at) index. Never past this
    process's clock: a tick given a ``now`` in the future (as tests do) must not count up
    to an instant that the rows finishing meanwhile are stamped before.

    Raises ``history.Busy`` when another transaction holds the counts (``lock_mark``)."""
    upto = min(now, timezone.now()) - settle_margin()
    ensure_mark()
    with transaction.atomic(using=database_alias()):
        counted_until = lock_mark(wait=False)
        if counted_until is None or not _counted_by_day():
            # Nothing counted (the mark new or deleted to count again), or counted without
            # the days (by an earlier version): counted from scratch, with them.
            _counts().delete()
            _day_counts().delete()
            counted_until = None
        if counted_until is not None and upto <= counted_until:
            return 0
        finished = _jobs().filter(status__in=FINISHED_STATUSES, finished_at__lte=upto)
        if counted_until is not None:
            finished = finished.filter(finished_at__gt=counted_until)
        oldest_hour = hour_of(upto) - HOURS_KEPT
        if counted_until is not None and counted_until >= oldest_hour:
            # Every row to add finished within the hours kept: read once, by hour (a
            # minute of a busy drain is hundreds of thousands of rows).
            hours = _per(finished, TruncHour)
            days = hours
        else:
            # The hours kept only: the first pass reads the whole history, not every hour.
            hours = _per(finished.filter(finished_at__gte=oldest_hour), TruncHour)
            days = _per(finished, TruncDay)
        added: Counter[Key] = Counter()
        added_days: Counter[DayKey] = Counter()
        for status, name, queue, instant, n in days:
            added[(status, name, queue, None)] += n
            added_days[(status, name, queue, day_of(instant))] += n
        for status, name, queue, hour, n in hours:
            added[(status, name, queue, hour_of(hour))] += n
        _apply(added)
        _apply_days(added_days)
        _counts().filter(hour__lt=oldest_hour).delete()
        _marks().update(counted_until=upto, by_day=True)
    return sum(n for key, n in added.items() if key[3] is None)


def uncount(rows: Iterable[tuple[Any, ...]], counted_until: dt.datetime | None) -> None:
    """Take ``rows`` (``ROW_FIELDS`` each, as they were before they left a finished
    status or were deleted) out of the counts: those finished up to ``counted_until``,
    the value ``lock_mark`` returned in this same transaction."""
    _add_rows(rows, counted_until, -1)


def _add_rows(rows: Iterable[tuple[Any, ...]], counted_until: dt.datetime | None, n: int) -> None:
    """Add ``n`` (1 or -1) to the counts for each of ``rows`` (``ROW_FIELDS``) finished up
    to ``counted_until``."""
    if counted_until is None:
        return
    changes: Counter[Key] = Counter()
    day_changes: Counter[DayKey] = Counter()
    for status, name, queue, finished_at in rows:
        if status in FINISHED_STATUSES and finished_at is not None and finished_at <= counted_until:
            changes[(status, name, queue, None)] += n
            changes[(status, name, queue, hour_of(finished_at))] += n  # if kept
            day_changes[(status, name, queue, day_of(finished_at))] += n
    _apply(changes)
    _apply_days(day_changes)


@contextmanager
def counting_stamped(now: dt.datetime) -> Iterator[None]:
    """A transaction for writes that stamp rows finished at ``now`` read from a clock the
    counts cannot trust (a web host's: ``jobs.cancel()``, the admin). A pass counts the
    rows finished after ``counted_until``, up to a minute before its own clock: a row
    stamped at or before ``counted_until`` would never be counted. Holding the mark
    (``lock_mark``), no pass moves it meanwhile; the rows the writes finished at exactly
    ``now``, if that is at or before ``counted_until``, are counted here, in the same
    transaction."""
    with transaction.atomic(using=database_alias()):
        counted_until = lock_mark()
        late = counted_until is not None and now <= counted_until
        before = {row[0] for row in _stamped_rows(now)} if late else set()
        yield
        if late:
            added = [row[1:] for row in _stamped_rows(now) if row[0] not in before]
            _add_rows(added, counted_until, 1)


_CLOCK_UNTRUSTED: ContextVar[bool] = ContextVar("cronqueue_clock_untrusted", default=False)


@contextmanager
def untrusted_clock() -> Iterator[None]:
    """Within it, the lifecycle's writes that finish rows (``finishing``) stamp them with a
    clock the counts cannot trust: ``jobs.tick()``'s ``now`` (injected, or fixed at the
    tick's start while its handlers run), eager mode's web host. A worker's clock is the
    database's (measured), and each of its writes commits as it is stamped."""
    token = _CLOCK_UNTRUSTED.set(True)
    try:
        yield
    finally:
        _CLOCK_UNTRUSTED.reset(token)


def finishing(now: dt.datetime, *, atomic: bool = True) -> AbstractContextManager[Any]:
    """The transaction of a write that may finish rows at ``now`` (and of what it
    cascades to): ``counting_stamped(now)`` under ``untrusted_clock()``; otherwise an
    atomic block, or nothing at all when not ``atomic``."""
    if _CLOCK_UNTRUSTED.get():
        return counting_stamped(now)
    return transaction.atomic(using=database_alias()) if atomic else nullcontext()


def _stamped_rows(now: dt.datetime) -> list[tuple[Any, ...]]:
    """(pk, *ROW_FIELDS) of the finished rows stamped at exactly ``now``."""
    rows = _jobs().filter(status__in=FINISHED_STATUSES, finished_at=now)
    return list(rows.values_list("pk", *ROW_FIELDS))


def uncount_day(day: dt.date, staying: Iterable[tuple[Any, ...]]) -> int:
    """Take the counted succeeded rows of the UTC ``day`` out of the counts, all but
    ``staying`` ((status, name, queue, hour, rows): the counted rows of that day kept
    elsewhere), from the day's own counts, without reading a row: for a day's history
    table dropped whole. Returns how many counted rows went. The caller holds the mark
    (``lock_mark``), and a pass (``count_finished``) has counted the days since its
    version began keeping them."""
    stay: Counter[Key] = Counter()
    for status, name, queue, hour, rows in staying:
        stay[(status, name, queue, None)] += rows
        stay[(status, name, queue, hour_of(hour))] += rows
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)
    removed: Counter[Key] = Counter()
    removed_days: Counter[DayKey] = Counter()
    for of_day in _day_counts().filter(day=day, status=JobStatus.SUCCEEDED):
        group = (of_day.status, of_day.name, of_day.queue)
        gone = max(0, of_day.rows - stay[(*group, None)])
        removed[(*group, None)] -= gone
        removed_days[(*group, day)] -= gone
    hours = _counts().filter(
        status=JobStatus.SUCCEEDED, hour__gte=start, hour__lt=start + dt.timedelta(days=1)
    )
    for of_hour in hours:
        assert of_hour.hour is not None
        key = (of_hour.status, of_hour.name, of_hour.queue, hour_of(of_hour.hour))
        removed[key] -= max(0, of_hour.rows - stay[key])
    _apply(removed)
    _apply_days(removed_days)
    return -sum(removed_days.values())


def day_of(instant: dt.datetime) -> dt.date:
    """The UTC day that ``instant`` (as for ``hour_of``) falls in."""
    return hour_of(instant).date()


def hour_of(instant: dt.datetime) -> dt.datetime:
    """The UTC hour that ``instant`` (aware, or naive UTC as some vendors return a
    truncated hour) falls in."""
    if timezone.is_naive(instant):
        instant = timezone.make_aware(instant, dt.timezone.utc)
    return instant.astimezone(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)


def _apply(changes: Mapping[Key, int]) -> None:
    """Add ``changes`` to the counts in all and per hour (under the mark's lock: nothing
    else writes them); an hour no longer kept is not made again."""
    hours = {key[3] for key in changes if key[3] is not None and changes[key]}
    _add(_counts(), "hour", changes, Q(hour__isnull=True) | Q(hour__in=hours))


def _apply_days(changes: Mapping[DayKey, int]) -> None:
    """Add ``changes`` to the counts per day (under the mark's lock)."""
    _add(_day_counts(), "day", changes, Q(day__in={key[3] for key in changes}))


def _add(
    counts: QuerySet[Any], period: str, changes: Mapping[tuple[Any, ...], int], near: Q
) -> None:
    """Add ``changes`` ((status, name, queue, ``period``) -> rows) to the ``counts``
    (``near``: their rows that ``changes`` may touch); a count that reaches zero loses its
    row, and a missing one is made only by a positive change."""
    changes = {key: n for key, n in changes.items() if n}
    if not changes:
        return
    existing = {
        (row.status, row.name, row.queue, getattr(row, period)): row for row in counts.filter(near)
    }
    updated: list[Any] = []
    created: list[Any] = []
    emptied: list[Any] = []
    for (status, name, queue, when), n in changes.items():
        row = existing.get((status, name, queue, when))
        if row is None:
            if n > 0:
                fields = {"status": status, "name": name, "queue": queue, period: when}
                created.append(counts.model(**fields, rows=n))
            continue
        row.rows += n
        (updated if row.rows > 0 else emptied).append(row)
    counts.bulk_create(created)
    counts.bulk_update(updated, ["rows"])
    counts.filter(pk__in=[row.pk for row in emptied]).delete()


def _per(
    finished: QuerySet[Job], trunc: type[TruncDay] | type[TruncHour]
) -> list[tuple[str, str, str, dt.datetime, int]]:
    """How many of the ``finished`` rows there are per (status, name, queue, UTC day or
    hour of ``finished_at``)."""
    return list(
        finished.order_by()
        .annotate(at=trunc("finished_at", tzinfo=dt.timezone.utc))
        .values_list("status", "name", "queue", "at")
        .annotate(n=Count("*"))
    )


def _day_counts() -> QuerySet[FinishedDayCount]:
    return FinishedDayCount.objects.using(database_alias())


def _counts() -> QuerySet[FinishedCount]:
    return FinishedCount.objects.using(database_alias())


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def _marks() -> QuerySet[FinishedCountMark]:
    return FinishedCountMark.objects.using(database_alias()).filter(pk=FinishedCountMark.ONLY)
