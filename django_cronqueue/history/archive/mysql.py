# Locking model: InnoDB row locks at READ COMMITTED (Django's default for MySQL). A move
# selects its rows FOR UPDATE SKIP LOCKED, so it never waits on a worker or an operator
# holding one, then moves them with one UPDATE in the same short transaction.
"""MariaDB and MySQL: finished jobs leave the job table's hot partition for its history
partition.

Migration 0023 partitions the job table by LIST on a column of its own, ``archived``,
which the model does not know (every INSERT leaves it at its default, 0):

- ``hot`` (0): the pending and running rows (what the claim reads) and, for a moment, the
  rows just finished;
- ``history`` (1): the finished rows the housekeeping moved (``archive``, every
  ``ARCHIVE_EVERY``).

Each partition is an InnoDB table of its own, with its own copy of every index, so the
claim's index and the completion's writes never walk history; every query on the job
table (``Job.objects``, the admin, ``get_result``, the counts) reads both, as one table.
A row moves by an UPDATE of ``archived``, which InnoDB carries out as a delete from one
partition and an insert into the other, in the transaction that selected it.

What it costs: InnoDB keeps no foreign key on a partitioned table, so the migration drops
those of the job table and of the tables that point at it (Django's own deletes cascade
as before; the database no longer checks the links); and every unique key carries the
partition column, so the primary key is ``(id, archived)`` and a unique constraint holds
within a partition. What stays in the hot partition is what has to collide or to be
linked: rows of a workflow and rows whose ``dedupe_for`` span has not passed, as on
PostgreSQL; a moved row's ``dedupe_for`` key is cleared (its span has passed). A retry
(``reopen``) moves its rows back before it makes them pending, so their dedupe key
collides again in the hot partition and the claim finds them where it looks.

Pruning deletes in batches, as before (``maintenance``), from the history partition.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import RawSQL
from django.db.models.lookups import Exact

from .common import ARCHIVE_BATCHES, FINISHED, MOVABLE, TABLE, Budget

__all__ = ["HOT_ROWS", "IN_HOT_PARTITION", "archive", "reopen"]

#: The job table's pending, running and just-finished rows, in a statement's FROM.
HOT_ROWS = f"{TABLE} PARTITION (hot)"
#: The same rows in a queryset's filter (by the partition column the model does not know).
IN_HOT_PARTITION = Exact(RawSQL("archived", ()), 0)

SELECT_MOVABLE = (
    f"SELECT j.id FROM {HOT_ROWS} j WHERE j.status IN {FINISHED} "
    f"AND {MOVABLE} LIMIT %s FOR UPDATE SKIP LOCKED"
)


def archive(
    connection: BaseDatabaseWrapper, now: dt.datetime, batch_size: int, budget: Budget
) -> int:
    """Move the finished rows that may leave the hot partition into the history one, in
    batches of ``batch_size`` (``ARCHIVE_BATCHES`` at most), each its own transaction,
    within ``budget``. Returns how many moved."""
    moved = 0
    for _ in range(ARCHIVE_BATCHES):
        size = budget.next_batch(moved, batch_size)
        if not size:
            break
        count = _move(connection, now, size)
        moved += count
        if count < size:
            break
    return moved


def _move(connection: BaseDatabaseWrapper, now: dt.datetime, size: int) -> int:
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(SELECT_MOVABLE, [now, size])
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return 0
        cursor.execute(
            # The table, not its hot partition: an UPDATE that names a partition cannot
            # move a row out of it.
            f"UPDATE {TABLE} SET archived = 1, window_dedupe_key = NULL "
            f"WHERE archived = 0 AND id IN ({', '.join(['%s'] * len(ids))})",
            ids,
        )
        return int(cursor.rowcount)


def reopen(connection: BaseDatabaseWrapper, ids: Sequence[int]) -> None:
    """Move the rows ``ids`` back into the hot partition (in the caller's transaction,
    before it makes them pending: a retry)."""
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET archived = 0 "
            f"WHERE archived = 1 AND id IN ({', '.join(['%s'] * len(ids))})",
            list(ids),
        )
