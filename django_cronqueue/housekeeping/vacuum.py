"""The worker's own vacuum of the job table on PostgreSQL, between autovacuum's visits.

Each claim and each completion leaves a dead version of a job row, and an entry of the
claim index pointing at it that every later claim steps over until a vacuum removes it.
Autovacuum visits a table at most once per ``autovacuum_naptime`` (a minute, for the whole
server), and the rows that died while a visit ran stay until the next one: at thousands
of jobs a second, a claim reads more pages every second of that minute, and the drain
falls by half or more in the minutes after a visit that left many behind
(docs/performance.md, "The worker vacuums the job table").

So the housekeeping vacuums the job table itself once it holds ``DEAD_ROWS`` dead rows
and no vacuum (its own, another worker's, autovacuum's) has ended in the last ``EVERY``
seconds, nor its own last one in ``SHARE`` times what that one took: a vacuum reads
every index of the table whole, and on a table that a held transaction left swollen it
takes seconds, which the drain would pay every ``EVERY`` seconds. ``SKIP_LOCKED``: a
vacuum already running (another worker's, autovacuum's) is not waited for, and
autovacuum is never made to give way. ``TRUNCATE false``: no exclusive lock on the
table, which every claim would wait for; autovacuum still gives the empty end of the
table back. Not while the worker's claim floor is held (``storage_watch.HoldWatch``):
while a transaction is open it would remove nothing, and after it ends the first vacuum
reads a table the transaction left swollen, for tens of seconds (22 s after the held
run's hold), which autovacuum's own process does (the floor is let go after that vacuum,
or five minutes at most). Only by a role that owns the table (or is a superuser):
another would be refused with a WARNING in the server's log at every try.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

from django.db import connections

from ..conf import database_alias
from ..models import Job

if TYPE_CHECKING:  # the read model loads when a worker first reads the table's health
    from ..observe.storage import StorageHealth

EVERY = dt.timedelta(seconds=15)
DEAD_ROWS = 50_000
SHARE = 20  # a worker's vacuums take at most a twentieth of its time


class Vacuums:
    """A worker's vacuums of the job table, from its housekeeping."""

    def __init__(self) -> None:
        self.not_before = 0.0  # monotonic: SHARE times its last vacuum's duration after it

    def check(self, health: StorageHealth, *, held: bool) -> bool:
        """Vacuum the job table if ``health`` says it is due and the claim floor is not
        ``held``; whether it did."""
        if held or not due(health) or time.monotonic() < self.not_before:
            return False
        started = time.monotonic()
        try:
            return vacuum_job_table()
        finally:  # a vacuum cancelled (statement_timeout) is spaced as one that ended
            ended = time.monotonic()
            self.not_before = ended + SHARE * (ended - started)


def due(health: StorageHealth) -> bool:
    """Whether the job table, as ``health`` read it, is due a vacuum."""
    if health.dead_tuples < DEAD_ROWS or health.read_at is None:
        return False
    return health.last_vacuum is None or health.read_at - health.last_vacuum >= EVERY


# Whether the session's role has the privileges of the table's owner (a superuser has).
OWNS_TABLE = "SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = %s::regclass"


def vacuum_job_table() -> bool:
    """Vacuum the job table unless a vacuum of it is running; False where it cannot run
    (not PostgreSQL, inside a transaction, a role that does not own the table)."""
    connection = connections[database_alias()]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    with connection.cursor() as cursor:
        cursor.execute(OWNS_TABLE, [Job._meta.db_table])
        if not cursor.fetchone()[0]:
            return False
        table = connection.ops.quote_name(Job._meta.db_table)
        cursor.execute(f"VACUUM (SKIP_LOCKED, TRUNCATE false) {table}")
    return True
