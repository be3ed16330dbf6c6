# Locking model: SQLite has one writer at a time for the whole database. A claim is a
# single UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING statement, atomic by
# itself; with capped names it is a BEGIN IMMEDIATE transaction, which takes the write
# lock before reading, so counting the running rows and claiming cannot interleave. The
# same holds for names with limit_by or rate_limit (claiming.flow): no FlowLock row needs
# locking, only the saturated keys' blocked_until is written. A fair queue's claim
# (claiming.fair) and the claim ranked by aged priority (claiming.aging) run in a BEGIN
# IMMEDIATE transaction as well, and so does a fair queue's claim of its capped and
# limited names (claiming.fairflow).
"""Claiming on SQLite (3.35 or newer, for RETURNING)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from . import aging, fair, fairflow, flow
from .base import ClaimedJob, ClaimRequest, claim_returning, claim_two_step


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    if not request.capped:
        return claim_returning(connection, request, row_lock="")
    with immediate_transaction(connection):
        return claim_two_step(connection, request, row_lock="", name_lock="")


def claim_limited(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with immediate_transaction(connection):
        return flow.claim_limited(connection, request, row_lock="", lock_keys=None)


def claim_aged(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with immediate_transaction(connection):
        return aging.claim_aged(connection, request, row_lock="")


def claim_fair(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    with immediate_transaction(connection):
        return fair.claim_fair(connection, request, queue, row_lock="")


def claim_fair_flow(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    with immediate_transaction(connection):
        return fairflow.claim_fair_flow(
            connection, request, queue, row_lock="", name_lock="", lock_keys=None
        )


@contextmanager
def immediate_transaction(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """A write-locked transaction, or a savepoint when one is already open."""
    if connection.in_atomic_block:
        with transaction.atomic(using=connection.alias):
            yield
        return
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")
        raise
    with connection.cursor() as cursor:
        cursor.execute("COMMIT")
