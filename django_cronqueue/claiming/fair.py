"""Turns between the fair keys of a queue (``fair_by``, ``using(fair_key=...)``).

A queue is fair when a job defined with ``fair_by`` runs in it, or when a job of it was
enqueued with a fair key (``FairShare`` rows name the queue). Each (queue, key) has a
``FairShare`` row; the queue's jobs without a key are the key ``""``.

A claim of a fair queue, in the caller's transaction (locking as the vendor's claim:
``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MySQL, ``BEGIN IMMEDIATE`` on SQLite; on
PostgreSQL at READ COMMITTED, statements on their own, each atomic):

1. reads the keys in turn order: the key whose last turn ended first (a key never
   served first), each with whether it has due rows, in one statement. Keys a claim
   found without due jobs are idle (``idle_until``) and left out until an enqueue of the
   key wakes them, or until their idle time is over: the same statement then reads a
   batch of them, and those with due jobs join the order;
2. plans the batch: each key in that order takes what is left of its turn (``weight``
   jobs per turn, ``used`` taken so far), then goes to the back with a full one, until
   the batch is full (weighted round robin);
3. takes each key's planned rows, due pending rows of the key in the usual order
   (priority, run_at, id), skipping rows another claimer holds;
4. marks them running and records the turns: ``used``, and for a key whose turn ended a
   ``turn_at`` after every other key's. A key that gave no row and has none due is marked
   idle, unless an enqueue of it came since step 1 (``enqueued`` changed: compare-and-set);
   its idle time doubles with each idle check in a row, up to ``IDLE_RECHECK_MAX``.

Steps 3 and 4 are one statement on PostgreSQL (``claiming.postgresql.serve_plan``), a
statement per key and one per key row elsewhere (and for a plan with the key "", whose
rows are read apart from the partial index of keyed rows): a claim whose plan is filled
is two statements there, whatever the number of keys.

A round that left keys without rows reads the next ones (``ROUNDS`` at most). A claim
never waits for a key row: it writes only those it can lock at once (an enqueue holding
one is about to wake it anyway), so claims and enqueues never deadlock on them.

A key over its pause gives no row and loses its turn. Names with ``concurrency=``,
``limit_by`` or ``rate_limit`` take the same turns in their own locked claim
(``claiming.fairflow``): a key whose rows wait for room under a limit loses its turn too,
holds up no other key, and is not idle (step 1 reads, for the idle test, the due rows of
every name the process defines, apart from the rows the claim may take now). Across keys
turns decide, within a key the usual order: a higher priority goes first within its key,
not before another key's turn.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..db.cursors import fast_cursor
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
# A key's due rows, probed from its row ``s`` (the key's literal inequality, for the
# partial index as in KEY_ROWS), in a scalar subquery: an index probe per key, where an
# EXISTS over many keys became a hash of every keyed due row of the queue (PostgreSQL).
PROBED_KEY = "AND fair_key = s.fair_key AND fair_key <> ''"
# The same from a planned key ``k`` (PostgreSQL's claim of every key's rows at once).
PROBED_KEY_ROWS = "AND fair_key = k.fair_key AND fair_key <> ''"
# The awake keys in turn order (LIMIT given), and the idle keys whose idle time is over.
# "ORDER BY idle_until" (NULL for all of them) is the order of the index on (queue,
# idle_until, turn_at): read in that order from the first key on, where "ORDER BY turn_at"
# alone read every awake key of the queue and sorted them (PostgreSQL does not take
# "IS NULL" for an equality that leaves the index's next column in order).
AWAKE_IDS = (
    f"SELECT id FROM {SHARE_TABLE} WHERE queue = %s AND idle_until IS NULL "
    "ORDER BY idle_until, turn_at, id"
)
OVER_IDS = (
    f" UNION ALL SELECT id FROM (SELECT id FROM {SHARE_TABLE} WHERE queue = %s "
    f"AND idle_until <= %s ORDER BY idle_until, id LIMIT {RECHECK_BATCH}) o"
)
NO_SQL = ""
# Keys whose turns end in one claim go to the back in that order, a microsecond apart:
# turn order stays strict whatever the clock (or an injected ``now``) says.
TICK = dt.timedelta(microseconds=1)


class Share(NamedTuple):
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


# Claims the rows of a plan (the keys of the next jobs, in the order their turns serve
# them) and records the turns of the keys that gave rows; returns each planned key's rows.
Serve = Callable[[Any, ClaimRequest, list[Share]], dict[Share, list[ClaimedJob]]]
Atomic = Callable[[], AbstractContextManager[Any]]
# A WHERE clause of job rows and its params.
Filter = tuple[str, list[Any]]


def claim_fair(
    connection: BaseDatabaseWrapper,
    request: ClaimRequest,
    queue: str,
    *,
    row_lock: str,
    lock_by_id: bool = False,
    serve: Serve | None = None,
    atomic: Atomic = contextlib.nullcontext,
    ready: Filter | None = None,
    serve_all: Serve | None = None,
) -> list[ClaimedJob]:
    """Up to ``request.limit`` due jobs of ``queue`` among ``request.names``, in turns
    between its keys. Runs inside the caller's transaction, if any (see ``atomic``).

    ``lock_by_id`` (MariaDB and MySQL): read each key's candidates without locking, then
    lock the claimed rows by primary key. InnoDB's SKIP LOCKED waits on the claim index's
    entries of rows another claim has just changed, and a claim that waits while holding
    the rows of its earlier keys can deadlock with another; by primary key it never
    waits. ``serve`` (PostgreSQL): a plan's rows claimed and its turns recorded in one
    statement, for a plan without the key "". ``atomic``: a transaction for the writes
    that lock rows before they write them (PostgreSQL, whose claim is otherwise a
    statement or two without one). ``ready`` and ``serve_all`` (``claiming.fairflow``):
    the rows a key may give now (default: due rows of ``request.names``), and the claim
    of every plan's rows (in a transaction of its own)."""
    request = request._replace(queues=[queue], after=None)
    each = functools.partial(_serve, row_lock=row_lock, lock_by_id=lock_by_id)
    jobs: list[ClaimedJob] = []
    passed: set[int] = set()  # keys that gave no row: the next round reads the ones after
    with connection.cursor() as cursor:
        for round_number in range(ROUNDS):
            wanted = request.limit - len(jobs)
            if wanted <= 0:
                break
            # Each round reads twice as many keys past those passed: a claim after many
            # keys emptied finds the ones with work in a few rounds, not one key at a time.
            read = min(2 ** (round_number + 1) * wanted, RECHECK_BATCH)
            first = round_number == 0
            count = read + len(passed) if first else _rounded(read + len(passed))
            shares, due, can = _read_turns(cursor, request, count, first, row_lock, atomic, ready)
            shares = [share for share in shares if share.id not in passed][:read]
            if not shares:
                break
            empty = [share for share in shares if share.fair_key not in due]
            # Keys with due rows and none to give now (saturated, or rows of names left out
            # of this claim) lose their turn, are not idle, and hold up no other key.
            passed.update(share.id for share in shares if share.fair_key not in can)
            if empty:
                with atomic():
                    _mark_idle(cursor, empty, request.now, row_lock)
            shares = [share for share in shares if share.fair_key in can][:wanted]
            if not shares:
                continue
            served = plan(shares, wanted)
            if serve_all is not None:
                taken = serve_all(cursor, request, served)
            elif serve is not None and all(share.fair_key for share in served):
                taken = serve(cursor, request, served)
            else:  # the key "" reads the queue's rows, not the partial index of keyed rows
                with atomic():
                    taken = each(cursor, request, served)
            round_jobs = [job for rows in taken.values() for job in rows]
            # A key with due rows that gave none: another claimer holds them (not idle).
            passed.update(share.id for share, rows in taken.items() if not rows)
            jobs += round_jobs
            if len(round_jobs) == len(served):
                break  # the plan is filled
    return jobs


def _read_turns(
    cursor: Any,
    request: ClaimRequest,
    wanted: int,
    wake: bool,
    row_lock: str,
    atomic: Atomic,
    ready: Filter | None = None,
) -> tuple[list[Share], set[str], set[str]]:
    """Up to ``wanted`` awake keys in turn order, which of them have due rows (locked by
    another claimer or not) and which have rows this claim may take (``ready``; due rows
    of ``request.names`` by default), in one statement. With ``wake`` it also reads the
    idle keys whose idle time is over (a batch, the longest idle first): those with due
    rows are awake again and take their place in the order, the others idle longer.

    A key is due when it has due rows of any name this process defines
    (``request.fair_names``), those of capped and limited names too: a key whose rows wait
    for room under a limit is not idle, and is read again by the next claim."""
    connection = cursor.db
    where, params = ready or due_filter(request, request.names)
    probes, probed = _probe(connection, where), [*params, *params]
    every = request.fair_names or [*request.names, *request.capped, *request.limited]
    apart = ready is not None or set(every) != set(request.names)
    if apart:  # a second probe: due rows of every name
        due_where, due_params = due_filter(request, every)
        probes += f", {_probe(connection, due_where)}"
        probed += [*due_params, *due_params]
    queue = request.queues[0] if request.queues else ""
    with fast_cursor(connection, prepared=True) as read:  # the same text claim after claim
        read.execute(
            f"SELECT {SHARE_COLUMNS}, idle_until IS NOT NULL, {probes} FROM {SHARE_TABLE} s "
            f"WHERE s.id IN (SELECT id FROM ({AWAKE_IDS} "
            f"{limit_of(wanted)}) a{OVER_IDS if wake else NO_SQL})",
            adapt(connection, [*probed, queue, *([queue, request.now] if wake else [])]),
        )
        rows = read.fetchall()
    awake: list[Share] = []
    over: list[Share] = []
    due: set[str] = set()
    can: set[str] = set()
    for row in rows:
        share = _share(row[:7])
        (over if row[7] else awake).append(share)
        if row[8]:
            can.add(share.fair_key)
        if row[9 if apart else 8]:
            due.add(share.fair_key)
    if over:
        with atomic():
            awake += _wake(cursor, over, due, request.now, row_lock)
    awake.sort(key=lambda share: (share.turn_at, share.id))
    return awake[:wanted], due, can


def _probe(connection: BaseDatabaseWrapper, where: str) -> str:
    """Whether the key of the row ``s`` has rows of ``where``: an index probe per key."""
    return (
        f"CASE WHEN s.fair_key = '' THEN "
        f"EXISTS (SELECT 1 FROM {job_rows(connection)} WHERE {where} AND fair_key = '') "
        f"ELSE (SELECT 1 FROM {job_rows(connection)} WHERE {where} {PROBED_KEY} LIMIT 1) "
        "IS NOT NULL END"
    )


def _rounded(wanted: int) -> int:
    """``wanted`` up to a power of two: a few texts of the prepared statement for the
    rounds after the first, not one for every count of keys they may read (a round keeps
    its first ``read`` keys)."""
    return 1 << max(wanted - 1, 0).bit_length()


def _share(row: Sequence[Any]) -> Share:
    share_id, fair_key, weight, used, enqueued, turn_at, idle_checks = row
    turn = to_datetime(turn_at) or TURN_NEVER
    return Share(share_id, fair_key, weight, used, enqueued, turn, idle_checks)


def _wake(
    cursor: Any, shares: Sequence[Share], due: set[str], now: dt.datetime, row_lock: str
) -> list[Share]:
    """Idle keys whose idle time is over: those with due rows are awake again (those this
    claim could lock at once), the others idle longer. Returns those awake."""
    mine = _lock_shares(cursor, [share for share in shares if share.fair_key in due], row_lock)
    if mine:
        cursor.execute(
            f"UPDATE {SHARE_TABLE} SET idle_until = NULL, idle_checks = 0 "
            f"WHERE id IN ({placeholders(mine)})",
            [share.id for share in mine],
        )
    _mark_idle(cursor, [share for share in shares if share.fair_key not in due], now, row_lock)
    return mine


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


def _serve(
    cursor: Any, request: ClaimRequest, served: list[Share], *, row_lock: str, lock_by_id: bool
) -> dict[Share, list[ClaimedJob]]:
    """``Serve`` a statement at a time: each planned key's rows, their UPDATE, then the
    key rows that gave rows."""
    take = _take_by_id if lock_by_id else _take
    taken = {
        share: take(cursor, request, share.fair_key, count, row_lock)
        for share, count in Counter(served).items()
    }
    _claim_rows(cursor, request, [job.id for rows in taken.values() for job in rows])
    given = {share: len(rows) for share, rows in taken.items() if rows}
    if given:
        queue = request.queues[0] if request.queues else ""
        _record_turns(cursor, queue, served, given, request.now, row_lock=row_lock)
    return taken


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
    *,
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
