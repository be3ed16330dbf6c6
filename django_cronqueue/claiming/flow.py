"""The claim of jobs with ``limit_by`` or ``rate_limit``: limits per (name, limit key).

One transaction per claim, opened by the vendor module (READ COMMITTED on PostgreSQL
and MySQL, ``BEGIN IMMEDIATE`` on SQLite):

1. **Candidates**: due pending rows of the limited names in claim order, minus the keys
   that are saturated already (running rows at the cap; a rate limit's
   ``FlowLock.blocked_until`` still ahead). The statement computes that set once, so a
   key with a backlog of thousands of due rows never hides the keys behind it. Rows
   are locked ``FOR UPDATE SKIP LOCKED`` where the vendor has row locks.
2. **Lock** the ``FlowLock`` rows of the candidates' keys, in (name, key) order,
   creating those that are missing (one upsert on PostgreSQL and MySQL; SQLite's
   transaction is exclusive already).
3. **Count**, now that no other claimer of those keys can commit: running rows per key
   and, per rate-limited key, the starts logged in its window and the oldest of them.
4. **Keep** the candidates that fit, in claim order; mark them running; log their starts
   (``JobStart``, rate-limited names); set ``blocked_until`` of each key the claim
   saturated, for step 1 of later claims.

Candidates that do not fit are not written: they stay pending, with their ``run_at``.
In a fair queue the same limits are claimed in the keys' turns (``claiming.fairflow``,
over ``ready_filter``, ``count_keys``, ``room_of`` and ``plan_of``).

Why the window holds: a claim adds its starts at its ``now`` only while the starts
logged after ``now - window`` (however far ahead another worker's clock put them) plus
its own stay within N, and claims of one key are serialized by its lock. If some window
``[a, a + window)`` held N + 1 logged starts, the last of them to be claimed would have
counted the other N (each is after ``a``, which is after its ``now - window``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.constants import OnConflict

from ..models import FlowLock, JobStart, JobStatus
from .base import (
    ORDER,
    PAUSE_TABLE,
    RETURNED_COLUMNS,
    TABLE,
    ClaimedJob,
    ClaimRequest,
    adapt,
    claim_set_clause,
    claim_set_params,
    due_filter,
    is_postgresql,
    job_rows,
    placeholders,
    row_to_job,
    to_datetime,
)

FLOW_TABLE = FlowLock._meta.db_table
START_TABLE = JobStart._meta.db_table

# A candidate's key, as the candidate statement names it (the outer table's columns).
PAIR = f"({TABLE}.name, {TABLE}.limit_key)"
# Paused names and queues, as two sets the statement computes once: the candidate scan
# may pass a long saturated backlog, and MariaDB runs a correlated NOT EXISTS (the
# other claims' NOT_PAUSED) once per row it scans. A pause row sets one of the two.
NOT_PAUSED_SETS = (
    f" AND {TABLE}.name NOT IN (SELECT p.name FROM {PAUSE_TABLE} p "
    "WHERE p.name <> '' AND (p.until IS NULL OR p.until > %s)) "
    f"AND {TABLE}.queue NOT IN (SELECT p.queue FROM {PAUSE_TABLE} p "
    "WHERE p.queue <> '' AND (p.until IS NULL OR p.until > %s))"
)

Key = tuple[str, str]  # (job name, limit key)
Candidate = tuple[ClaimedJob, str]  # a candidate row and its limit key


@dataclass
class Counts:
    """What a key has, counted under its lock."""

    running: int = 0
    starts: int = 0  # logged starts in its rate window
    oldest: dt.datetime | None = None  # the oldest of those


@dataclass
class Plan:
    """What a claim writes: the candidates kept, the starts to log, and the keys it
    saturated, with the instant each may start again."""

    kept: list[Candidate]
    starts: list[Key]
    blocked: list[tuple[Key, dt.datetime]]


LockKeys = Callable[[Any, list[Key]], None]
WritePlan = Callable[[Any, BaseDatabaseWrapper, ClaimRequest, Plan], None]


def claim_limited(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    *,
    row_lock: str,
    lock_keys: LockKeys | None,
    write: WritePlan | None = None,
) -> list[ClaimedJob]:
    """Steps 1 to 4 above, inside the caller's transaction."""
    if not request.limited or request.limit <= 0:
        return []
    with connection.cursor() as cursor:
        sql, params = candidates_statement(connection, request, row_lock)
        cursor.execute(sql, adapt(connection, params))
        candidates = [
            (row_to_job(row[:-1], request.token, claimed=False), row[-1])
            for row in cursor.fetchall()
        ]
        if not candidates:
            return []
        keys = sorted({(job.name, key) for job, key in candidates})
        if lock_keys is not None:
            lock_keys(cursor, keys)
        plan = fit(request, candidates, count_keys(cursor, connection, request, keys))
        if plan.kept or plan.blocked:
            (write or write_plan)(cursor, connection, request, plan)
    return [job for job, _ in plan.kept]


def candidates_statement(
    connection: BaseDatabaseWrapper, request: ClaimRequest, row_lock: str
) -> tuple[str, list[Any]]:
    """The due rows of the limited names, in claim order, minus the saturated keys."""
    where, params = ready_filter(
        connection, request, list(request.limited), names_as_array=is_postgresql(connection)
    )
    sql = (
        f"SELECT {RETURNED_COLUMNS}, limit_key FROM {job_rows(connection)} WHERE {where} {ORDER} "
        f"LIMIT %s{row_lock}"
    )
    return sql, [*params, request.limit]


def ready_filter(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    names: list[str],
    *,
    names_as_array: bool,
) -> tuple[str, list[Any]]:
    """``WHERE`` clause and params of the due rows of ``names`` that no pause holds, minus
    those of the limited names' saturated keys (``names`` may hold capped names too: no
    key of theirs is in the saturated sets)."""
    where, params = due_filter(request, names, names_as_array=names_as_array, pauses=False)
    where += NOT_PAUSED_SETS
    params += [request.now, request.now]
    if any(limits.rate is not None for limits in request.limited.values()):
        where += (
            f" AND {PAIR} NOT IN (SELECT f.name, f.limit_key FROM {FLOW_TABLE} f "
            "WHERE f.blocked_until > %s)"
        )
        params.append(request.now)
    capped = {
        name: limits.concurrency
        for name, limits in request.limited.items()
        if limits.concurrency is not None
    }
    if capped:
        where += (
            f" AND {PAIR} NOT IN (SELECT r.name, r.limit_key FROM {job_rows(connection)} r "
            f"WHERE r.status = %s AND r.name IN ({placeholders(list(capped))}) "
            "GROUP BY r.name, r.limit_key HAVING COUNT(*) >= CASE r.name "
            f"{' '.join(['WHEN %s THEN %s'] * len(capped))} END)"
        )
        params += [JobStatus.RUNNING, *capped]
        params += [value for item in capped.items() for value in item]
    return where, params


def count_keys(
    cursor: Any, connection: BaseDatabaseWrapper, request: ClaimRequest, keys: Sequence[Key]
) -> dict[Key, Counts]:
    """One statement: running rows of each capped key, and starts (with the oldest) of
    each rate-limited key in its window, which ends at ``request.now`` but has no upper
    bound: a start another worker's clock put ahead of ours counts too."""
    by_name: dict[str, list[str]] = {}
    for name, key in keys:
        by_name.setdefault(name, []).append(key)
    parts: list[str] = []
    params: list[Any] = []
    for name, limit_keys in by_name.items():
        limits = request.limited[name]
        if limits.concurrency is not None:
            # MIN(started_at) only gives this branch the type of the other's column.
            parts.append(
                f"SELECT 0, name, limit_key, COUNT(*), MIN(started_at) FROM {job_rows(connection)} "
                f"WHERE status = %s AND name = %s AND limit_key IN ({placeholders(limit_keys)}) "
                "GROUP BY name, limit_key"
            )
            params += [JobStatus.RUNNING, name, *limit_keys]
        if limits.rate is not None:
            parts.append(
                f"SELECT 1, name, limit_key, COUNT(*), MIN(started_at) FROM {START_TABLE} "
                f"WHERE name = %s AND limit_key IN ({placeholders(limit_keys)}) "
                "AND started_at > %s GROUP BY name, limit_key"
            )
            params += [name, *limit_keys, request.now - dt.timedelta(seconds=limits.window)]
    counts = {key: Counts() for key in keys}
    cursor.execute(" UNION ALL ".join(parts), adapt(connection, params))
    for kind, name, key, count, oldest in cursor.fetchall():
        found = counts.setdefault((name, key), Counts())
        if kind == 0:
            found.running = int(count)
        else:
            found.starts, found.oldest = int(count), to_datetime(oldest)
    return counts


def fit(request: ClaimRequest, candidates: list[Candidate], counts: dict[Key, Counts]) -> Plan:
    """The candidates that fit their keys' limits, in claim order, and what to log."""
    room = room_of(request, counts)
    taken: Counter[Key] = Counter()
    kept: list[Candidate] = []
    for job, key in candidates:
        if taken[(job.name, key)] < room[(job.name, key)]:
            taken[(job.name, key)] += 1
            kept.append((job, key))
    return plan_of(request, kept, counts, taken)


def room_of(request: ClaimRequest, counts: dict[Key, Counts]) -> dict[Key, int]:
    """How many more starts each counted key takes now."""
    room: dict[Key, int] = {}
    for pair, found in counts.items():
        limits = request.limited[pair[0]]
        left = []
        if limits.concurrency is not None:
            left.append(limits.concurrency - found.running)
        if limits.rate is not None:
            left.append(limits.rate - found.starts)
        room[pair] = max(0, min(left))
    return room


def plan_of(
    request: ClaimRequest, kept: list[Candidate], counts: dict[Key, Counts], taken: Counter[Key]
) -> Plan:
    """The writes of a claim that keeps ``kept`` (``taken`` of each counted key): their
    starts (rate-limited names), and the keys it saturated with when each may start again."""
    blocked: list[tuple[Key, dt.datetime]] = []
    for pair, found in counts.items():
        limits = request.limited[pair[0]]
        if limits.rate is None or found.starts + taken[pair] < limits.rate:
            continue
        # Saturated: it may start again when the oldest start in its window (this
        # claim's own, if the log had none) is a window old. With more than N starts
        # logged (a limit lowered meanwhile) this is early: the count still decides.
        first = found.oldest if found.starts and found.oldest else request.now
        blocked.append((pair, first + dt.timedelta(seconds=limits.window)))
    starts = [
        (job.name, key)
        for job, key in kept
        if job.name in request.limited and request.limited[job.name].rate is not None
    ]
    return Plan(kept, starts, blocked)


def write_plan(
    cursor: Any, connection: BaseDatabaseWrapper, request: ClaimRequest, plan: Plan
) -> None:
    """The claim's writes, one statement each: the UPDATE of the kept rows, the INSERT
    of their starts, the upsert of the saturated keys' ``blocked_until``."""
    if plan.kept:
        ids = [job.id for job, _ in plan.kept]
        cursor.execute(
            f"UPDATE {job_rows(connection)} SET {claim_set_clause()} "
            f"WHERE id IN ({placeholders(ids)})",
            adapt(connection, [*claim_set_params(request), *ids]),
        )
    if plan.starts:
        cursor.execute(
            f"INSERT INTO {START_TABLE} (name, limit_key, started_at) VALUES "
            + ", ".join(["(%s, %s, %s)"] * len(plan.starts)),
            adapt(connection, [v for name, key in plan.starts for v in (name, key, request.now)]),
        )
    if plan.blocked:
        ops = connection.ops
        suffix = ops.on_conflict_suffix_sql(
            [], OnConflict.UPDATE, ["blocked_until"], ["name", "limit_key"]
        )
        cursor.execute(
            f"{ops.insert_statement(on_conflict=OnConflict.UPDATE)} {FLOW_TABLE} "
            "(name, limit_key, blocked_until) VALUES "
            + ", ".join(["(%s, %s, %s)"] * len(plan.blocked))
            + f" {suffix}",
            adapt(
                connection, [v for (name, key), until in plan.blocked for v in (name, key, until)]
            ),
        )
