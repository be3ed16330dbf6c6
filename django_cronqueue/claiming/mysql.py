# Locking model: InnoDB row locks. MySQL 8.0 and MariaDB 10.6 have SELECT ... FOR UPDATE
# SKIP LOCKED but no UPDATE ... RETURNING, so a claim is one short transaction: select
# and lock the candidates (skipping rows another claimer holds), lock the lock rows of
# capped names, then UPDATE the kept ids. The transaction runs at READ COMMITTED (Django's
# default for MySQL, and set for the transaction when OPTIONS ask for another level), so
# the running counts read after taking a name's lock row are current. Names with limit_by
# or rate_limit take the flow claim (claiming.flow); their FlowLock rows are locked by one
# INSERT ... ON DUPLICATE KEY UPDATE, which takes an exclusive lock on an existing row
# (a plain INSERT IGNORE would take a shared one, and two claimers upgrading their shared
# locks deadlock). A fair queue's claim (claiming.fair) reads each key's candidates without
# a lock and then locks the rows it claims by primary key, SKIP LOCKED: InnoDB's SKIP LOCKED
# waits on the claim index's entries of rows another claim has just changed, and a claim
# that waited while holding its earlier keys' rows could deadlock with another.
# A fair queue's capped and limited names (claiming.fairflow) take a transaction per round
# of turns, their candidates likewise locked by primary key.
"""Claiming on MySQL and MariaDB."""

from __future__ import annotations

import functools
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from . import aging, fair, fairflow, flow
from .base import ClaimedJob, ClaimRequest, claim_two_step, read_committed_transaction
from .flow import FLOW_TABLE

ROW_LOCK = " FOR UPDATE SKIP LOCKED"


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return claim_two_step(connection, request, row_lock=ROW_LOCK, name_lock=" FOR UPDATE")


def claim_limited(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return flow.claim_limited(connection, request, row_lock=ROW_LOCK, lock_keys=lock_keys)


def claim_aged(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return aging.claim_aged(connection, request, row_lock=ROW_LOCK)


def claim_fair(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return fair.claim_fair(connection, request, queue, row_lock=ROW_LOCK, lock_by_id=True)


def claim_fair_flow(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    return fairflow.claim_fair_flow(
        connection,
        request,
        queue,
        row_lock=ROW_LOCK,
        name_lock=" FOR UPDATE",
        lock_keys=lock_keys,
        transaction=functools.partial(read_committed_transaction, connection),
    )


def lock_keys(cursor: Any, keys: list[flow.Key]) -> None:
    """Lock the FlowLock rows of ``keys`` (sorted) in that order, creating the missing ones."""
    cursor.execute(
        f"INSERT INTO {FLOW_TABLE} (name, limit_key) VALUES "
        + ", ".join(["(%s, %s)"] * len(keys))
        + " ON DUPLICATE KEY UPDATE blocked_until = blocked_until",
        [value for key in keys for value in key],
    )
