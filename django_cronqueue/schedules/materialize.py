"""Writing the rows of due cron occurrences: which instants a schedule's cursor owes
(``choose_occurrences``, by its catch-up policy), the unsaved row of one occurrence
(``build_row``), and the batch path of ``Scheduler.materialize``: the occurrences of many
due schedules planned with their cron maths computed once per rule and cursor (``plan``),
then written in one transaction per batch (``write_batch``)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet

from ..conf import database_alias
from ..cron.spec import MISSED_AFTER, CronSpec
from ..db.notify import wake_workers
from ..models import CronSchedule, Job
from .dynamic import Target

logger = logging.getLogger("django_cronqueue")


def _schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(database_alias())


def choose_occurrences(spec: CronSpec, cursor: dt.datetime, now: dt.datetime) -> list[dt.datetime]:
    """The occurrences in (cursor, now] to create, by the catch-up policy.

    On-time ones (at most a minute old) always; missed ones by ``catch_up``, and never
    any older than the catch-up window.
    """
    oldest = max(cursor, now - spec.window)
    instants = spec.occurrences(oldest, now)
    on_time = [instant for instant in instants if now - instant <= MISSED_AFTER]
    missed = [instant for instant in instants if now - instant > MISSED_AFTER]
    if spec.catch_up == "latest":
        missed = missed[-1:]
    elif spec.catch_up == "all":
        missed = missed[-spec.max_catch_up :]
    else:
        missed = []
    return missed + on_time


def build_row(target: Target, now: dt.datetime, *, scheduled_for: dt.datetime | None) -> Job:
    """An unsaved row of ``target``: an occurrence, or a manual run (no ``scheduled_for``)."""
    return Job(**row_columns(target, now, scheduled_for=scheduled_for))


def row_columns(
    target: Target, now: dt.datetime, *, scheduled_for: dt.datetime | None
) -> dict[str, Any]:
    """The columns of ``build_row``'s row (the batch path inserts them as they are)."""
    from ..enqueueing.enqueue import job_columns

    columns = job_columns(
        target.definition,
        target.payload,
        now=now,
        run_at=scheduled_for or now,
        scheduled_for=scheduled_for,
        queue=target.queue,
        priority=target.priority,
        payload_checked=target.payload_checked,
    )
    columns["schedule"] = target.schedule
    if target.max_attempts is not None:
        columns["max_attempts"] = target.max_attempts
    return columns


@dataclass
class Planned:
    """A due schedule's row as read, and what materializing it writes."""

    target: Target
    row: CronSchedule
    due: list[dt.datetime]
    next_run: dt.datetime | None
    rows: list[dict[str, Any]]  # the columns of each occurrence's row


class Occurrences:
    """The cron maths of one ``materialize`` call, computed once per rule and cursor:
    schedules due together mostly share both."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self._due: dict[tuple[CronSpec, dt.datetime], list[dt.datetime]] = {}
        self._next: dict[CronSpec, dt.datetime | None] = {}

    def due(self, spec: CronSpec, cursor: dt.datetime) -> list[dt.datetime]:
        key = (spec, cursor)
        if key not in self._due:
            self._due[key] = choose_occurrences(spec, cursor, self.now)
        return self._due[key]

    def next_run(self, spec: CronSpec) -> dt.datetime | None:
        if spec not in self._next:
            next_runs = spec.next_runs(self.now, 1)
            self._next[spec] = next_runs[0] if next_runs else None
        return self._next[spec]


def plan(target: Target, row: CronSchedule, maths: Occurrences) -> Planned | None:
    """The occurrences of ``row`` due by ``maths.now`` and their unsaved rows; None when
    there is nothing to do or a row cannot be built (logged: the others go on)."""
    now = maths.now
    if row.cursor is None or row.cursor >= now:
        return None
    due = maths.due(target.spec, row.cursor)
    try:
        rows = [row_columns(target, now, scheduled_for=instant) for instant in due]
    except ValueError as exc:  # a row changed by hand (a bad queue)
        logger.warning("Cron schedule %s: not materialized: %s", row.name, exc)
        return None
    return Planned(target, row, due, maths.next_run(target.spec), rows)


def write_batch(
    batch: list[Planned], now: dt.datetime
) -> tuple[list[Planned], list[dict[str, Any]]]:
    """The batch's compare-and-set and inserts, in one transaction. Returns the plans
    that won and the columns of the rows inserted (with their ``id``)."""
    using = database_alias()
    with transaction.atomic(using=using):
        won = _advance_locked(batch, now)
        if not won:
            return [], []
        from ..enqueueing.enqueue import insert_occurrences

        created = insert_occurrences([row for p in won for row in p.rows], using)
        wake_workers(using, [row["run_at"] for row in created], now)
    return won, created


def _advance_locked(batch: list[Planned], now: dt.datetime) -> list[Planned]:
    """Lock the rows in primary key order (``FOR UPDATE SKIP LOCKED`` on PostgreSQL and
    MySQL; SQLite's writer is alone) and advance those whose cursor and ``updated_at`` are
    still those read: of several schedulers that read the same row, one writes its
    occurrences and the others skip it. A row another scheduler holds is its to write: a
    scheduler frozen in its batch holds up no other's (nor the expired leases it returns
    next), and its schedules are written by the next pass after its transaction ends.
    One UPDATE per distinct (next run, last occurrence), which schedules due together
    mostly share (Django's bulk_update, a CASE per row, is far slower)."""
    by_pk = {planned.row.pk: planned for planned in batch}
    won = [
        by_pk[pk]
        for pk, cursor, updated_at in _lock_unpaused(list(by_pk))
        if (cursor, updated_at) == (by_pk[pk].row.cursor, by_pk[pk].row.updated_at)
    ]
    groups: dict[tuple[dt.datetime | None, dt.datetime | None], list[int]] = {}
    for p in won:
        last = p.due[-1] if p.due else p.row.last_occurrence
        groups.setdefault((p.next_run, last), []).append(p.row.pk)
    for (next_run, last), pks in groups.items():
        _advance(pks, now, next_run, last)
    return won


# On PostgreSQL the batch's primary keys travel as one array: a statement text that never
# changes, where Django's pk__in spells out (and the driver splits) 500 placeholders.
LOCK_UNPAUSED = (
    f"SELECT id, cursor, updated_at FROM {CronSchedule._meta.db_table} "
    "WHERE id = ANY(%s) AND NOT paused ORDER BY id FOR UPDATE SKIP LOCKED"
)
ADVANCE = (
    f"UPDATE {CronSchedule._meta.db_table} "
    "SET cursor = %s, next_run = %s, last_occurrence = %s, updated_at = %s WHERE id = ANY(%s)"
)


def _lock_unpaused(pks: list[int]) -> list[tuple[int, dt.datetime | None, dt.datetime]]:
    """(pk, cursor, updated_at) of the rows of ``pks`` that are not paused and no other
    transaction holds, locked in primary key order."""
    alias = database_alias()
    if connections[alias].vendor == "postgresql":
        with connections[alias].cursor() as cursor:
            cursor.execute(LOCK_UNPAUSED, [pks])
            return list(cursor.fetchall())
    rows = (
        _schedules()
        .select_for_update(skip_locked=True)
        .filter(pk__in=pks, paused=False)
        .order_by("pk")
        .values_list("pk", "cursor", "updated_at")
    )
    return list(rows)


def _advance(
    pks: list[int], now: dt.datetime, next_run: dt.datetime | None, last: dt.datetime | None
) -> None:
    alias = database_alias()
    if connections[alias].vendor == "postgresql":
        with connections[alias].cursor() as cursor:
            cursor.execute(ADVANCE, [now, next_run, last, now, pks])
        return
    _schedules().filter(pk__in=pks).update(
        cursor=now, next_run=next_run, last_occurrence=last, updated_at=now
    )
