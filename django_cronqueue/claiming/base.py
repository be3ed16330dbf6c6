"""The claim's SQL, shared by the vendor claimers: the due filter, the SET clauses of a
claim and of a batched success, the name locks of capped names, and the mapping of
returned rows to ``ClaimedJob``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.constants import OnConflict
from django.utils import timezone

from ..db.cursors import fast_cursor
from ..models import Job, JobStatus, NameLock, Pause
from ..models.statuses import STATUS_EXPRESSION
from ..values import typedjson

TABLE = Job._meta.db_table
LOCK_TABLE = NameLock._meta.db_table
PAUSE_TABLE = Pause._meta.db_table
RETURNED_COLUMNS = (
    "id, name, payload, attempts, max_attempts, queue, priority, run_at, scheduled_for, "
    "created_at, schedule, has_downstream, batch_id, traceparent"
)


NO_NAMES: Mapping[str, Any] = MappingProxyType({})


# The claim's values are NamedTuples, not frozen dataclasses: the same immutable records,
# built in a tenth of the time when a worker starts (and each claim builds a request).
class FlowLimit(NamedTuple):
    """The flow limits of a name with ``limit_by`` or ``rate_limit``, per limit key."""

    concurrency: int | None = None  # running rows per key
    rate: int | None = None  # starts per key in any window of ``window`` seconds
    window: float = 0.0


class ClaimFloor(NamedTuple):
    """Where a claim of the uncapped names starts reading: after this row, at its priority
    (``claiming.floor``)."""

    priority: int
    run_at: dt.datetime
    id: int


class ClaimRequest(NamedTuple):
    now: dt.datetime
    lease_until: dt.datetime
    token: str
    worker_id: str
    limit: int
    names: Sequence[str]  # known names without a concurrency cap
    capped: Mapping[str, int] = NO_NAMES  # known name -> cap
    queues: Sequence[str] | None = None
    # known names with limit_by or rate_limit -> their limits (claimed per limit key)
    limited: Mapping[str, FlowLimit] = NO_NAMES
    # The uncapped names' rows only after this one (None: from the head of the order).
    after: ClaimFloor | None = None
    # Queues whose keys take turns (``claiming.fair``): the uncapped names' rows there
    # are claimed in turns, and left out of the plain claim.
    fair_queues: Sequence[str] = ()
    # PRIORITY_AGING's (AFTER, EVERY) in seconds: the uncapped names' claim ranks rows by
    # their aged priority (``claiming.aging``). None: by priority.
    aging: tuple[float, float] | None = None
    # With fair queues: every name this process defines, capped or not, left out of this
    # claim or not. A key with due rows of any of them is not idle (``claiming.fair``).
    fair_names: Sequence[str] = ()


@dataclass
class ClaimedJob:
    """A claimed row, as plain data: the hot loop builds no model instances."""

    id: int
    name: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    queue: str
    priority: int
    run_at: dt.datetime
    scheduled_for: dt.datetime | None
    created_at: dt.datetime
    token: str
    schedule: str = ""  # the dynamic schedule of an occurrence or a manual run of one
    # A workflow's job: its success must release the jobs that wait for it (recorded
    # alone), or count it in its batch (in the transaction that writes it).
    has_downstream: bool = False
    batch_id: int | None = None
    traceparent: str = ""  # the span that enqueued it (django_cronqueue.integrations.tracing)
    # Its payload may hold tagged values (typedjson), decoded for the handler; False
    # for the JSON text of most payloads, which then is not walked.
    tagged: bool = False
    # Its lease's end as this process last set it (claim, renewal); None: unknown.
    lease_until: dt.datetime | None = None

    @property
    def in_workflow(self) -> bool:
        return self.has_downstream or self.batch_id is not None

    def order_key(self) -> tuple[int, dt.datetime, int]:
        return (-self.priority, self.run_at, self.id)


def placeholders(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


QUEUE_IN = " AND queue IN "
QUEUE_EXPRESSION_IN = " AND queue || '' IN "


def due_filter(
    request: ClaimRequest,
    names: Sequence[str],
    *,
    names_as_array: bool = False,
    pauses: bool = True,
) -> tuple[str, list[Any]]:
    """``WHERE`` clause and params selecting due pending rows of ``names``.

    ``names_as_array`` (PostgreSQL) passes the names as one array parameter: the
    statement's text then stays the same whatever the registry holds, so the driver
    parses it once, even for a site with a thousand job names. ``pauses=False`` leaves
    the pause filter to the caller.
    """
    # Blocked rows (a workflow's jobs waiting for others) are pending but never claimed;
    # "blocked = FALSE" (not "NOT blocked") keeps MySQL on the claim index's prefix too.
    # The status is a literal: on PostgreSQL the claim index covers pending rows only
    # (migration 0014), and a planner proves that from a literal whatever the binding.
    # Constants are literals (here and in the SET clauses below): only the values that
    # change between claims are parameters, so that a prepared claim gets a generic plan.
    # On PostgreSQL (names as an array) the status, names and queues are compared as
    # expressions no index can read but the claim index, whose condition is the same
    # expression (migration 0022): the indexes on (queue, status) and (name, status,
    # queue) would otherwise be a way to the pending rows, read whole for the status,
    # then sorted. The planner takes one when an ANALYZE saw few pending rows, and keeps
    # it as they pile up: each claim then reads and sorts every pending row (and while a
    # transaction is held open, every pending version since it began).
    params: list[Any] = [request.now]
    status = STATUS_EXPRESSION if names_as_array else "status"
    pending = f"{status} = '{JobStatus.PENDING}' AND blocked = FALSE AND run_at <= %s"
    if names_as_array:
        sql = f"{pending} AND name || '' = ANY(%s::text[])"
        params.append(list(names))
    else:
        sql = f"{pending} AND name IN ({placeholders(names)})"
        params.extend(names)
    if request.queues:
        sql += QUEUE_EXPRESSION_IN if names_as_array else QUEUE_IN
        sql += f"({placeholders(request.queues)})"
        params.extend(request.queues)
    if request.after is not None:
        sql += AFTER_FLOOR
        params.extend([request.after.priority, request.after.run_at, request.after.id])
    if request.fair_queues:
        sql += f" AND queue NOT IN ({placeholders(request.fair_queues)})"
        params.extend(request.fair_queues)
    if pauses:
        sql += NOT_PAUSED
        params.extend([request.now, request.now])
    return sql, params


# Paused queues and names are skipped by the claim itself (never claimed, then given
# back). Two NOT IN over the small pause table, each evaluated once per statement (a
# hashed subplan on PostgreSQL), keep the planner on the claim index; an anti-join with
# an OR made it fetch and sort every pending row instead. The pause table's queue and
# name are never NULL, and a name's pause has queue "" (no job's queue is empty).
NOT_PAUSED = (
    f" AND {TABLE}.queue NOT IN (SELECT p.queue FROM {PAUSE_TABLE} p "
    "WHERE p.until IS NULL OR p.until > %s)"
    f" AND {TABLE}.name NOT IN (SELECT p.name FROM {PAUSE_TABLE} p "
    "WHERE p.until IS NULL OR p.until > %s)"
)


ORDER = "ORDER BY priority DESC, run_at, id"

# A floor's rows: the index is (status, blocked, priority DESC, run_at, id), so with the
# priority given the row comparison on (run_at, id) starts the scan right after the floor
# (a row comparison across priority DESC would stop at that column).
AFTER_FLOOR = " AND priority = %s AND (run_at, id) > (%s, %s)"

# A claim picks its rows in a MATERIALIZED CTE, read once: written as
# "UPDATE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)", PostgreSQL may
# plan the subquery as the inner side of a nested loop and run it again for each row of
# the table, each run skipping the rows the UPDATE has just changed and locking the next
# ones: a claim of one then takes every due row (seen on a small table whose statistics
# said one row). SQLite reads the CTE once as well.


def claim_set_clause() -> str:
    return (
        f"status = '{JobStatus.RUNNING}', attempts = attempts + 1, locked_until = %s, "
        "lock_token = %s, worker_id = %s, started_at = %s"
    )


def claim_set_params(request: ClaimRequest) -> list[Any]:
    return [request.lease_until, request.token, request.worker_id, request.now]


def limit_clause(request: ClaimRequest) -> str:
    """``LIMIT n`` as a literal: a prepared claim whose LIMIT is a parameter never gets
    a generic plan on PostgreSQL (the planner cannot cost it), so it is planned every
    time. A slot asks for a handful of sizes (1, 2, 4, 8, PREFETCH), one statement each."""
    return limit_of(request.limit)


def limit_of(count: int) -> str:
    """``LIMIT n``, an int() of ``count`` as a literal."""
    return f"LIMIT {int(count)}"


# A claimed row that succeeded (the batched form: no result to store).
# A batch of quick successes leaves out the jobs others wait for (whose success must
# release them in its own transaction), even one that gained a downstream job after it
# was claimed: the caller then records that success alone. A group's members ride along;
# the caller counts those written in their batches, in the same transaction.
PLAIN_SUCCESS = " AND has_downstream = FALSE"

SUCCEEDED_SET = (
    f"status = '{JobStatus.SUCCEEDED}', finished_at = %s, locked_until = NULL, "
    "lock_token = NULL, active_dedupe_key = NULL"
)


def succeeded_set_params(finished_at: dt.datetime) -> list[Any]:
    return [finished_at]


def is_postgresql(connection: BaseDatabaseWrapper) -> bool:
    return connection.vendor == "postgresql"


def job_rows(connection: BaseDatabaseWrapper) -> str:
    """The job table in a claim or completion, without its history (``archive``), which
    such a statement never needs to read: on PostgreSQL the job table without the tables
    that inherit from it, on MariaDB and MySQL its hot partition (a retry moves its rows
    back there before it makes them pending)."""
    if is_postgresql(connection):
        return f"ONLY {TABLE}"
    if connection.vendor == "mysql":
        from ..history.archive.mysql import HOT_ROWS

        return HOT_ROWS
    return TABLE


def running_by_id(connection: BaseDatabaseWrapper) -> str:
    """``status = %s`` (the running status) for rows looked up by id: on PostgreSQL as an
    expression no index can read, so the primary key finds them. An index on status holds
    an entry for every version of a row that ever ran, none of which can be removed while a
    transaction is held open, and the planner, which counts the few live running rows,
    would otherwise read them all through it."""
    return f"{STATUS_EXPRESSION} = %s" if is_postgresql(connection) else "status = %s"


def adapt(connection: BaseDatabaseWrapper, params: list[Any]) -> list[Any]:
    """Datetimes as the backend stores them (naive UTC strings on SQLite and MySQL)."""
    return [
        connection.ops.adapt_datetimefield_value(value) if isinstance(value, dt.datetime) else value
        for value in params
    ]


def to_datetime(value: dt.datetime | str | None) -> dt.datetime | None:
    """A returned timestamp, aware (SQLite and MySQL return naive UTC, SQLite as text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if timezone.is_naive(value):
        value = value.replace(tzinfo=dt.timezone.utc)
    return value


def to_payload(value: Any) -> tuple[dict[str, Any], bool]:
    """The payload read from a row, and whether it may hold tagged values."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        tagged = typedjson.may_hold_tags(value)
        value = json.loads(value)
    else:  # a driver that decodes JSON itself
        tagged = typedjson.may_hold_tags(json.dumps(value))
    return (value, tagged) if isinstance(value, dict) else ({}, False)


def row_to_job(row: Sequence[Any], token: str, *, claimed: bool) -> ClaimedJob:
    """A row of RETURNED_COLUMNS; ``claimed=False`` when read before the UPDATE."""
    (
        job_id,
        name,
        payload,
        attempts,
        max_attempts,
        queue,
        priority,
        run_at,
        scheduled_for,
        created_at,
        schedule,
        has_downstream,
        batch_id,
        traceparent,
    ) = row
    payload, tagged = to_payload(payload)
    return ClaimedJob(
        id=job_id,
        name=name,
        payload=payload,
        attempts=attempts if claimed else attempts + 1,
        max_attempts=max_attempts,
        queue=queue,
        priority=priority,
        run_at=to_datetime(run_at),  # type: ignore[arg-type]
        scheduled_for=to_datetime(scheduled_for),
        created_at=to_datetime(created_at),  # type: ignore[arg-type]
        token=token,
        schedule=schedule,
        has_downstream=bool(has_downstream),
        batch_id=batch_id,
        traceparent=traceparent or "",
        tagged=tagged,
    )


def running_counts(cursor: Any, names: Sequence[str]) -> list[tuple[str, int]]:
    """(name, running rows) for those of ``names`` that have any."""
    cursor.execute(
        f"SELECT name, COUNT(*) FROM {job_rows(cursor.db)} WHERE status = %s "
        f"AND name IN ({placeholders(names)}) "
        "GROUP BY name",
        [JobStatus.RUNNING, *names],
    )
    return list(cursor.fetchall())


def saturated_names(cursor: Any, capped: Mapping[str, int]) -> set[str]:
    """Capped names whose running rows already reach their cap."""
    if not capped:
        return set()
    return {
        name for name, running in running_counts(cursor, list(capped)) if running >= capped[name]
    }


def lock_names(cursor: Any, names: list[str], lock_suffix: str) -> set[str]:
    """Lock the lock rows of ``names`` (in name order); returns the names that have one."""
    cursor.execute(
        f"SELECT name FROM {LOCK_TABLE} WHERE name IN ({placeholders(names)}) "
        f"ORDER BY name{lock_suffix}",
        names,
    )
    return {row[0] for row in cursor.fetchall()}


def keep_within_caps(
    cursor: Any,
    candidates: list[ClaimedJob],
    capped: Mapping[str, int],
    *,
    lock_suffix: str,
) -> list[ClaimedJob]:
    """Drop candidates that would push a capped name over its cap.

    The caller holds a transaction; each capped name's lock row is locked first so
    that the running count cannot change under us (``lock_suffix`` is the vendor's
    ``FOR UPDATE`` or empty where the whole transaction is already exclusive).
    """
    names = sorted({job.name for job in candidates if job.name in capped})
    if not names:
        return candidates
    room = cap_room(cursor, names, capped, lock_suffix=lock_suffix)
    kept = []
    for job in candidates:
        if job.name in room:
            if room[job.name] <= 0:
                continue
            room[job.name] -= 1
        kept.append(job)
    return kept


def cap_room(
    cursor: Any, names: list[str], capped: Mapping[str, int], *, lock_suffix: str
) -> dict[str, int]:
    """The room left under the caps of ``names`` (sorted, capped), counted once their lock
    rows are locked (in name order): the running count cannot change until the caller's
    transaction ends."""
    if lock_names(cursor, names, lock_suffix) != set(names):
        # A lock row went missing (deleted by hand): put it back, then lock it. Raw SQL,
        # since SQLite's claim runs in a BEGIN IMMEDIATE that Django does not know of.
        ops = cursor.db.ops
        cursor.execute(
            f"{ops.insert_statement(on_conflict=OnConflict.IGNORE)} {LOCK_TABLE} (name) "
            f"VALUES {', '.join(['(%s)'] * len(names))} "
            f"{ops.on_conflict_suffix_sql([], OnConflict.IGNORE, None, None)}",
            names,
        )
        lock_names(cursor, names, lock_suffix)
    room = {name: capped[name] - running for name, running in running_counts(cursor, names)}
    room.update({name: capped[name] for name in names if name not in room})
    return room


@contextmanager
def read_committed_transaction(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """A transaction at READ COMMITTED, whatever the connection's own level.

    A capped claim counts a name's running rows after locking the name's lock row, and
    must see every claim committed before it got that lock. Under REPEATABLE READ the
    count would read a snapshot taken at the transaction's first read, before the lock,
    and the name could run over its cap. Inside a caller's transaction (``jobs.tick()``
    in an atomic block) the level can no longer change: that transaction's applies.
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=connection.alias):
        if outermost and not reads_committed(connection):
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        yield


def reads_committed(connection: BaseDatabaseWrapper) -> bool:
    """Whether the connection's own transactions run at READ COMMITTED."""
    return _isolation_level(connection) == "read committed"


def _isolation_level(connection: BaseDatabaseWrapper) -> str:
    """The level Django sets on the connection ("read committed" by default on MySQL and
    PostgreSQL; the OPTIONS "isolation_level"), "" when it leaves the server's default."""
    level = getattr(connection, "isolation_level", None)
    return str(getattr(level, "name", level) or "").lower().replace("_", " ")


def claim_two_step(
    connection: BaseDatabaseWrapper, request: ClaimRequest, *, row_lock: str, name_lock: str
) -> list[ClaimedJob]:
    """SELECT the candidates (locking them), apply the caps, UPDATE the kept ones.

    Runs inside the caller's transaction.
    """
    with connection.cursor() as cursor:
        full = saturated_names(cursor, request.capped)
        names = [*request.names, *(name for name in request.capped if name not in full)]
        if not names:
            return []
        where, params = due_filter(request, names, names_as_array=is_postgresql(connection))
        cursor.execute(
            f"SELECT {RETURNED_COLUMNS} FROM {job_rows(connection)} WHERE {where} {ORDER} "
            f"LIMIT %s{row_lock}",
            adapt(connection, [*params, request.limit]),
        )
        candidates = [row_to_job(row, request.token, claimed=False) for row in cursor.fetchall()]
        jobs = keep_within_caps(cursor, candidates, request.capped, lock_suffix=name_lock)
        if not jobs:
            return []
        ids = [job.id for job in jobs]
        cursor.execute(
            f"UPDATE {job_rows(connection)} SET {claim_set_clause()} "
            f"WHERE id IN ({placeholders(ids)})",
            adapt(connection, [*claim_set_params(request), *ids]),
        )
    return jobs


def claim_returning(
    connection: BaseDatabaseWrapper, request: ClaimRequest, *, row_lock: str
) -> list[ClaimedJob]:
    """One statement: the rows picked in a CTE read once (see ``ORDER``), then their
    UPDATE ... RETURNING ..."""
    where, params = due_filter(request, request.names, names_as_array=is_postgresql(connection))
    sql = (
        f"WITH picked AS MATERIALIZED (SELECT id FROM {job_rows(connection)} WHERE {where} "
        f"{ORDER} {limit_clause(request)}{row_lock}) "
        f"UPDATE {job_rows(connection)} SET {claim_set_clause()} "
        f"WHERE id IN (SELECT id FROM picked) RETURNING {RETURNED_COLUMNS}"
    )
    with fast_cursor(connection, prepared=True) as cursor:
        cursor.execute(sql, adapt(connection, [*params, *claim_set_params(request)]))
        rows = cursor.fetchall()
    return [row_to_job(row, request.token, claimed=True) for row in rows]


def claim_row(
    connection: BaseDatabaseWrapper, request: ClaimRequest, job_id: int
) -> ClaimedJob | None:
    """pending -> running for one row whatever its run_at and caps (eager mode's claim).
    None when the row is not pending."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {RETURNED_COLUMNS} FROM {job_rows(connection)} WHERE id = %s AND status = %s "
            "AND blocked = %s",
            adapt(connection, [job_id, JobStatus.PENDING, False]),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        cursor.execute(
            f"UPDATE {job_rows(connection)} SET {claim_set_clause()} WHERE id = %s AND status = %s "
            "AND blocked = %s",
            adapt(connection, [*claim_set_params(request), job_id, JobStatus.PENDING, False]),
        )
        if cursor.rowcount != 1:
            return None
    return row_to_job(row, request.token, claimed=False)


def complete_successes(
    connection: BaseDatabaseWrapper, jobs: Sequence[ClaimedJob], finished_at: dt.datetime
) -> set[int]:
    """running -> succeeded for many rows at once (handlers that returned None), each
    only if its claim still holds the lease. Returns the ids written."""
    returning = connection.vendor != "mysql"  # MariaDB and MySQL have no UPDATE ... RETURNING
    by_token: dict[str, list[int]] = {}
    for job in jobs:
        by_token.setdefault(job.token, []).append(job.id)
    written: set[int] = set()
    with connection.cursor() as cursor:
        for token, ids in by_token.items():
            sql = (
                f"UPDATE {job_rows(connection)} SET {SUCCEEDED_SET} "
                f"WHERE lock_token = %s AND {running_by_id(connection)} "
                f"AND id IN ({placeholders(ids)}){PLAIN_SUCCESS}"
            )
            params = adapt(
                connection, [*succeeded_set_params(finished_at), token, JobStatus.RUNNING, *ids]
            )
            if returning:
                cursor.execute(sql + " RETURNING id", params)
                written.update(row[0] for row in cursor.fetchall())
            else:
                cursor.execute(sql, params)
                if cursor.rowcount == len(ids):
                    written.update(ids)
                else:
                    written.update(succeeded_at(cursor, connection, ids, finished_at))
    return written


def succeeded_at(
    cursor: Any, connection: BaseDatabaseWrapper, ids: list[int], finished_at: dt.datetime
) -> set[int]:
    """Which of ``ids`` this batch marked succeeded (MySQL: no RETURNING)."""
    cursor.execute(
        f"SELECT id FROM {job_rows(connection)} WHERE status = %s AND finished_at = %s "
        f"AND id IN ({placeholders(ids)})",
        adapt(connection, [JobStatus.SUCCEEDED, finished_at, *ids]),
    )
    return {row[0] for row in cursor.fetchall()}
