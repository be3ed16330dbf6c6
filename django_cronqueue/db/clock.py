"""The database's clock, and a worker's clock corrected to it.

Leases, due times and cron occurrences are instants that workers on different hosts
compare. The database's clock is the reference: a worker measures how far its host's
clock runs ahead of it (``measure``), at start and on every heartbeat, subtracts that
offset from its own clock for every time decision (``CorrectedClock.now``), and refuses
to claim while the offset is beyond ``CRONQUEUE["MAX_CLOCK_SKEW"]`` (``CorrectedClock.trusted``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

logger = logging.getLogger("django_cronqueue")

SAMPLES = 3  # readings per measurement; the one with the shortest round trip is kept

# The current instant by the database server's clock, per vendor. PostgreSQL's now() is the
# start of the transaction; clock_timestamp() is the current time even inside one. SQLite
# has no server: its clock is this host's, read by the C library, not by Python.
NOW_SQL = {
    "postgresql": "SELECT clock_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def database_now(connection: BaseDatabaseWrapper) -> dt.datetime:
    """The current instant by the clock of ``connection``'s database (aware, UTC)."""
    sql = NOW_SQL.get(connection.vendor)
    if sql is None:
        raise NotImplementedError(
            f"django-cronqueue cannot read the clock of a {connection.vendor!r} database; "
            "use PostgreSQL, MySQL/MariaDB or SQLite."
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, [])  # no values; a fixed statement from NOW_SQL
        (value,) = cursor.fetchone()
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if timezone.is_naive(value):  # MySQL and SQLite: UTC without a zone
        value = value.replace(tzinfo=dt.timezone.utc)
    return value  # type: ignore[no-any-return]


class Reading(NamedTuple):
    """One measurement of this host's clock against the database's."""

    offset: float  # seconds this host's clock runs ahead of the database's (< 0: behind)
    round_trip: float  # seconds the query took; the offset is exact to half of it


def read_offset(ask: Callable[[], dt.datetime], samples: int = SAMPLES) -> Reading:
    """Ask the database's time ``samples`` times; each answer is taken to be the time of
    the round trip's midpoint. Returns the reading with the shortest round trip, the one
    a slow query or a thread switch disturbed least."""
    best: Reading | None = None
    for _ in range(max(1, samples)):
        host_before = timezone.now()
        started = time.monotonic()
        database_time = ask()
        round_trip = time.monotonic() - started
        host_midpoint = host_before + dt.timedelta(seconds=round_trip / 2)
        reading = Reading((host_midpoint - database_time).total_seconds(), round_trip)
        if best is None or reading.round_trip < best.round_trip:
            best = reading
    assert best is not None
    return best


def measure(using: str) -> Reading:
    """This host's clock against the clock of the database ``using``."""
    connection = connections[using]
    return read_offset(lambda: database_now(connection))


def beyond(offset: float | None, limit: float) -> bool:
    """True when a measured ``offset`` is too large to trust the clock, whichever way."""
    return offset is not None and abs(offset) > limit


def describe_offset(offset: float) -> str:
    """``12.3s ahead of`` / ``4.0s behind``, for messages about a host's clock."""
    return f"{abs(offset):.1f}s {'ahead of' if offset >= 0 else 'behind'}"


class CorrectedClock:
    """A worker's now: its host's clock minus the offset last measured against the
    database's. Not ``trusted`` until measured, nor while the offset is beyond
    ``max_skew`` seconds; a change of state is logged once (an ERROR when it stops being
    trusted). One thread updates it (the worker's heartbeat); any thread reads it."""

    def __init__(self, owner: str, max_skew: float) -> None:
        self.owner = owner  # named in the log messages
        self.max_skew = max_skew
        self.offset = 0.0
        self.trusted = False
        self.measured = False

    def now(self) -> dt.datetime:
        return timezone.now() - dt.timedelta(seconds=self.offset)

    def update(self, reading: Reading) -> None:
        """Take a new reading: correct by its offset, and trust the clock or not."""
        self.offset = reading.offset
        trusted = not beyond(reading.offset, self.max_skew)
        if not trusted and (self.trusted or not self.measured):
            logger.error(
                "%s: this host's clock is %s the database's, more than MAX_CLOCK_SKEW (%gs); "
                "claiming no jobs until it is back within. Fix the host's time "
                "synchronisation (NTP), or the database server's.",
                self.owner,
                describe_offset(reading.offset),
                self.max_skew,
            )
        elif trusted and self.measured and not self.trusted:
            logger.warning(
                "%s: this host's clock is back within MAX_CLOCK_SKEW (%gs) of the "
                "database's (%s it); claiming again.",
                self.owner,
                self.max_skew,
                describe_offset(reading.offset),
            )
        self.trusted = trusted
        self.measured = True
