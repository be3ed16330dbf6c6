"""Turns between the fair keys of a queue (``fair_by``, ``using(fair_key=...)``).

A queue is fair when a job defined with ``fair_by`` runs in it, or when a job of it was
enqueued with a fair key (``FairShare`` rows name the queue). Each (queue, key) has a
``FairShare`` row; the queue's jobs without a key are the key ``""``.

A claim of a fair queue, in the caller's transaction (locking as the vendor's claim:
``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MySQL, ``BEGIN IMMEDIATE`` on SQLite):

1. reads the keys in turn order: the key whose last turn ended first (a key never
   served first). Keys a claim found without due jobs are idle (``idle_until``) and left
   out until an enqueue of the key wakes them, or until their idle time is over: then a
   batch of them is read again in one statement, and those with due jobs join the order;
2. plans the batch: each key in that order takes what is left of its turn (``weight``
   jobs per turn, ``used`` taken so far), then goes to the back with a full one, until
   the batch is full (weighted round robin);
3. takes each key's planned rows, due pending rows of the key in the usual order
   (priority, run_at, id), skipping rows another claimer holds;
4. marks them running and records the turns: ``used``, and for a key whose turn ended a
   ``turn_at`` after every other key's. A key that gave no row and has none due is marked
   idle, unless an enqueue of it came since step 1 (``enqueued`` changed: compare-and-set);
   its idle time doubles with each idle check in a row, up to ``IDLE_RECHECK_MAX``.

A round that left keys without rows reads the next ones (``ROUNDS`` at most). A claim
never waits for a key row: it writes only those it can lock at once (an enqueue holding
one is about to wake it anyway), so claims and enqueues never deadlock on them.

A key over its pause gives no row and loses its turn; names with ``concurrency=``,
``limit_by`` or ``rate_limit`` keep their own locked claims (``claiming.flow``) and take
no turns.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import TURN_NEVER, FairShare
from .base import (
    ORDER,
    RETURNED_COLUMNS,
    ClaimedJob,
    ClaimRequest,
    adapt,
    claim_set_clause,
    claim_set_params,
    due_filter,
    job_rows,
    limit_of,
    placeholders,
    row_to_job,
    to_datetime,
)

SHARE_TABLE = FairShare._meta.db_table
INSERT_SHARES = (
    f"INSERT INTO {SHARE_TABLE} (queue, fair_key, weight, turn_at, used, enqueued, "
    "idle_checks) VALUES"
)
# An enqueue of a key: count it, and wake the key.
NOTED = (
    "ON CONFLICT (queue, fair_key) DO UPDATE SET "
    f"enqueued = {SHARE_TABLE}.enqueued + 1, idle_until = NULL, idle_checks = 0"
)
EXISTING = "ON CONFLICT (queue, fair_key) DO NOTHING"
EXISTING_MYSQL = "ON DUPLICATE KEY UPDATE queue = queue"
# A key's rows (the key literal, so that PostgreSQL and SQLite prove them within the
# partial index of keyed pending rows, migration 0024), and the rows without a key.
KEY_ROWS = "AND fair_key = %s AND fair_key <> ''"
UNKEYED_ROWS = "AND fair_key = %s"
NOTED_MYSQL = "ON DUPLICATE KEY UPDATE enqueued = enqueued + 1, idle_until = NULL, idle_checks = 0"
SHARE_COLUMNS = "id, fair_key, weight, used, enqueued, turn_at, idle_checks"
# A key found without due jobs is read again after this, then after twice as long at
# each idle check in a row, up to the most (an enqueue of the key, at once): a job of it
# that became due without an enqueue (a retry, a snooze, a returned lease, a delay)
# waits at most IDLE_RECHECK_MAX for its turn.
IDLE_RECHECK = dt.timedelta(seconds=1)
IDLE_RECHECK_MAX = dt.timedelta(seconds=8)
# The key "" has no index of its own (its rows are every plain row's kind), so reading it
# walks the queue's pending rows: an idle "" is read again after the longest wait.
RECHECK_BATCH = 500  # idle keys read again in one statement
ROUNDS = 6
# Keys whose turns end in one claim go to the back in that order, a microsecond apart:
# turn order stays strict whatever the clock (or an injected ``now``) says.
TICK = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Share:
    """A key's row as a claim read it."""

    id: int
    fair_key: str
    weight: int
    used: int
    enqueued: int
    turn_at: dt.datetime
    idle_checks: int


def note_enqueued(cursor: Any, queue: str, keys: Iterable[str]) -> None:
    """After jobs of ``keys`` were inserted in ``queue``, in the same transaction: the
    keys' rows exist, are awake, and count the enqueue (``enqueued``). In key order."""
    ordered = sorted(set(keys))
    if not ordered:
        return
    connection = cursor.db
    turn_never = connection.ops.adapt_datetimefield_value(TURN_NEVER)
    params = [value for key in ordered for value in (queue, key, turn_never)]
    suffix = NOTED_MYSQL if connection.vendor == "mysql" else NOTED
    cursor.execute(
        f"{INSERT_SHARES} {', '.join(['(%s, %s, 1, %s, 0, 1, 0)'] * len(ordered))} {suffix}",
        params,
    )


def claim_fair(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    queue: str,
    *,
    row_lock: str,
    lock_by_id: bool = False,
) -> list[ClaimedJob]:
    """Up to ``request.limit`` due jobs of ``queue`` among ``request.names``, in turns
    between its keys. Runs inside the caller's transaction.

    ``lock_by_id`` (MariaDB and MySQL): read each key's candidates without locking, then
    lock the claimed rows by primary key. InnoDB's SKIP LOCKED waits on the claim index's
    entries of rows another claim has just changed, and a claim that waits while holding
    the rows of its earlier keys can deadlock with another; by primary key it never
    waits."""
    request = replace(request, queues=[queue], after=None)
    jobs: list[ClaimedJob] = []
    passed: set[int] = set()  # keys that gave no row: the next round reads the ones after
    with connection.cursor() as cursor:
        woken = _wake_due(cursor, request, queue, row_lock)
        for round_number in range(ROUNDS):
            wanted = request.limit - len(jobs)
            if wanted <= 0:
                break
            # Each round reads twice as many keys past those passed: a claim after many
            # keys emptied finds the ones with work in a few rounds, not one key at a time.
            read = min(2 ** (round_number + 1) * wanted, RECHECK_BATCH)
            shares = turn_order(cursor, queue, read + len(passed), woken)
            shares = [share for share in shares if share.id not in passed][:read]
            woken = []  # awake now: the next rounds read them as they are
            if not shares:
                break
            due = _due_keys(cursor, request, shares)  # one statement for them all
            empty = [share for share in shares if share.fair_key not in due]
            passed.update(share.id for share in empty)
            _mark_idle(cursor, empty, request.now, row_lock)
            shares = [share for share in shares if share.fair_key in due][:wanted]
            if not shares:
                continue
            served = plan(shares, wanted)
            planned = Counter(served)
            take = _take_by_id if lock_by_id else _take
            taken = {
                share: take(cursor, request, share.fair_key, planned[share], row_lock)
                for share in shares
                if planned[share]
            }
            round_jobs = [job for rows in taken.values() for job in rows]
            _claim_rows(cursor, request, [job.id for job in round_jobs])
            # A key with due rows that gave none: another claimer holds them (not idle).
            passed.update(share.id for share, rows in taken.items() if not rows)
            given = {share: len(rows) for share, rows in taken.items() if rows}
            _record_turns(cursor, queue, served, given, request.now, row_lock)
            jobs += round_jobs
            if len(round_jobs) == len(served):
                break  # the plan is filled
    return jobs


def turn_order(cursor: Any, queue: str, wanted: int, woken: Sequence[Share] = ()) -> list[Share]:
    """Up to ``wanted`` awake keys of ``queue`` in turn order (with ``woken``, the keys
    this claim found due again)."""
    cursor.execute(
        f"SELECT {SHARE_COLUMNS} FROM {SHARE_TABLE} WHERE queue = %s AND idle_until IS NULL "
        f"ORDER BY turn_at, id {limit_of(wanted)}",
        [queue],
    )
    shares = {share.id: share for share in map(_share, cursor.fetchall())}
    shares.update((share.id, share) for share in woken)
    return sorted(shares.values(), key=lambda share: (share.turn_at, share.id))[:wanted]


def _share(row: Sequence[Any]) -> Share:
    share_id, fair_key, weight, used, enqueued, turn_at, idle_checks = row
    turn = to_datetime(turn_at) or TURN_NEVER
    return Share(share_id, fair_key, weight, used, enqueued, turn, idle_checks)


def _wake_due(cursor: Any, request: ClaimRequest, queue: str, row_lock: str) -> list[Share]:
    """The idle keys whose idle time is over (a batch, the longest idle first): those with
    due jobs are awake again, the others idle longer. Returns those awake."""
    connection = cursor.db
    cursor.execute(
        f"SELECT {SHARE_COLUMNS} FROM {SHARE_TABLE} WHERE queue = %s AND idle_until <= %s "
        f"ORDER BY idle_until, id LIMIT {RECHECK_BATCH}",
        adapt(connection, [queue, request.now]),
    )
    shares = [_share(row) for row in cursor.fetchall()]
    if not shares:
        return []
    due = _due_keys(cursor, request, shares)
    woken = [share for share in shares if share.fair_key in due]
    mine = _lock_shares(cursor, woken, row_lock)
    if mine:
        cursor.execute(
            f"UPDATE {SHARE_TABLE} SET idle_until = NULL, idle_checks = 0 "
            f"WHERE id IN ({placeholders(mine)})",
            [share.id for share in mine],
        )
    _mark_idle(
        cursor, [share for share in shares if share.fair_key not in due], request.now, row_lock
    )
    return mine


def _due_keys(cursor: Any, request: ClaimRequest, shares: Sequence[Share]) -> set[str]:
    """The keys of ``shares`` that have a due row (locked by another claimer or not)."""
    connection = cursor.db
    where, params = due_filter(request, request.names)
    keys = [share.fair_key for share in shares if share.fair_key]
    due: set[str] = set()
    if keys:
        # One statement: a probe of the partial index of keyed pending rows per key.
        cursor.execute(
            f"SELECT fair_key FROM {SHARE_TABLE} s WHERE s.queue = %s AND s.fair_key IN "
            f"({placeholders(keys)}) AND EXISTS (SELECT 1 FROM {job_rows(connection)} "
            f"WHERE {where} AND fair_key = s.fair_key AND fair_key <> '')",
            adapt(connection, [request.queues[0] if request.queues else "", *keys, *params]),
        )
        due.update(row[0] for row in cursor.fetchall())
    if any(not share.fair_key for share in shares):
        cursor.execute(
            f"SELECT 1 FROM {job_rows(connection)} WHERE {where} AND fair_key = '' LIMIT 1",
            adapt(connection, params),
        )
        if cursor.fetchone() is not None:
            due.add("")
    return due


def plan(shares: Sequence[Share], wanted: int) -> list[Share]:
    """The keys of the next ``wanted`` jobs, in the order their turns serve them: each key
    in turn order takes what is left of its turn, then goes to the back with a full one
    (weighted round robin over ``shares``)."""
    left = {share: max(share.weight - share.used, 1) for share in shares}
    order = list(shares)
    served: list[Share] = []
    while len(served) < wanted:
        share = order[0]
        count = min(left[share], wanted - len(served))
        served += [share] * count
        left[share] -= count
        if left[share] == 0:
            left[share] = share.weight
            order.append(order.pop(0))
    return served


def _take(
    cursor: Any, request: ClaimRequest, fair_key: str, count: int, row_lock: str
) -> list[ClaimedJob]:
    """Up to ``count`` due rows of ``fair_key`` in claim order, locked where the vendor
    locks rows (read before the UPDATE)."""
    connection = cursor.db
    where, params = due_filter(request, request.names)
    cursor.execute(
        f"SELECT {RETURNED_COLUMNS} FROM {job_rows(connection)} WHERE {where} "
        f"{KEY_ROWS if fair_key else UNKEYED_ROWS} {ORDER} {limit_of(count)}{row_lock}",
        adapt(connection, [*params, fair_key]),
    )
    return [row_to_job(row, request.token, claimed=False) for row in cursor.fetchall()]


def _take_by_id(
    cursor: Any, request: ClaimRequest, fair_key: str, count: int, row_lock: str
) -> list[ClaimedJob]:
    """``_take``, its candidates read without a lock (twice as many, for the rows another
    claimer takes meanwhile), then the first ``count`` still pending locked by id."""
    candidates = _take(cursor, request, fair_key, 2 * count, "")
    if not candidates:
        return []
    cursor.execute(
        f"SELECT id FROM {job_rows(cursor.db)} WHERE id IN ({placeholders(candidates)}) "
        f"AND status = 'pending' {ORDER} {limit_of(count)}{row_lock}",
        [job.id for job in candidates],
    )
    locked = {row[0] for row in cursor.fetchall()}
    return [job for job in candidates if job.id in locked]


def _claim_rows(cursor: Any, request: ClaimRequest, ids: list[int]) -> None:
    if ids:
        cursor.execute(
            f"UPDATE {job_rows(cursor.db)} SET {claim_set_clause()} "
            f"WHERE id IN ({placeholders(ids)})",
            adapt(cursor.db, [*claim_set_params(request), *ids]),
        )


def _lock_shares(cursor: Any, shares: Sequence[Share], row_lock: str) -> list[Share]:
    """Those of ``shares`` whose rows this claim could lock at once (all on SQLite)."""
    if not shares or not row_lock:
        return list(shares)
    cursor.execute(
        f"SELECT id FROM {SHARE_TABLE} WHERE id IN ({placeholders(shares)}){row_lock}",
        [share.id for share in shares],
    )
    locked = {row[0] for row in cursor.fetchall()}
    return [share for share in shares if share.id in locked]


def _record_turns(
    cursor: Any,
    queue: str,
    served: list[Share],
    given: Mapping[Share, int],
    now: dt.datetime,
    row_lock: str,
) -> None:
    """Advance the turns of the keys that gave rows: ``used`` by their jobs, and a key
    whose turn ended goes to the back (``turn_at`` after every other key's, in the order
    their turns ended)."""
    connection = cursor.db
    shares = _lock_shares(cursor, list(given), row_lock)
    ended = _turns_ended(served, {share: given[share] for share in shares})
    back: dict[Share, dt.datetime] = {}
    if ended:
        cursor.execute(f"SELECT MAX(turn_at) FROM {SHARE_TABLE} WHERE queue = %s", [queue])
        latest = to_datetime(cursor.fetchone()[0]) or TURN_NEVER
        base = max(now, latest + TICK)
        back = {share: base + TICK * position for position, share in enumerate(ended)}
    for share in shares:
        cursor.execute(
            f"UPDATE {SHARE_TABLE} SET used = %s, turn_at = COALESCE(%s, turn_at), "
            "idle_until = NULL, idle_checks = 0 WHERE id = %s",
            adapt(
                connection,
                [(share.used + given[share]) % share.weight, back.get(share), share.id],
            ),
        )


def _turns_ended(served: list[Share], given: Mapping[Share, int]) -> list[Share]:
    """The keys whose turn the claim ended, in the order of their last job in ``served``."""
    last = {share: position for position, share in enumerate(served)}
    ended = [share for share, count in given.items() if share.used + count >= share.weight]
    return sorted(ended, key=lambda share: last.get(share, len(served)))


def _mark_idle(cursor: Any, shares: Sequence[Share], now: dt.datetime, row_lock: str) -> None:
    """Idle ``shares`` (found without due jobs) for twice as long as their last idle time,
    unless an enqueue came since they were read (``enqueued``: compare-and-set)."""
    connection = cursor.db
    by_wait: dict[dt.timedelta, list[Share]] = {}
    for share in _lock_shares(cursor, shares, row_lock):
        wait = (
            min(IDLE_RECHECK * 2**share.idle_checks, IDLE_RECHECK_MAX)
            if share.fair_key
            else IDLE_RECHECK_MAX
        )
        by_wait.setdefault(wait, []).append(share)
    for wait, group in sorted(by_wait.items()):
        cursor.execute(
            f"UPDATE {SHARE_TABLE} SET idle_until = %s, idle_checks = idle_checks + 1 "
            f"WHERE (id, enqueued) IN ({', '.join(['(%s, %s)'] * len(group))})",
            adapt(connection, [now + wait, *(v for s in group for v in (s.id, s.enqueued))]),
        )


def known_fair_queues(using: str, defined: Iterable[str]) -> tuple[str, ...]:
    """The fair queues: those of ``defined`` (the queues of jobs with ``fair_by``) and
    those with key rows (a job enqueued with ``fair_key=``), each given its key ``""``
    (for its jobs without a key). Read by a worker's housekeeping, not by each claim."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT queue FROM {SHARE_TABLE}")
        queues = {row[0] for row in cursor.fetchall()} | set(defined)
        if queues:
            _ensure_unkeyed(cursor, sorted(queues))
    return tuple(sorted(queues))


def _ensure_unkeyed(cursor: Any, queues: list[str]) -> None:
    connection = cursor.db
    turn_never = connection.ops.adapt_datetimefield_value(TURN_NEVER)
    suffix = EXISTING_MYSQL if connection.vendor == "mysql" else EXISTING
    cursor.execute(
        f"{INSERT_SHARES} {', '.join(['(%s, %s, 1, %s, 0, 0, 0)'] * len(queues))} {suffix}",
        [value for queue in queues for value in (queue, "", turn_never)],
    )
