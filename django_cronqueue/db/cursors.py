"""Cursors for the hot statements: parameters sent apart from the statement on PostgreSQL,
and the worker's claims prepared once per connection.

Django's psycopg 3 backend binds parameters on the client by default (``ClientCursor``):
each execution quotes every value into the SQL text in Python. The statements that run
for every job (enqueue, claim, claim-and-complete) send their values separately instead
(psycopg's server-side binding), which saves about 15% of a single enqueue's time.

The claims are also *prepared* (``fast_cursor(connection, prepared=True)``): the server
parses and plans each one once per connection instead of once per claim, which took a
third of a claim's time (docs/performance.md). Django turns psycopg's automatic
preparation off (``prepare_threshold=None``), and psycopg then prepares nothing even
when asked; so the first prepared cursor on a connection sets a threshold no other query
reaches, which leaves the site's own statements unprepared as before. Preparation is
off where the connection may go through a pooler in transaction mode, whose server
sessions do not keep a client's prepared statements (``PREPARED_STATEMENTS`` in
docs/settings.md); and where such a pooler shows itself unannounced, by a prepared
statement that is missing or already exists on the server session it hands out, the
process stops preparing on that alias (``stop_preparing``), warns once, and runs the
statement again unprepared. Unless the alias says it may go through such a pooler, the same
session plans without JIT compilation (``SET jit = off``, once, with the threshold;
``_plan_without_jit`` says why). The cursor is still Django's wrapper: database errors
become ``django.db`` exceptions, ``execute_wrapper()`` hooks and query logging
(``DEBUG``, ``CaptureQueriesContext``, under which nothing is prepared) see the
statement.
"""

from __future__ import annotations

import functools
import logging
import secrets
import sys
import threading
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import get_settings

logger = logging.getLogger("django_cronqueue")

# A prepare_threshold no statement reaches: psycopg prepares only what is asked for.
ONLY_WHEN_ASKED = sys.maxsize

# The aliases on which this process prepares nothing: a pooler in transaction mode
# showed itself there (``stop_preparing``).
_unprepared_aliases: set[str] = set()
_unprepared_lock = threading.Lock()


def fast_cursor(connection: BaseDatabaseWrapper, *, prepared: bool = False) -> CursorWrapper:
    """A Django cursor on ``connection``; server-side binding on PostgreSQL with psycopg 3,
    and with ``prepared`` every statement it runs prepared (where ``prepares`` allows)."""
    if connection.vendor != "postgresql" or not _is_psycopg3(connection):
        return connection.cursor()
    import psycopg

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw = connection.connection
        # Django's query log (DEBUG, CaptureQueriesContext) reads the text of a statement
        # from psycopg's last unprepared execution: a logged cursor prepares nothing.
        if prepared and not connection.queries_logged and prepares(connection):
            if raw.prepare_threshold is None:
                raw.prepare_threshold = ONLY_WHEN_ASKED
                _name_apart(raw)
                if not behind_a_pooler(connection):
                    _plan_without_jit(raw)
            cursor: psycopg.Cursor[Any] = _preparing_cursor_class()(raw, connection.alias)
        else:
            if connection.alias in _unprepared_aliases:
                raw.prepare_threshold = None  # nor by the names it prepared before
            cursor = psycopg.Cursor(raw)
    # django-stubs types these as taking a CursorWrapper; they wrap the driver's cursor.
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)  # type: ignore[arg-type]
    return connection.make_cursor(cursor)  # type: ignore[arg-type]


def _name_apart(raw: Any) -> None:
    """Start this connection's statement names (psycopg's ``_pg3_<n>``) at a random
    number instead of 0. Every connection names its first statement ``_pg3_0``: where
    server sessions are shared (an unannounced transaction pooler), one connection's
    ``_pg3_0`` could be another statement prepared by another client, run with this
    one's parameters. Named apart, a statement is this connection's or is missing (an
    error ``stop_preparing`` handles). Left as it is if psycopg keeps its count elsewhere."""
    manager: Any = getattr(raw, "_prepared", None)
    if isinstance(getattr(manager, "_prepared_idx", None), int):
        manager._prepared_idx = secrets.randbits(48)


def _plan_without_jit(raw: Any) -> None:
    """Turn JIT compilation off for the session the claims run on (outside a transaction,
    which would take the setting back with it if it rolled back). PostgreSQL compiles a
    statement whose estimated cost passes ``jit_above_cost`` (100,000 by default), and a
    claim's estimate is the cost of walking its whole index whenever the planner expects
    fewer matching rows than the LIMIT: on a claim index a held transaction left large,
    it passes that bound, and each claim then spends tens of milliseconds compiling a
    statement that runs in one, a drain ten times slower until the statistics change."""
    from psycopg.pq import TransactionStatus

    if raw.info.transaction_status == TransactionStatus.IDLE:
        raw.execute("SET jit = off")


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether the worker's claims are prepared on ``connection``: ``PREPARED_STATEMENTS``,
    or when it is None (the default), unless the alias sets Django's
    ``DISABLE_SERVER_SIDE_CURSORS``, which Django asks of sites behind a transaction pooler."""
    if connection.alias in _unprepared_aliases:
        return False
    setting = get_settings().PREPARED_STATEMENTS
    if setting is not None:
        return setting
    return not behind_a_pooler(connection)


def stop_preparing(alias: str, error: BaseException) -> None:
    """A prepared statement was missing on the server session, or one of its name was
    already there: the sessions are shared, as behind a pooler in transaction mode
    (PgBouncer before 1.21, or without ``max_prepared_statements``), where every
    prepared statement would fail again. This process prepares nothing more on ``alias``
    and says so, once."""
    with _unprepared_lock:
        if alias in _unprepared_aliases:
            return
        _unprepared_aliases.add(alias)
    logger.warning(
        "Database alias %r: %s. A connection pooler in transaction mode (such as "
        "PgBouncer) seems to sit in front of PostgreSQL, handing each transaction to any "
        "server session. This process no longer prepares statements on %r and goes on. "
        "To say so up front, set 'DISABLE_SERVER_SIDE_CURSORS': True in "
        "DATABASES[%r], as Django asks behind such a pooler (or "
        "CRONQUEUE['PREPARED_STATEMENTS'] = False); PgBouncer 1.21+ with "
        "max_prepared_statements keeps them (PREPARED_STATEMENTS = True).",
        alias,
        str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
        alias,
        alias,
        extra={"outcome": "pooler_detected"},
    )


def behind_a_pooler(connection: BaseDatabaseWrapper) -> bool:
    """Whether the alias says it may go through a pooler in transaction mode (Django's
    ``DISABLE_SERVER_SIDE_CURSORS``), whose server sessions serve other clients too: a
    session setting made there would be theirs as well."""
    return bool(connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False))


def _is_psycopg3(connection: BaseDatabaseWrapper) -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


@functools.cache
def _preparing_cursor_class() -> type[Any]:
    import psycopg
    from psycopg.pq import TransactionStatus

    class PreparingCursor(psycopg.Cursor):
        """psycopg's cursor, preparing every statement it executes (unless told not to)."""

        def __init__(self, connection: Any, alias: str) -> None:
            super().__init__(connection)
            self.alias = alias  # the connection's Django alias

        def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
            options.setdefault("prepare", True)
            try:
                return super().execute(query, params, **options)
            except (
                psycopg.errors.DuplicatePreparedStatement,
                psycopg.errors.InvalidSqlStatementName,
            ) as exc:
                # A server session shared with other clients (a transaction pooler):
                # prepare nothing more there. Outside a transaction nothing ran: run it
                # again unprepared; inside one, the caller's transaction failed.
                stop_preparing(self.alias, exc)
                self.connection.prepare_threshold = None
                if self.connection.info.transaction_status != TransactionStatus.IDLE:
                    raise
                return super().execute(query, params, **{**options, "prepare": False})
            except psycopg.errors.FeatureNotSupported:
                # "cached plan must not change result type": a migration changed a column
                # the statement returns since it was prepared. Outside a transaction
                # nothing ran: forget this session's prepared statements (psycopg clears
                # its own record of them on DEALLOCATE ALL) and run it again, prepared anew.
                if self.connection.info.transaction_status != TransactionStatus.IDLE:
                    raise
                self.connection.execute("DEALLOCATE ALL")
                return super().execute(query, params, **options)

    return PreparingCursor
