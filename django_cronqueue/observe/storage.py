"""The job table's health on PostgreSQL: its dead rows, and the oldest transaction open
on the queue's database.

A claim and a completion each leave a dead row version behind; autovacuum reclaims them,
but only those older than every transaction still open on the database. One transaction
left open (a session idle in transaction, a long report, a stuck migration) therefore
lets the dead rows pile up for as long as it stays open, and the claim walks past them.
These two figures tell that story; ``storage_health`` reads both in one query.

PostgreSQL only: MariaDB purges old row versions by itself and SQLite keeps none, so
``storage_health`` returns None there. A role without ``pg_read_all_stats`` (granted by
``pg_monitor``) sees no ``xact_start`` of another role's sessions: those are not counted.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connections

from ..conf import database_alias
from ..models import Job

__all__ = ["OldestTransaction", "StorageHealth", "storage_health"]

# Client sessions of this database in a transaction, the oldest first. Autovacuum and the
# other background processes are left out: a vacuum's own transaction holds nothing back.
OLDEST_TRANSACTION = (
    "SELECT pid, state, application_name, "
    "EXTRACT(EPOCH FROM clock_timestamp() - xact_start)::float8 "
    "FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND state <> 'idle' AND xact_start IS NOT NULL "
    "ORDER BY xact_start LIMIT 1"
)
DEAD_TUPLES = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass"
LAST_VACUUM = (
    "SELECT GREATEST(last_vacuum, last_autovacuum) FROM pg_stat_user_tables "
    "WHERE relid = %s::regclass"
)


@dataclass(frozen=True)
class OldestTransaction:
    """The session whose transaction has been open longest (``pg_stat_activity``)."""

    pid: int
    state: str  # "active", "idle in transaction", ...
    application_name: str
    age_seconds: float


@dataclass(frozen=True)
class StorageHealth:
    #: the job table's dead row versions, by the statistics (``n_dead_tup``)
    dead_tuples: int
    #: None when no other session of the database is in a transaction
    oldest_transaction: OldestTransaction | None
    #: when the last vacuum of the job table ended (None: never, since the statistics' reset)
    last_vacuum: dt.datetime | None = None
    #: the database's clock when this was read
    read_at: dt.datetime | None = None

    @property
    def oldest_transaction_age(self) -> float:
        """Seconds; 0 when no transaction is open."""
        return 0.0 if self.oldest_transaction is None else self.oldest_transaction.age_seconds


def storage_health() -> StorageHealth | None:
    """The job table's dead rows and the oldest open transaction; None but on PostgreSQL.

    Read on ``DATABASE``: a replica keeps no dead-row counts of its own, and its sessions
    do not hold back the primary's vacuum (``observe.gauges`` leaves it out on one)."""
    connection = connections[database_alias()]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT ({DEAD_TUPLES}), ({LAST_VACUUM}), now(), o.* FROM (SELECT 1) AS one "
            f"LEFT JOIN ({OLDEST_TRANSACTION}) AS o ON TRUE",
            [Job._meta.db_table, Job._meta.db_table],
        )
        [(dead, vacuumed, read_at, pid, state, application, age)] = cursor.fetchall()
    oldest = None if pid is None else OldestTransaction(pid, state or "", application or "", age)
    return StorageHealth(
        dead_tuples=dead or 0, oldest_transaction=oldest, last_vacuum=vacuumed, read_at=read_at
    )
