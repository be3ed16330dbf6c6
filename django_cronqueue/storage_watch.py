"""A worker's warnings about the job table's storage on PostgreSQL (``observe.storage``):
a transaction open on the queue's database longer than ``WARN_TRANSACTION_AGE`` seconds,
or more than ``WARN_DEAD_TUPLES`` dead rows in the job table. Checked at most every
``LEASE`` seconds from the housekeeping, and each warned of once per crossing: again
only after it went back under its threshold."""

from __future__ import annotations

import logging
import time

from django.db import connections

from .conf import database_alias, get_settings
from .observe.storage import StorageHealth, storage_health

logger = logging.getLogger("django_cronqueue")


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
