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
# (claiming.fair) reads its keys' turns in one statement, then takes every planned key's
# rows FOR UPDATE SKIP LOCKED, marks them running and writes the turns of the key rows it
# can lock with SKIP LOCKED too in another (serve_plan): it never waits, and needs no
# transaction around the two at READ COMMITTED. A fair queue's capped and limited names
# (claiming.fairflow) take a READ COMMITTED transaction per round of turns.
"""Claiming on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..db.cursors import fast_cursor
from ..models import JobStatus
from ..models.statuses import STATUS_EXPRESSION
from . import aging, fair, fairflow, flow
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
    reads_committed,
    row_to_job,
    succeeded_set_params,
)
from .erasing import NOTHING_ERASED, erased_texts
from .fair import PROBED_KEY_ROWS, SHARE_TABLE
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
    """A fair queue's claim: at READ COMMITTED and outside a transaction, its statements
    each on their own (each round's rows and turns are one statement, ``serve_plan``, and
    the key rows locked before they are written take a transaction of their own): two
    round trips to the server for most claims, not four."""
    if connection.in_atomic_block or not reads_committed(connection):
        with read_committed_transaction(connection):
            return fair.claim_fair(connection, request, queue, row_lock=ROW_LOCK, serve=serve_plan)
    return fair.claim_fair(
        connection,
        request,
        queue,
        row_lock=ROW_LOCK,
        serve=serve_plan,
        atomic=functools.partial(transaction.atomic, using=connection.alias),
    )


def claim_fair_flow(
    connection: BaseDatabaseWrapper, request: ClaimRequest, queue: str
) -> list[ClaimedJob]:
    """A fair queue's capped and limited names in turns: a transaction per round."""
    return fairflow.claim_fair_flow(
        connection,
        request,
        queue,
        row_lock=ROW_LOCK,
        name_lock=" FOR UPDATE",
        lock_keys=lock_keys,
        write=write_plan,
        transaction=functools.partial(read_committed_transaction, connection),
    )


# A fair queue's plan in one statement: the planned keys (``k``: the key, its rows
# planned, its row's id, ``used`` and ``weight`` as read, the place of its last job in
# the plan), each key's rows in claim order (a LIMIT per key, FOR UPDATE SKIP LOCKED
# inside the LATERAL subquery, on the partial index of keyed rows) picked in a
# MATERIALIZED CTE read once (see base.ORDER), their UPDATE, and the turns of the keys
# that gave rows, on those key rows the claim can lock at once: ``used``, and for a key
# whose turn ended a ``turn_at`` after every other key's, in the order of their last jobs
# in the plan. A plan with the key "" takes fair.claim_fair's statements per key.
PLANNED = (
    "WITH k AS (SELECT * FROM unnest(%s::text[], %s::int[], %s::bigint[], %s::int[], "
    "%s::int[], %s::int[]) AS k(fair_key, n, share_id, used, weight, last)), "
    "picked AS MATERIALIZED (SELECT k.fair_key, j.id FROM k CROSS JOIN LATERAL "
)
SERVED_TURNS = (
    f"claimed AS (UPDATE ONLY {TABLE} SET {claim_set_clause()} "
    f"WHERE id IN (SELECT id FROM picked) RETURNING fair_key, {RETURNED_COLUMNS}), "
    "given AS (SELECT k.share_id, k.used + COUNT(*) AS used, k.weight, k.last FROM picked "
    "JOIN k USING (fair_key) GROUP BY k.share_id, k.used, k.weight, k.last), "
    f"locked AS MATERIALIZED (SELECT id FROM {SHARE_TABLE} "
    "WHERE id IN (SELECT share_id FROM given) FOR UPDATE SKIP LOCKED), "
    f"turns AS (UPDATE {SHARE_TABLE} s SET used = mod(g.used, g.weight), "
    "turn_at = CASE WHEN g.used >= g.weight THEN GREATEST(%s, (SELECT MAX(turn_at) "
    f"FROM {SHARE_TABLE} WHERE queue = %s) + interval '1 microsecond') "
    "+ g.last * interval '1 microsecond' ELSE s.turn_at END, "
    "idle_until = NULL, idle_checks = 0 FROM given g "
    "WHERE s.id = g.share_id AND s.id IN (SELECT id FROM locked) RETURNING 1) "
    f"SELECT fair_key, {RETURNED_COLUMNS} FROM claimed"
)


def serve_plan(
    cursor: Any, request: ClaimRequest, served: list[fair.Share]
) -> dict[fair.Share, list[ClaimedJob]]:
    """``fair.claim_fair``'s ``Serve`` in one statement (``PLANNED``), for keys other
    than ""."""
    connection = cursor.db
    where, params = due_filter(request, request.names)
    sql = (
        f"{PLANNED}(SELECT id FROM ONLY {TABLE} WHERE {where} {PROBED_KEY_ROWS} {ORDER} "
        f"LIMIT k.n{ROW_LOCK}) j), {SERVED_TURNS}"
    )
    planned = Counter(served)
    last = {share: place for place, share in enumerate(served)}
    keys = list(planned)
    values = [
        [share.fair_key for share in keys],
        list(planned.values()),
        [share.id for share in keys],
        [share.used for share in keys],
        [share.weight for share in keys],
        [last[share] for share in keys],
        *params,
        *claim_set_params(request),
        request.now,
        request.queues[0] if request.queues else "",
    ]
    with fast_cursor(connection, prepared=True) as fast:
        fast.execute(sql, adapt(connection, values))
        rows = fast.fetchall()
    by_key: dict[str, list[ClaimedJob]] = {share.fair_key: [] for share in keys}
    for row in rows:
        by_key[row[0]].append(row_to_job(row[1:], request.token, claimed=True))
    return {share: by_key[share.fair_key] for share in keys}


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


# The sensitive jobs among the successes: each row marked succeeded with its payload, its
# secrets erased (``claiming.erasing``), by the same statement, and the ids it wrote.
ERASING_DONE = (
    f"erased AS (UPDATE ONLY {TABLE} t SET {SUCCEEDED_SET}, payload = e.payload "
    "FROM unnest(%s::bigint[], %s::text[], %s::jsonb[]) AS e(id, token, payload) "
    f"WHERE t.id = e.id AND t.lock_token = e.token AND {BY_ID_RUNNING}{PLAIN_SUCCESS} "
    "RETURNING t.id), "
)
ERASED_ROWS = (
    f" UNION ALL SELECT TRUE, id, {', '.join(['NULL'] * RETURNED_COLUMNS.count(','))} FROM erased"
)


def complete_and_claim(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    succeeded: Sequence[ClaimedJob],
    finished_at: dt.datetime,
    erased: Mapping[int, Any] = NOTHING_ERASED,
) -> tuple[list[ClaimedJob], set[int]]:
    """Mark ``succeeded`` (each guarded by its lease token) and claim more, in one
    statement. Returns the claimed jobs and the ids actually marked succeeded. The
    sensitive jobs among them (``erased``: their erased payloads by id) are written with
    their payloads (``ERASING_DONE``)."""
    where, params = due_filter(request, request.names, names_as_array=True)
    padding = ", ".join(["NULL"] * (RETURNED_COLUMNS.count(",")))
    plain, erasing = succeeded, []
    if erased:
        plain = [job for job in succeeded if job.id not in erased]
        erasing = [job for job in succeeded if job.id in erased]
    sql = (
        f"WITH done AS (UPDATE ONLY {TABLE} SET {SUCCEEDED_SET} "
        f"WHERE {BY_ID_RUNNING} "
        "AND (id, lock_token) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))"
        f"{PLAIN_SUCCESS} RETURNING id), "
        + (ERASING_DONE if erasing else "")
        + f"picked AS MATERIALIZED (SELECT id FROM ONLY {TABLE} WHERE {where} {ORDER} "
        f"{limit_clause(request)}{ROW_LOCK}), "
        f"claimed AS (UPDATE ONLY {TABLE} SET {claim_set_clause()} "
        f"WHERE id IN (SELECT id FROM picked) RETURNING {RETURNED_COLUMNS}) "
        f"SELECT FALSE, {RETURNED_COLUMNS} FROM claimed "
        f"UNION ALL SELECT TRUE, id, {padding} FROM done" + (ERASED_ROWS if erasing else "")
    )
    done_params = [
        *succeeded_set_params(finished_at),
        [job.id for job in plain],
        [job.token for job in plain],
    ]
    if erasing:
        done_params += [
            *succeeded_set_params(finished_at),
            [job.id for job in erasing],
            [job.token for job in erasing],
            erased_texts(erasing, erased),
        ]
    with fast_cursor(connection, prepared=True) as cursor:
        cursor.execute(sql, adapt(connection, [*done_params, *params, *claim_set_params(request)]))
        rows = cursor.fetchall()
    claimed = [row_to_job(row[1:], request.token, claimed=True) for row in rows if not row[0]]
    return claimed, {row[1] for row in rows if row[0]}
