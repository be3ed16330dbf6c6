"""A worker's watch over the job table's storage on PostgreSQL (``observe.storage``).

``StorageWatch`` warns of a transaction open on the queue's database longer than
``WARN_TRANSACTION_AGE`` seconds, or of more than ``WARN_DEAD_TUPLES`` dead rows in the job
table. Checked at most every ``LEASE`` seconds from the housekeeping, and each warned of
once per crossing: again only after it went back under its threshold.

``HoldWatch`` tells the worker's claim floor (``claiming.floor``) when a transaction has
been open for more than ``HELD_AFTER`` seconds, checked every ``HOLD_CHECK_EVERY``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING

from django.db import connections

from ..claiming.floor import ClaimFloors
from ..conf import database_alias, get_settings

if TYPE_CHECKING:  # the read model loads at the first check, not before the first claim
    from ..observe.storage import StorageHealth

logger = logging.getLogger("django_cronqueue")

# Dead claim-index entries pile up at the drain's rate while a transaction is open: after
# 10 s at 3,000 jobs/s a claim walks 30,000 of them (a few milliseconds).
HELD_AFTER = 10.0
HOLD_CHECK_EVERY = 5.0
# Once the transaction ends, what died while it was open stays until a vacuum removes it:
# the claims keep their floor until then, or for this long at most.
AFTER_HOLD_AT_MOST = dt.timedelta(minutes=5)


def describe_transaction(health: StorageHealth, threshold: float) -> str:
    oldest = health.oldest_transaction
    if oldest is None:  # never over a threshold: its age reads 0
        return "No transaction is open on the queue's database."
    return (
        f"A transaction has been open on the queue's database for {oldest.age_seconds:.0f}s "
        f"(more than WARN_TRANSACTION_AGE, {threshold:g}s): pid {oldest.pid}, "
        f"{oldest.state}, application {oldest.application_name!r}. Until it ends, autovacuum "
        f"cannot reclaim the job rows that died since it began ({health.dead_tuples} dead "
        "now) and claims slow down; end it (pg_terminate_backend) if it is stuck."
    )


def describe_dead_tuples(health: StorageHealth, threshold: int) -> str:
    return (
        f"The job table holds {health.dead_tuples} dead rows (more than WARN_DEAD_TUPLES, "
        f"{threshold}): autovacuum is not keeping up or is held back by an open transaction "
        f"(the oldest is {health.oldest_transaction_age:.0f}s old); see pg_stat_activity "
        "and pg_stat_user_tables.last_autovacuum."
    )


class StorageWatch:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_check = 0.0  # the first housekeeping checks at once
        self.old_transaction = False  # over WARN_TRANSACTION_AGE at the last check
        self.many_dead = False  # over WARN_DEAD_TUPLES at the last check

    def check(self) -> None:
        settings = get_settings()
        age_limit, dead_limit = settings.WARN_TRANSACTION_AGE, settings.WARN_DEAD_TUPLES
        if age_limit is None and dead_limit is None:
            return
        if connections[database_alias()].vendor != "postgresql":
            return
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + self.interval
        from ..observe.storage import storage_health

        health = storage_health()
        if health is None:
            return
        if age_limit is not None:
            old = health.oldest_transaction_age > age_limit
            if old and not self.old_transaction:
                logger.warning("%s", describe_transaction(health, age_limit))
            self.old_transaction = old
        if dead_limit is not None:
            dead = health.dead_tuples > dead_limit
            if dead and not self.many_dead:
                logger.warning("%s", describe_dead_tuples(health, dead_limit))
            self.many_dead = dead


class HoldWatch:
    """Sets ``floors.held`` from the oldest open transaction, from the housekeeping."""

    def __init__(self, floors: ClaimFloors) -> None:
        self.floors = floors
        self.next_check = 0.0
        self.released: StorageHealth | None = None  # read when the transaction had ended

    def check(self) -> StorageHealth | None:
        """The job table's health when read (every ``HOLD_CHECK_EVERY``), else None."""
        if time.monotonic() < self.next_check:
            return None
        self.next_check = time.monotonic() + HOLD_CHECK_EVERY
        if connections[database_alias()].vendor != "postgresql":
            return None
        from ..observe.storage import storage_health

        health = storage_health()
        if health is None:
            return None
        held = self._held(health)
        if held != self.floors.held:
            logger.info("%s", describe_hold(health) if held else describe_end(health))
        self.floors.set_held(held)
        return health

    def _held(self, health: StorageHealth) -> bool:
        """Held while a transaction is open past HELD_AFTER, then until a vacuum of the
        job table that ended after it removed dead rows (one that began before it ended
        could remove none of them), or AFTER_HOLD_AT_MOST."""
        if health.oldest_transaction_age > HELD_AFTER:
            self.released = None
            return True
        if not self.floors.held:
            return False
        if self.released is None:
            self.released = health
        released_at = self.released.read_at
        if released_at is None or health.read_at is None:
            return False
        vacuumed = (
            health.last_vacuum is not None
            and health.last_vacuum > released_at
            and health.dead_tuples <= self.released.dead_tuples
        )
        return not vacuumed and health.read_at - released_at < AFTER_HOLD_AT_MOST


def describe_end(health: StorageHealth) -> str:
    return (
        f"The held transaction ended ({health.dead_tuples} dead rows in the job table now): "
        "claims start from the head of the queue again."
    )


def describe_hold(health: StorageHealth) -> str:
    oldest = health.oldest_transaction
    if oldest is None:  # never held without one
        return "No transaction is held open."
    return (
        f"A transaction has been open for {oldest.age_seconds:.0f}s (pid {oldest.pid}, "
        f"{oldest.state}): until it ends and a vacuum follows, claims start after the last "
        "job claimed (a claim from the head of the queue runs once per poll interval at "
        "most), expired leases are looked for every 10s and no finished job moves to history."
    )
