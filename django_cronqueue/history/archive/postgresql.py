"""PostgreSQL: finished jobs leave the job table for history tables of their own.

The job table keeps the pending and running rows (what the claim reads) and, for a
moment, the rows just finished. The housekeeping moves finished rows out (``archive``,
every ``ARCHIVE_EVERY``) into tables that *inherit* from the job table:

- ``django_cronqueue_job_YYYYMMDD``: the rows that succeeded on that UTC day, with a
  CHECK on ``finished_at`` (so a query on a range of finish instants skips other days).
  A day past ``SUCCEEDED_RETENTION`` goes with one ``DROP TABLE`` (``drop_day``):
  no row-by-row delete, no dead rows.
- ``django_cronqueue_job_ended``: the failed and cancelled rows (kept forever by
  default; pruned in batches when ``FAILED_RETENTION`` is set).

Why inheritance rather than declarative partitioning: a query on the job table reads its
inheriting tables too, so ``Job.objects``, the admin, ``get_result``, the counts and every
other reader see one table as before, while the claim and the completion name the job
table alone (``FROM ONLY``) and never walk history; a partitioned table would have to
carry the status and the finish day in its primary key, in the workflows' foreign keys and
in the unique constraints, and a completion would move the row across partitions, which
fails a concurrent update of that row where today it just finds no row. A row moves by a
DELETE from the job table and an INSERT into its history table in one statement, so a
worker or an admin action that updates it meanwhile finds it gone, as with a prune.

What stays in the job table until it is pruned: rows of a workflow (dependency links,
a batch: the links' foreign keys point into the job table) and rows whose ``dedupe_for``
span has not passed (their key must still collide). An UPDATE that gives an archived row
a status that is not finished (a retry) moves it back (the trigger ``REOPEN_FUNCTION``).

MariaDB partitions the job table instead (``archive.mysql``); SQLite keeps one table.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ...db.cursors import fast_cursor
from ...models import Job, JobAttempt
from .. import Busy
from .common import ARCHIVE_BATCHES, FINISHED, MOVABLE, Budget

__all__ = [
    "DAY_PREFIX",
    "ENDED_TABLE",
    "REOPEN_FUNCTION",
    "archive",
    "day_of_table",
    "day_table",
    "drop_day",
    "ensure_table",
    "expired_days",
    "history_tables",
    "kept_elsewhere",
]

TABLE = Job._meta.db_table
ATTEMPT_TABLE = JobAttempt._meta.db_table
ENDED_TABLE = f"{TABLE}_ended"
DAY_PREFIX = f"{TABLE}_d"
DAY_TABLE = re.compile(rf"^{re.escape(DAY_PREFIX)}(\d{{8}})$")
REOPEN_FUNCTION = "django_cronqueue_job_reopen"
# Days of history tables made ahead of the rows that will fill them.
DAYS_AHEAD = 1


def day_table(day: dt.date) -> str:
    return f"{DAY_PREFIX}{day:%Y%m%d}"


def _day_start(name: str) -> dt.datetime | None:
    """The first instant (UTC) of a day table's day; None for another table."""
    found = DAY_TABLE.match(name)
    if found is None:
        return None
    return dt.datetime.strptime(found.group(1), "%Y%m%d").replace(tzinfo=dt.timezone.utc)


# Before every finish instant.
EARLIEST = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)
# The counts' mark when nothing is counted: every row finished after it.
NOTHING_COUNTED = EARLIEST

COLUMNS = [str(field.column) for field in Job._meta.concrete_fields]
LISTED = ", ".join(COLUMNS)
# The dedupe_for key of a moved row has had its span: nothing collides with it any more.
SELECTED = ", ".join("NULL" if column == "window_dedupe_key" else column for column in COLUMNS)
ENDED = "j.status IN ('failed', 'cancelled')"
SUCCEEDED_ON_DAY = "j.status = 'succeeded' AND j.finished_at >= %s AND j.finished_at < %s"


def history_tables(connection: BaseDatabaseWrapper) -> list[str]:
    """The tables that inherit from the job table, by name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass ORDER BY 1",
            [TABLE],
        )
        return [row[0] for row in cursor.fetchall()]


def ensure_table(connection: BaseDatabaseWrapper, name: str) -> bool:
    """Create the history table ``name`` (a day's or the ended rows') if it is missing,
    with the indexes its readers use and the trigger that moves a reopened row back.
    Returns False, at once, when another session is making it (two workers at once:
    the second does not wait, as the first may be frozen by SIGSTOP while it makes it)."""
    with connection.cursor() as cursor:
        if _exists(cursor, name):
            return True
        with transaction.atomic(using=connection.alias):
            cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [name])
            if not cursor.fetchone()[0]:
                return False
            if not _exists(cursor, name):  # unless made since the first look
                _create(cursor, connection.ops.quote_name, name)
            return True


def _exists(cursor: Any, name: str) -> bool:
    """Whether the table ``name`` exists in the schema tables are made in. Read from
    ``pg_class``, not with ``to_regclass()``: that name look-up is cached per session and
    refreshed when the session next locks a table, which a wait on an advisory lock does
    not; a read of ``pg_class`` locks it, so it sees a table made while the session waited."""
    cursor.execute(
        "SELECT EXISTS (SELECT FROM pg_class WHERE relname = %s "
        "AND relnamespace = current_schema()::regnamespace)",
        [name],
    )
    return bool(cursor.fetchone()[0])


def _create(cursor: Any, quote: Callable[[str], str], name: str) -> None:
    table = quote(name)
    cursor.execute(f"CREATE TABLE {table} () INHERITS ({TABLE})")
    start = _day_start(name)
    if start is not None:
        # Django's cursor binds on the client: the bounds are quoted into the DDL.
        cursor.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {quote(name + '_day')} "
            "CHECK (finished_at >= %s AND finished_at < %s)",
            [start, start + dt.timedelta(days=1)],
        )
    cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {quote(name + '_pkey')} PRIMARY KEY (id)")
    for suffix, definition in INDEXES:
        cursor.execute(f"CREATE INDEX {quote(name + suffix)} ON {table} {definition}")
    cursor.execute(
        f"CREATE TRIGGER {quote(name + '_reopen')} AFTER UPDATE ON {table} FOR EACH ROW "
        f"WHEN (NEW.status NOT IN {FINISHED}) EXECUTE FUNCTION {REOPEN_FUNCTION}()"
    )


# A history table's indexes: what its readers look rows up by (never the claim's).
INDEXES = (
    ("_finished", "(status, finished_at)"),
    ("_name", "(name, status, queue)"),
    ("_queue", "(queue, status)"),
    ("_occurrence", "(name, scheduled_for, schedule) WHERE scheduled_for IS NOT NULL"),
    ("_dedupe_key", "(dedupe_key) WHERE dedupe_key IS NOT NULL"),
    ("_payload", "USING gin (payload jsonb_path_ops)"),  # the admin's key:value search
)


def archive(
    connection: BaseDatabaseWrapper, now: dt.datetime, batch_size: int, budget: Budget
) -> int:
    """Move the finished rows that may leave the job table into their history tables,
    in batches of ``batch_size`` (``ARCHIVE_BATCHES`` at most), each its own
    transaction, within ``budget``. Returns how many moved: none while another worker
    makes the tables (``ensure_table``), whose pass moves them."""
    days = [day_table((now + dt.timedelta(days=ahead)).date()) for ahead in range(DAYS_AHEAD + 1)]
    if not all(ensure_table(connection, name) for name in [*days, ENDED_TABLE]):
        return 0
    moved = batches = 0
    for kind in (_move_ended, _move_succeeded):
        more = True
        while more and batches < ARCHIVE_BATCHES:
            size = budget.next_batch(moved, batch_size)
            if not size:
                return moved
            count, more = kind(connection, now, size)
            moved += count
            if count:  # an empty batch ends its kind's loop
                batches += 1
    return moved


def _move_ended(connection: BaseDatabaseWrapper, now: dt.datetime, size: int) -> tuple[int, bool]:
    """A batch of failed and cancelled rows; and whether there may be more."""
    moved = _move(connection, ENDED_TABLE, ENDED, [], now, size)
    return moved, moved == size


def _move_succeeded(
    connection: BaseDatabaseWrapper, now: dt.datetime, size: int
) -> tuple[int, bool]:
    """A batch of the succeeded rows of the oldest day that has some to move; and whether
    there may be more (of that day or the next ones)."""
    since = EARLIEST
    while (oldest := _oldest_succeeded(connection, since)) is not None:
        day = oldest.astimezone(dt.timezone.utc).date()
        start = dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)
        since = start + dt.timedelta(days=1)
        name = day_table(day)
        if not ensure_table(connection, name):  # another worker is making it
            return 0, False
        moved = _move(connection, name, SUCCEEDED_ON_DAY, [start, since], now, size)
        if moved:
            return moved, True
    return 0, False


def _oldest_succeeded(connection: BaseDatabaseWrapper, since: dt.datetime) -> dt.datetime | None:
    """The first finish instant, from ``since`` on, of a succeeded row still in the job
    table: one entry of its finish index. (Asked with the conditions of a movable row and
    an ORDER BY, the planner sorted every succeeded row whenever its statistics said a
    dozen: half a second after a held transaction.) A day whose rows may not move yet is
    passed over by the caller."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT min(finished_at) FROM ONLY {TABLE} "
            "WHERE status = 'succeeded' AND finished_at >= %s",
            [since],
        )
        oldest: dt.datetime | None = cursor.fetchone()[0]
    return oldest


def _move(
    connection: BaseDatabaseWrapper,
    target: str,
    which: str,
    params: list[Any],
    now: dt.datetime,
    size: int,
) -> int:
    """Move up to ``size`` rows (``which`` of them, and movable) to the table ``target``,
    in one statement and its own transaction."""
    assert which in (ENDED, SUCCEEDED_ON_DAY)
    quote = connection.ops.quote_name
    # The rows are picked in a MATERIALIZED CTE, read once, as the claim picks its own
    # (claiming.base): as "DELETE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP
    # LOCKED)", PostgreSQL ran the subquery again for each row of the table (a nested
    # loop, on statistics that said one row), each run skipping the rows just deleted,
    # and a batch of 2 moved all 7.
    sql = (
        f"WITH picked AS MATERIALIZED (SELECT j.id FROM ONLY {TABLE} j WHERE {which} "
        f"AND {MOVABLE} LIMIT %s FOR UPDATE SKIP LOCKED), "
        f"moved AS (DELETE FROM ONLY {TABLE} WHERE id IN (SELECT id FROM picked) "
        f"RETURNING {LISTED}) "
        f"INSERT INTO {quote(target)} ({LISTED}) SELECT {SELECTED} FROM moved"
    )
    with transaction.atomic(using=connection.alias), fast_cursor(connection) as cursor:
        cursor.execute(sql, [*params, now, size])
        return int(cursor.rowcount)


def expired_days(connection: BaseDatabaseWrapper, cutoff: dt.datetime) -> list[str]:
    """The day tables whose every row finished before ``cutoff``, oldest first."""
    starts = {name: _day_start(name) for name in history_tables(connection)}
    return [
        name
        for name, start in starts.items()
        if start is not None and start + dt.timedelta(days=1) <= cutoff
    ]


def day_of_table(name: str) -> dt.date:
    """The UTC day of the day table ``name``."""
    start = _day_start(name)
    if start is None:
        raise ValueError(f"{name!r} is not a day table of the job history")
    return start.date()


# The rows of a day that finished (succeeded) by the counts' mark.
COUNTED_ON_DAY = (
    "status = 'succeeded' AND finished_at >= %s AND finished_at < %s AND finished_at <= %s"
)
KEPT_ELSEWHERE = (
    "SELECT 'succeeded', name, queue, date_trunc('hour', finished_at), count(*) FROM ("
    f"SELECT name, queue, finished_at FROM ONLY {TABLE} WHERE {COUNTED_ON_DAY} UNION ALL "
    f"SELECT name, queue, finished_at FROM {ENDED_TABLE} WHERE {COUNTED_ON_DAY}"
    ") kept GROUP BY 2, 3, 4"
)


def kept_elsewhere(
    connection: BaseDatabaseWrapper, day: dt.date, counted_until: dt.datetime | None
) -> list[tuple[Any, ...]]:
    """The counted succeeded rows of the UTC ``day`` outside its day table (still in the
    job table, or in the ended one after an UPDATE), per (status, name, queue, hour,
    rows): read from the (status, finished_at) indexes of those tables. Raises
    ``history.Busy`` while another worker makes the ended rows' table."""
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)
    if not ensure_table(connection, ENDED_TABLE):
        raise Busy
    with connection.cursor() as cursor:
        bounds = [start, start + dt.timedelta(days=1), counted_until or NOTHING_COUNTED]
        cursor.execute(KEPT_ELSEWHERE, bounds * 2)
        return list(cursor.fetchall())


def drop_day(connection: BaseDatabaseWrapper, name: str, counted_until: dt.datetime | None) -> int:
    """Drop the day table ``name`` and the attempt rows of its jobs (in the caller's
    transaction, which holds the counts' mark and takes its counted rows out of the
    counts: ``history.uncount_day``). Returns how many of its rows were not counted
    (finished after ``counted_until``; all of them when nothing is counted): read from
    its (status, finished_at) index."""
    table = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {ATTEMPT_TABLE} a USING {table} j WHERE a.job_id = j.id",
        )
        cursor.execute(
            f"SELECT count(*) FROM {table} WHERE status = 'succeeded' AND finished_at > %s",
            [counted_until or NOTHING_COUNTED],
        )
        uncounted = int(cursor.fetchone()[0])
        cursor.execute(f"DROP TABLE {table}")
    return uncounted
