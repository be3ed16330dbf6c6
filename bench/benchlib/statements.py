"""Counting what a worker process sends its database, client-side (Django side).

``install(directory)``, called by a project's settings when ``BENCH_COUNT_STATEMENTS``
names a directory, counts in this process, over its whole life (start-up, housekeeping,
heartbeat and shut-down included):

- ``statements``: every SQL statement executed through a Django cursor (the package's
  "fast" cursors included: they are Django's wrappers too), with SQLite's explicit
  ``BEGIN IMMEDIATE`` and ``COMMIT`` among them;
- ``commits``, ``rollbacks`` and ``autocommit_changes``: the transaction control Django does
  outside any cursor (``transaction.atomic()`` turning autocommit off and on, committing).

At exit it writes them to ``<directory>/<pid>.json``. Server-side counting was not
possible here: pg_stat_statements is not loaded on the shared server (it needs a
restart), and global counters (``pg_stat_database``, MariaDB's ``Questions``) include
every other session's work. ``round_trips`` in the harness adds to the statements the
transaction control each vendor sends: PostgreSQL's implicit ``BEGIN`` and the
``COMMIT`` (psycopg), MySQL's ``SET autocommit`` and ``COMMIT``.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from pathlib import Path
from typing import Any

_counts = {"statements": 0, "commits": 0, "rollbacks": 0, "autocommit_changes": 0}
_lock = threading.Lock()
_patched: set[type] = set()


def _count(what: str) -> None:
    with _lock:
        _counts[what] += 1


def install(directory: str) -> None:
    from django.db.backends.signals import connection_created
    from django.db.backends.utils import CursorWrapper

    execute = CursorWrapper._execute_with_wrappers

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _count("statements")
        return execute(self, *args, **kwargs)

    CursorWrapper._execute_with_wrappers = counted  # type: ignore[method-assign]
    connection_created.connect(_patch_wrapper_class, dispatch_uid="bench_count_statements")
    atexit.register(_write, Path(directory))


def _patch_wrapper_class(sender: Any, connection: Any, **kwargs: Any) -> None:
    cls = type(connection)
    with _lock:
        if cls in _patched:
            return
        _patched.add(cls)
    for method, what in (
        ("_commit", "commits"),
        ("_rollback", "rollbacks"),
        ("_set_autocommit", "autocommit_changes"),
    ):
        original = getattr(cls, method)

        def wrapper(self: Any, *args: Any, _original: Any = original, _what: str = what) -> Any:
            if self.connection is not None:
                _count(_what)
            return _original(self, *args)

        setattr(cls, method, wrapper)


def _write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with _lock:
        counts = dict(_counts)
    (directory / f"{os.getpid()}.json").write_text(json.dumps(counts))


def read(directory: Path) -> dict[str, int]:
    """The counts of every process that wrote into ``directory``, summed."""
    total = dict.fromkeys(_counts, 0)
    total["processes"] = 0
    for path in sorted(directory.glob("*.json")):
        for key, value in json.loads(path.read_text()).items():
            total[key] += value
        total["processes"] += 1
    return total
