# Locking model: row locks. Claimers select candidates with FOR UPDATE SKIP LOCKED, so
# concurrent workers skip each other's rows instead of waiting, and the UPDATE that marks
# them running is the same statement (no cap) or the same transaction (capped names,
# whose lock row is taken FOR UPDATE while the running rows are counted, at READ
# COMMITTED whatever isolation level the connection's OPTIONS ask for). A worker's
# quick successes can ride along in the same statement (complete_and_claim): one commit
# for "these are done, give me more". Names with limit_by or rate_limit take the flow
# claim (claiming.flow): their FlowLock rows are locked by one INSERT ... ON CONFLICT DO
# UPDATE ... WHERE FALSE (which locks an existing row without writing it), and the
# claim's writes are one statement of three data-modifying CTEs. A fair queue's claim
# (claiming.fair) reads its keys' turns, takes each key's rows FOR UPDATE SKIP LOCKED and
# locks the key rows it writes with SKIP LOCKED too: it never waits.
"""Claiming on PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..db.cursors import fast_cursor
from ..models import JobStatus
from ..models.statuses import STATUS_EXPRESSION
from . import aging, fair, flow
from .base import (
    ORDER,
    PLAIN_SUCCESS,
    RETURNED_COLUMNS,
    SUCCEEDED_SET,
    TABLE,
    ClaimedJob,
    ClaimRequest,
    adapt,
    claim_returning,
    claim_set_clause,
    claim_set_params,
    claim_two_step,
    due_filter,
    limit_clause,
    read_committed_transaction,
    row_to_job,
    succeeded_set_params,
)
from .flow import FLOW_TABLE, START_TABLE

ROW_LOCK = " FOR UPDATE SKIP LOCKED"


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    if not request.capped:
        return claim_returning(connection, request, row_lock=ROW_LOCK)
    with read_committed_transaction(connection):
        return claim_two_step(connection, request, row_lock=ROW_LOCK, name_lock=" FOR UPDATE")


def claim_limited(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return flow.claim_limited(
            connection, request, row_lock=ROW_LOCK, lock_keys=lock_keys, write=write_plan
        )


def claim_aged(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return aging.claim_aged(connection, request, row_lock=ROW_LOCK)


def claim_fair(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return fair.claim_fair(connection, request, queue, row_lock=ROW_LOCK)


LOCK_KEYS = (
    f"INSERT INTO {FLOW_TABLE} (name, limit_key) "
    "SELECT * FROM unnest(%s::text[], %s::text[]) AS k(name, limit_key) ORDER BY 1, 2 "
    f"ON CONFLICT (name, limit_key) DO UPDATE SET blocked_until = {FLOW_TABLE}.blocked_until "
    "WHERE FALSE"
)


def lock_keys(cursor: Any, keys: list[flow.Key]) -> None:
    """Lock the FlowLock rows of ``keys`` in (name, key) order, creating the missing ones:
    a conflicting row is locked, not updated (the WHERE is false)."""
    cursor.execute(LOCK_KEYS, [[name for name, _ in keys], [key for _, key in keys]])


WRITE_PLAN = (
    f"WITH claimed AS (UPDATE ONLY {TABLE} SET {claim_set_clause()} "
    "WHERE id = ANY(%s::bigint[]) RETURNING 1), "
    f"logged AS (INSERT INTO {START_TABLE} (name, limit_key, started_at) "
    "SELECT t.n, t.k, %s FROM unnest(%s::text[], %s::text[]) AS t(n, k) RETURNING 1), "
    f"blocked AS (UPDATE {FLOW_TABLE} f SET blocked_until = t.u "
    "FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) AS t(n, k, u) "
    "WHERE f.name = t.n AND f.limit_key = t.k RETURNING 1) "
    "SELECT (SELECT COUNT(*) FROM claimed), (SELECT COUNT(*) FROM logged), "
    "(SELECT COUNT(*) FROM blocked)"
)


def write_plan(
    cursor: Any, connection: BaseDatabaseWrapper, request: ClaimRequest, plan: flow.Plan
) -> None:
    """The flow claim's three writes in one statement (the key rows exist: locked)."""
    cursor.execute(
        WRITE_PLAN,
        [
            *claim_set_params(request),
            [job.id for job, _ in plan.kept],
            request.now,
            [name for name, _ in plan.starts],
            [key for _, key in plan.starts],
            [name for (name, _), _ in plan.blocked],
            [key for (_, key), _ in plan.blocked],
            [until for _, until in plan.blocked],
        ],
    )


# The completion's rows are found by their ids only (base.running_by_id says why).
BY_ID_RUNNING = f"{STATUS_EXPRESSION} = '{JobStatus.RUNNING}'"


def complete_and_claim(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    succeeded: Sequence[ClaimedJob],
    finished_at: dt.datetime,
) -> tuple[list[ClaimedJob], set[int]]:
    """Mark ``succeeded`` (each guarded by its lease token) and claim more, in one
    statement. Returns the claimed jobs and the ids actually marked succeeded."""
    where, params = due_filter(request, request.names, names_as_array=True)
    padding = ", ".join(["NULL"] * (RETURNED_COLUMNS.count(",")))
    sql = (
        f"WITH done AS (UPDATE ONLY {TABLE} SET {SUCCEEDED_SET} "
        f"WHERE {BY_ID_RUNNING} "
        "AND (id, lock_token) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))"
        f"{PLAIN_SUCCESS} RETURNING id), "
        f"picked AS MATERIALIZED (SELECT id FROM ONLY {TABLE} WHERE {where} {ORDER} "
        f"{limit_clause(request)}{ROW_LOCK}), "
        f"claimed AS (UPDATE ONLY {TABLE} SET {claim_set_clause()} "
        f"WHERE id IN (SELECT id FROM picked) RETURNING {RETURNED_COLUMNS}) "
        f"SELECT FALSE, {RETURNED_COLUMNS} FROM claimed "
        f"UNION ALL SELECT TRUE, id, {padding} FROM done"
    )
    done_params = [
        *succeeded_set_params(finished_at),
        [job.id for job in succeeded],
        [job.token for job in succeeded],
    ]
    with fast_cursor(connection, prepared=True) as cursor:
        cursor.execute(sql, adapt(connection, [*done_params, *params, *claim_set_params(request)]))
        rows = cursor.fetchall()
    claimed = [row_to_job(row[1:], request.token, claimed=True) for row in rows if not row[0]]
    return claimed, {row[1] for row in rows if row[0]}
