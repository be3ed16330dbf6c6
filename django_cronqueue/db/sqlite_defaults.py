"""Safe defaults for the queue's SQLite connections.

Django's SQLite defaults (a rollback journal, deferred transactions) make concurrent
writers fail with "database is locked": a deferred transaction that read first cannot
take the write lock while another connection writes, and SQLite fails it at once instead
of waiting. So every new connection to the queue's database (``CRONQUEUE["DATABASE"]``),
in every process, gets what the site's ``OPTIONS`` leave unset:

- ``transaction_mode="IMMEDIATE"``: transactions take the write lock when they begin, so a
  writer waits its turn (the busy timeout) instead of failing;
- a busy timeout of ``BUSY_TIMEOUT`` seconds (``OPTIONS["timeout"]``; Python's own is 5);
- WAL journal mode (``PRAGMA journal_mode=WAL``, stored in the file): readers and the
  writer no longer block each other. Not for in-memory databases, and not when an
  ``init_command`` chooses a journal mode itself.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import database_alias

BUSY_TIMEOUT = 20  # seconds
BUSY_TIMEOUT_MS = BUSY_TIMEOUT * 1000  # PRAGMA takes no parameters: a constant in its text


def apply(*, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """A ``connection_created`` receiver."""
    if connection.vendor != "sqlite" or connection.alias != database_alias():
        return
    import sqlite3  # loaded already by Django's SQLite backend; not by other vendors' sites

    options = connection.settings_dict.get("OPTIONS") or {}
    if options.get("transaction_mode") is None:
        connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    raw = connection.connection
    if "timeout" not in options:
        raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if "journal_mode" in str(options.get("init_command", "")).lower():
        return
    if connection.is_in_memory_db():  # type: ignore[attr-defined]
        return
    try:
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            raw.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:  # another connection holds the file; it sets WAL next time
        pass
