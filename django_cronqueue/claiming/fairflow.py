"""Turns between a fair queue's keys for the names with ``concurrency=`` caps, ``limit_by``
or ``rate_limit`` (SPEC section 15: turns hold with flow control).

A fair queue's claim of those names takes ``claiming.fair``'s turns (the same
``FairShare`` rows, the same weighted round robin) and their own limits
(``claiming.flow``, ``base.cap_room``), in rounds of one transaction each:

0. one statement: whether the queue has a row of those names to take now at all (most
   claims of a fair queue find none, and read no turns for them);
1. the keys in turn order, each with whether it has due rows of any name (a key without
   is idle) and whether it has rows this claim may take now: due rows of the capped
   names below their caps and of the limited names whose limit key is not saturated
   (``flow.ready_filter``), no pause holding them. A key with due rows and none to take
   now loses its turn: it is not charged, keeps its place, holds up no other key, and is
   never idle for it (the next claim reads it again);
2. the plan (``fair.plan``) over the keys with rows to take;
3. each planned key's candidates (twice its planned jobs, in the usual order, read
   without a lock), then those still pending locked by id (``SKIP LOCKED``: never waits);
4. the lock rows, each kind once in sorted order: the capped names' (``NameLock``),
   then the limited keys' (``FlowLock``), and the counts under them;
5. the plan's slots filled in order: each slot takes its key's next candidate that fits
   (a candidate that does not fit is left as it was: never claimed, never given back);
   then the writes (``flow.write_plan``: the rows, the starts, the saturated keys'
   ``blocked_until``) and the turns of the keys that gave rows (``fair._record_turns``).

A key that gave no row in a round is passed over by the next rounds of the claim. A
transaction locks its lock rows in one sorted pass: two claims never lock two keys in
opposite orders (a claim inside a caller's transaction, ``jobs.tick()`` in an atomic
block, may lock in several passes: the caller's transaction holds them all).
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter, deque
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models.statuses import STATUS_EXPRESSION
from . import fair, flow
from .base import (
    ORDER,
    RETURNED_COLUMNS,
    ClaimedJob,
    ClaimRequest,
    adapt,
    cap_room,
    is_postgresql,
    job_rows,
    limit_of,
    placeholders,
    row_to_job,
    saturated_names,
)
from .fair import KEY_ROWS, UNKEYED_ROWS

# The candidates of a plan, still due and pending, locked by id (skipping those another
# claimer holds). On PostgreSQL the status is an expression no index reads, so that the
# primary key finds them (``base.running_by_id`` says why).
LOCK_BY_ID = (
    "SELECT id FROM {rows} WHERE id IN ({ids}) AND {status} = 'pending' AND blocked = FALSE "
    "AND run_at <= %s"
)


def claim_fair_flow(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    queue: str,
    *,
    row_lock: str,
    name_lock: str,
    lock_keys: flow.LockKeys | None,
    write: flow.WritePlan | None = None,
    transaction: fair.Atomic = contextlib.nullcontext,
) -> list[ClaimedJob]:
    """Up to ``request.limit`` due jobs of ``queue`` among the capped and limited names, in
    turns between its keys, each round in a ``transaction`` of its own."""
    if request.limit <= 0 or not (request.capped or request.limited):
        return []
    request = request._replace(queues=[queue], after=None, fair_queues=())
    with connection.cursor() as cursor:
        full = saturated_names(cursor, request.capped)
    names = [*(name for name in request.capped if name not in full), *request.limited]
    if not names:
        return []
    ready = flow.ready_filter(connection, request, names, names_as_array=False)
    if not _any_ready(connection, ready):
        return []  # none to take in this queue: no turns to read (the common case)
    serve = functools.partial(
        _serve,
        ready=ready,
        queue=queue,
        row_lock=row_lock,
        name_lock=name_lock,
        lock_keys=lock_keys,
        write=write or flow.write_plan,
        transaction=transaction,
    )
    return fair.claim_fair(
        connection,
        request,
        queue,
        row_lock=row_lock,
        atomic=transaction,
        ready=ready,
        serve_all=serve,
    )


def _serve(
    cursor: Any,
    request: ClaimRequest,
    served: list[fair.Share],
    *,
    ready: fair.Filter,
    queue: str,
    row_lock: str,
    name_lock: str,
    lock_keys: flow.LockKeys | None,
    write: flow.WritePlan,
    transaction: fair.Atomic,
) -> dict[fair.Share, list[ClaimedJob]]:
    """Steps 3 to 5 of a round (see the module), in one transaction."""
    connection = cursor.db
    planned = Counter(served)
    with transaction():
        candidates = {
            share: _candidates(cursor, request, ready, share.fair_key, 2 * count)
            for share, count in planned.items()
        }
        if row_lock:
            held = _lock_rows(cursor, request, candidates, row_lock)
            candidates = {
                share: [c for c in found if c[0].id in held] for share, found in candidates.items()
            }
        found = [candidate for rows in candidates.values() for candidate in rows]
        capped = sorted({job.name for job, _ in found if job.name in request.capped})
        caps = cap_room(cursor, capped, request.capped, lock_suffix=name_lock) if capped else {}
        keys = sorted({(job.name, key) for job, key in found if job.name in request.limited})
        counts: dict[flow.Key, flow.Counts] = {}
        if keys:
            if lock_keys is not None:
                lock_keys(cursor, keys)
            counts = flow.count_keys(cursor, connection, request, keys)
        kept, given, taken = _fill(request, served, candidates, caps, flow.room_of(request, counts))
        plan = flow.plan_of(request, kept, counts, taken)
        if plan.kept or plan.blocked:
            write(cursor, connection, request, plan)
        if given:
            fair._record_turns(cursor, queue, served, given, request.now, row_lock=row_lock)
    owner = {job.id: share for share, rows in candidates.items() for job, _ in rows}
    by_share: dict[fair.Share, list[ClaimedJob]] = {share: [] for share in planned}
    for job, _ in kept:
        by_share[owner[job.id]].append(job)
    return by_share


def _any_ready(connection: BaseDatabaseWrapper, ready: fair.Filter) -> bool:
    """Whether the queue has a row this claim may take (by the index on name, status and
    queue): a fair queue without capped or limited jobs costs its claims one statement."""
    where, params = ready
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {job_rows(connection)} WHERE {where} {limit_of(1)}",
            adapt(connection, params),
        )
        return cursor.fetchone() is not None


def _candidates(
    cursor: Any, request: ClaimRequest, ready: fair.Filter, fair_key: str, count: int
) -> list[flow.Candidate]:
    """Up to ``count`` rows of ``fair_key`` this claim may take (``ready``), in claim
    order, read without a lock."""
    connection = cursor.db
    where, params = ready
    cursor.execute(
        f"SELECT {RETURNED_COLUMNS}, limit_key FROM {job_rows(connection)} WHERE {where} "
        f"{KEY_ROWS if fair_key else UNKEYED_ROWS} {ORDER} {limit_of(count)}",
        adapt(connection, [*params, fair_key]),
    )
    return [
        (row_to_job(row[:-1], request.token, claimed=False), row[-1]) for row in cursor.fetchall()
    ]


def _lock_rows(
    cursor: Any,
    request: ClaimRequest,
    candidates: dict[fair.Share, list[flow.Candidate]],
    row_lock: str,
) -> set[int]:
    """The ids of the candidates still pending that this claim could lock at once."""
    ids = [job.id for rows in candidates.values() for job, _ in rows]
    if not ids:
        return set()
    connection = cursor.db
    status = STATUS_EXPRESSION if is_postgresql(connection) else "status"
    sql = LOCK_BY_ID.format(rows=job_rows(connection), ids=placeholders(ids), status=status)
    cursor.execute(f"{sql}{row_lock}", adapt(connection, [*ids, request.now]))
    return {row[0] for row in cursor.fetchall()}


def _fill(
    request: ClaimRequest,
    served: list[fair.Share],
    candidates: dict[fair.Share, list[flow.Candidate]],
    caps: dict[str, int],
    room: dict[flow.Key, int],
) -> tuple[list[flow.Candidate], dict[fair.Share, int], Counter[flow.Key]]:
    """The plan's slots in order, each taking its key's next candidate that fits the room
    left (under its name's cap, or its limit key's limits). Returns the candidates kept in
    that order, the rows each key gave, and the starts of each limit key."""
    left = {share: deque(rows) for share, rows in candidates.items()}
    kept: list[flow.Candidate] = []
    given: Counter[fair.Share] = Counter()
    taken: Counter[flow.Key] = Counter()
    for share in served:
        rows = left[share]
        while rows:
            job, key = rows.popleft()
            if job.name in request.capped:
                if caps.get(job.name, 0) > 0:
                    caps[job.name] -= 1
                    break
            elif room.get((job.name, key), 0) > taken[(job.name, key)]:
                taken[(job.name, key)] += 1
                break
        else:
            continue
        kept.append((job, key))
        given[share] += 1
    return kept, dict(given), taken
