"""History out of the claim's way: finished jobs leave the rows the claim and the
completion work on, and every reader of the job table still sees them.

- PostgreSQL (``archive.postgresql``): tables that inherit from the job table, one per
  UTC day of succeeded rows (a day past its retention goes with one ``DROP TABLE``) and
  one of failed and cancelled rows.
- MariaDB and MySQL (``archive.mysql``): the job table's ``history`` partition.
- SQLite: one table; its claim index holds the pending rows only (migration 0018).

The workers' housekeeping moves finished rows (``archive``, every ``ARCHIVE_EVERY``);
a retry brings its rows back first (``reopen``). docs/explanation.md, "History", says
why and what it costs.

May import ``models``, ``db`` and ``conf`` only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ...conf import database_alias
from .common import ARCHIVE_BATCH, ARCHIVE_BATCHES, ARCHIVE_EVERY, Budget

__all__ = [
    "ARCHIVE_BATCH",
    "ARCHIVE_BATCHES",
    "ARCHIVE_EVERY",
    "Budget",
    "archive",
    "keeps_days",
    "mysql",
    "postgresql",
    "reopen",
]

if TYPE_CHECKING:
    from . import mysql, postgresql


def __getattr__(name: str) -> Any:
    """``archive.mysql`` and ``archive.postgresql``, loaded when first used: a process
    loads only those it uses (the claim and the dedupe read a constant of ``mysql``)."""
    # Imported by name, not "from . import mysql", whose check for the attribute would
    # call this function again.
    if name == "mysql":
        import django_cronqueue.history.archive.mysql

        return django_cronqueue.history.archive.mysql
    if name == "postgresql":
        import django_cronqueue.history.archive.postgresql

        return django_cronqueue.history.archive.postgresql
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def archive(
    now: dt.datetime, *, batch_size: int = ARCHIVE_BATCH, budget: Budget | None = None
) -> int:
    """Move the finished rows that may leave the hot rows into history, in batches of
    ``batch_size`` (``ARCHIVE_BATCHES`` at most), each its own transaction, within
    ``budget`` (a whole pass if not given): the queue comes first. Returns how many
    moved (none on SQLite)."""
    connection = connections[database_alias()]
    budget = budget or Budget(ARCHIVE_BATCHES * batch_size)
    if connection.vendor == "postgresql":
        from . import postgresql

        return postgresql.archive(connection, now, batch_size, budget)
    if connection.vendor == "mysql":
        from . import mysql

        return mysql.archive(connection, now, batch_size, budget)
    return 0


def reopen(job_ids: Sequence[int]) -> None:
    """Bring the finished rows ``job_ids`` back among the hot rows, in the caller's
    transaction, before it makes them pending (a retry). On PostgreSQL a trigger does it
    as the UPDATE of their status runs (``postgresql.REOPEN_FUNCTION``)."""
    connection = connections[database_alias()]
    if connection.vendor == "mysql":
        from . import mysql

        mysql.reopen(connection, job_ids)


def keeps_days(connection: BaseDatabaseWrapper) -> bool:
    """Whether the succeeded rows are kept in tables of one day each (PostgreSQL), which
    the prune drops whole (the functions of ``archive.postgresql``)."""
    return connection.vendor == "postgresql"
