"""Enqueueing: turn a call into a ``Job`` row, after checking everything first.

Every check runs before anything is written. Inside ``transaction.atomic()`` the row
commits or rolls back with the caller's data; on PostgreSQL the wake-up NOTIFY is sent
in the same transaction, so workers hear of a job only once it is committed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from ..claiming.fair import note_enqueued
from ..conf import database_alias, get_settings
from ..db.cursors import fast_cursor
from ..db.notify import NOTIFY_CHANNEL, due_soon, wake_workers
from ..definitions.registry import JobDefinition, registry
from ..integrations.tracing import producer_span
from ..models import Job, JobStatus
from .arguments import (
    check_dedupe_for,
    check_dedupe_key,
    check_payload,
    check_priority,
    check_queue,
    limit_key,
    refuse_sensitive_option_values,
    resolve_run_at,
)
from .arguments import fair_key as fair_key_of
from .dedupe import (
    DEDUPE_ATTEMPTS,
    active_holder,
    insert_within_span,
    is_key_conflict,
    key_kept_changing_hands,
)

BULK_BATCH_SIZE = 1000


def enqueue(
    job: str | JobDefinition,
    payload: Mapping[str, Any] | None = None,
    *,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    dedupe_for: dt.timedelta | None = None,
    fair_key: str | None = None,
) -> Job:
    """Enqueue one run of ``job`` (a name or a handle) with ``payload`` as keyword arguments.

    With ``dedupe_key``, while a job of that name and key is pending or running this
    returns that job and creates nothing. With ``dedupe_for`` too (or the job's option),
    at most one job of that name and key is created within any span of that length,
    whatever its status: inside the span this returns the job created at its start.
    """
    definition = registry.resolve(job)
    now = timezone.now()
    row, span = checked_row(
        definition,
        payload,
        now=now,
        run_at=run_at,
        delay=delay,
        dedupe_key=dedupe_key,
        priority=priority,
        queue=queue,
        dedupe_for=dedupe_for,
        fair_key=fair_key,
    )
    with producer_span(definition.name, row.queue) as producer:
        row.traceparent = producer.traceparent
        saved = _save_new(row, database_alias(), now, span)
        producer.set_message_ids([saved.pk])
    if (
        saved is row and get_settings().EAGER
    ):  # tests: run it now (django_cronqueue.enqueueing.eager)
        from .eager import run_eagerly  # and the worker's code behind it: loaded when used

        return run_eagerly(saved)
    return saved


def checked_row(
    definition: JobDefinition,
    payload: Mapping[str, Any] | None,
    *,
    now: dt.datetime,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    dedupe_for: dt.timedelta | None = None,
    fair_key: str | None = None,
) -> tuple[Job, dt.timedelta | None]:
    """Every check of ``enqueue``, nothing written: the unsaved row and the span of its
    dedupe key (None when the key holds only while its job is pending or running)."""
    dedupe_key = check_dedupe_key(definition, dedupe_key)
    if definition.sensitive:
        refuse_sensitive_option_values(
            definition, payload, dedupe_key=dedupe_key, fair_key=fair_key
        )
    span = check_dedupe_for(definition, dedupe_key, dedupe_for)
    row = build_job(
        definition,
        payload,
        now=now,
        run_at=resolve_run_at(definition, now, run_at, delay),
        dedupe_key=dedupe_key,
        priority=priority,
        queue=queue,
        fair_key=fair_key,
    )
    return row, span


def _save_new(row: Job, using: str, now: dt.datetime, span: dt.timedelta | None) -> Job:
    """Insert ``row``; with a dedupe key, the job holding that key instead, if any. A row
    with a fair key counts itself in its key's row, in the same transaction."""
    if not row.fair_key:
        return _insert_new(row, using, now, span)
    with transaction.atomic(using=using):
        saved = _insert_new(row, using, now, span)
        if saved is row:
            note_fair_keys(using, [row])
    return saved


def note_fair_keys(using: str, rows: Iterable[Job]) -> None:
    """The fair keys of ``rows`` just inserted, in the caller's transaction: their key
    rows exist, are not idle, and count the enqueue (``claiming.fair.note_enqueued``)."""
    by_queue: dict[str, set[str]] = {}
    for row in rows:
        if row.fair_key:
            by_queue.setdefault(row.queue, set()).add(row.fair_key)
    if by_queue:
        with connections[using].cursor() as cursor:
            for queue in sorted(by_queue):
                note_enqueued(cursor, queue, by_queue[queue])


def _insert_new(row: Job, using: str, now: dt.datetime, span: dt.timedelta | None) -> Job:
    if span is not None:
        row.window_dedupe_key = row.dedupe_key
        row.dedupe_until = now + span
        return insert_within_span(row, using, now)
    if connections[using].vendor in ONE_STATEMENT_VENDORS:
        return _insert_one_statement(row, using, wake=due_soon(row.run_at, now))
    if row.dedupe_key is None:
        return _insert(row, using)
    return _insert_deduplicated(row, using)


def enqueue_many(
    job: str | JobDefinition,
    payloads: Iterable[Mapping[str, Any]],
    *,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    priority: int | None = None,
    queue: str | None = None,
    fair_key: str | None = None,
) -> list[Job]:
    """Enqueue one run per payload, with one INSERT per batch of 1,000 rows.

    Every payload is checked before anything is written.
    """
    definition = registry.resolve(job)
    now = timezone.now()
    when = resolve_run_at(definition, now, run_at, delay)
    queue = check_queue(definition, queue)
    priority = check_priority(definition, priority)
    checked = [check_payload(definition, payload) for payload in payloads]
    if not checked:
        return []
    keys = [limit_key(definition, payload) for payload in checked]
    fair_keys = [fair_key_of(definition, payload, fair_key) for payload in checked]
    using = database_alias()
    with (
        producer_span(definition.name, queue, count=len(checked)) as producer,
        transaction.atomic(using=using),
    ):
        if connections[using].vendor == "postgresql" and not any(fair_keys):
            created = _bulk_insert_postgresql(
                using,
                definition,
                checked,
                keys,
                queue=queue,
                priority=priority,
                run_at=when,
                now=now,
                traceparent=producer.traceparent,
            )
        else:
            rows = [
                Job(
                    name=definition.name,
                    payload=payload,
                    queue=queue,
                    priority=priority,
                    max_attempts=definition.max_attempts,
                    run_at=when,
                    limit_key=key,
                    fair_key=fair,
                    created_at=now,
                    traceparent=producer.traceparent,
                )
                for payload, key, fair in zip(checked, keys, fair_keys, strict=True)
            ]
            created = Job.objects.using(using).bulk_create(rows, batch_size=BULK_BATCH_SIZE)
            note_fair_keys(using, created)
        wake_workers(using, [when], now)
        producer.set_message_ids(row.pk for row in created)
    if get_settings().EAGER:  # tests: run them now (django_cronqueue.enqueueing.eager)
        from .eager import run_many_eagerly  # and the worker's code behind it

        return run_many_eagerly(created, now)
    return created


_BULK_INSERT = (
    f"INSERT INTO {Job._meta.db_table} (name, payload, status, queue, priority, attempts, "
    "max_attempts, run_at, worker_id, last_error, traceback, limit_key, created_at, "
    "traceparent) "
    "SELECT %s, t.p, %s, %s, %s, 0, %s, %s, '', '', '', {key}, %s, %s FROM {source} "
    "ORDER BY t.n RETURNING id"
)
# enqueue_many on PostgreSQL: the payloads as one JSON array; for a job with limit_by,
# their limit keys as a text array beside it, zipped by ROWS FROM.
BULK_INSERT = _BULK_INSERT.format(
    key="''", source="jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(p, n)"
)
BULK_INSERT_KEYED = _BULK_INSERT.format(
    key="t.k",
    source="ROWS FROM (jsonb_array_elements(%s::jsonb), unnest(%s::text[])) "
    "WITH ORDINALITY AS t(p, k, n)",
)


def _bulk_insert_postgresql(
    using: str,
    definition: JobDefinition,
    payloads: Sequence[dict[str, Any]],
    keys: list[str],
    *,
    queue: str,
    priority: int,
    run_at: dt.datetime,
    now: dt.datetime,
    traceparent: str,
) -> list[Job]:
    """One ``INSERT ... SELECT FROM jsonb_array_elements(payloads)`` per batch: only the
    payloads (and, for a job with ``limit_by``, their limit keys) vary, so they travel as
    one JSON array (and one text array) and the rest as single parameters."""
    fields = [field.attname for field in Job._meta.concrete_fields]
    keyed = definition.limit_by is not None
    sql = BULK_INSERT_KEYED if keyed else BULK_INSERT
    created: list[Job] = []
    with connections[using].cursor() as cursor:
        for start in range(0, len(payloads), BULK_BATCH_SIZE):
            batch = payloads[start : start + BULK_BATCH_SIZE]
            batch_keys = keys[start : start + BULK_BATCH_SIZE]
            params: list[Any] = [
                definition.name,
                JobStatus.PENDING,
                queue,
                priority,
                definition.max_attempts,
                run_at,
                now,
                traceparent,
                json.dumps(batch, ensure_ascii=False),
            ]
            cursor.execute(sql, [*params, batch_keys] if keyed else params)
            # Ids come from the sequence in insertion order, which follows t.n.
            ids = sorted(row[0] for row in cursor.fetchall())
            created.extend(
                Job.from_db(
                    using,
                    fields,
                    _pending_row(
                        fields,
                        job_id,
                        definition,
                        payload,
                        key,
                        queue,
                        priority,
                        run_at,
                        now,
                        traceparent,
                    ),
                )
                for job_id, payload, key in zip(ids, batch, batch_keys, strict=True)
            )
    return created


# Occurrences built in Python, up to BULK_BATCH_SIZE per statement on PostgreSQL: their
# varying columns travel as one JSON array of objects; an occurrence that has a row
# already (a backfill made it) is skipped by the unique (name, scheduled_for, schedule).
OCCURRENCES_INSERT = (
    f"INSERT INTO {Job._meta.db_table} (name, payload, status, queue, priority, attempts, "
    "max_attempts, run_at, scheduled_for, worker_id, last_error, traceback, limit_key, "
    "fair_key, schedule, created_at) "
    "SELECT t.name, t.payload, t.status, t.queue, t.priority, 0, t.max_attempts, t.run_at, "
    "t.scheduled_for, '', '', '', t.limit_key, t.fair_key, t.schedule, t.created_at "
    "FROM jsonb_to_recordset(%s::jsonb) AS t(name text, payload jsonb, status text, "
    "queue text, priority int, max_attempts int, run_at timestamptz, "
    "scheduled_for timestamptz, limit_key text, fair_key text, schedule text, "
    "created_at timestamptz) "
    "ON CONFLICT (name, scheduled_for, schedule) DO NOTHING "
    "RETURNING id, name, scheduled_for, schedule"
)


def insert_occurrences(rows: list[dict[str, Any]], using: str) -> list[dict[str, Any]]:
    """Insert the cron occurrences ``rows`` (columns from ``job_columns``, each with its
    ``scheduled_for`` and ``schedule``, no dedupe key) that have no row yet, inside the
    caller's transaction. Returns the columns of those inserted, with their ``id``. One
    ``INSERT ... ON CONFLICT DO NOTHING`` per batch on PostgreSQL; elsewhere a lookup of
    the rows made already, then Django's ``bulk_create``."""
    assert all(row["scheduled_for"] and row["dedupe_key"] is None for row in rows), rows
    if connections[using].vendor != "postgresql":
        missing = _without_existing(rows, using)
        created = Job.objects.using(using).bulk_create(
            [Job(**row) for row in missing], batch_size=BULK_BATCH_SIZE
        )
        note_fair_keys(using, created)
        return [{**row, "id": job.pk} for row, job in zip(missing, created, strict=True)]
    inserted: list[dict[str, Any]] = []
    with connections[using].cursor() as cursor:
        for start in range(0, len(rows), BULK_BATCH_SIZE):
            batch = rows[start : start + BULK_BATCH_SIZE]
            cursor.execute(OCCURRENCES_INSERT, [json.dumps([_as_json(row) for row in batch])])
            ids = {(name, when, schedule): pk for pk, name, when, schedule in cursor.fetchall()}
            for row in batch:
                pk = ids.get((row["name"], row["scheduled_for"], row["schedule"]))
                if pk is not None:
                    inserted.append({**row, "id": pk})
    note_fair_keys(using, [Job(queue=row["queue"], fair_key=row["fair_key"]) for row in inserted])
    return inserted


def _without_existing(rows: list[dict[str, Any]], using: str) -> list[dict[str, Any]]:
    """``rows`` minus the occurrences that have a row already (a backfill made it)."""
    if not rows:
        return []
    instants = [row["scheduled_for"] for row in rows]
    existing = set(
        Job.objects.using(using)
        .filter(
            name__in={row["name"] for row in rows},
            schedule__in={row["schedule"] for row in rows},
            scheduled_for__gte=min(instants),
            scheduled_for__lte=max(instants),
        )
        .values_list("name", "scheduled_for", "schedule")
    )
    return [
        row for row in rows if (row["name"], row["scheduled_for"], row["schedule"]) not in existing
    ]


def _as_json(row: dict[str, Any]) -> dict[str, Any]:
    """The columns of ``OCCURRENCES_INSERT``'s recordset, as JSON values."""
    return {
        "name": row["name"],
        "payload": row["payload"],
        "status": row["status"],
        "queue": row["queue"],
        "priority": row["priority"],
        "max_attempts": row["max_attempts"],
        "run_at": row["run_at"].isoformat(),
        "scheduled_for": row["scheduled_for"].isoformat(),
        "limit_key": row["limit_key"],
        "fair_key": row["fair_key"],
        "schedule": row["schedule"],
        "created_at": row["created_at"].isoformat(),
    }


def _pending_row(
    fields: list[str],
    job_id: int,
    definition: JobDefinition,
    payload: dict[str, Any],
    key: str,
    queue: str,
    priority: int,
    run_at: dt.datetime,
    now: dt.datetime,
    traceparent: str,
) -> list[Any]:
    values = {
        "id": job_id,
        "name": definition.name,
        "payload": payload,
        "status": JobStatus.PENDING,
        "queue": queue,
        "priority": priority,
        "attempts": 0,
        "max_attempts": definition.max_attempts,
        "run_at": run_at,
        "worker_id": "",
        "last_error": "",
        "traceback": "",
        "limit_key": key,
        "created_at": now,
        "traceparent": traceparent,
    }
    return [values.get(field) for field in fields]


def build_job(
    definition: JobDefinition,
    payload: Mapping[str, Any] | None,
    *,
    now: dt.datetime,
    run_at: dt.datetime,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    scheduled_for: dt.datetime | None = None,
    payload_checked: bool = False,
    fair_key: str | None = None,
) -> Job:
    """A checked, unsaved Job row (``payload_checked``: the caller checked the payload
    with ``check_payload`` already, as a schedule's target does once per tick)."""
    return Job(
        **job_columns(
            definition,
            payload,
            now=now,
            run_at=run_at,
            dedupe_key=dedupe_key,
            priority=priority,
            queue=queue,
            scheduled_for=scheduled_for,
            payload_checked=payload_checked,
            fair_key=fair_key,
        )
    )


def job_columns(
    definition: JobDefinition,
    payload: Mapping[str, Any] | None,
    *,
    now: dt.datetime,
    run_at: dt.datetime,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    scheduled_for: dt.datetime | None = None,
    payload_checked: bool = False,
    fair_key: str | None = None,
) -> dict[str, Any]:
    """The checked columns of a new row, as ``build_job`` makes it (the others take
    their defaults): what the scheduler inserts without making a model instance."""
    checked = dict(payload or {}) if payload_checked else check_payload(definition, payload)
    return {
        "name": definition.name,
        "payload": checked,
        "status": JobStatus.PENDING,
        "queue": check_queue(definition, queue),
        "priority": check_priority(definition, priority),
        "max_attempts": definition.max_attempts,
        "run_at": run_at,
        "scheduled_for": scheduled_for,
        "dedupe_key": dedupe_key,
        "active_dedupe_key": dedupe_key,
        "limit_key": limit_key(definition, checked),
        "fair_key": fair_key_of(definition, checked, fair_key),
        "created_at": now,
    }


# --- writing ------------------------------------------------------------------------


ONE_STATEMENT_VENDORS = ("postgresql", "sqlite")


# The columns a new row sets; the others (lease, result, start and finish) start NULL.
INSERT_COLUMNS = (
    "name, payload, status, queue, priority, attempts, max_attempts, run_at, scheduled_for, "
    "dedupe_key, active_dedupe_key, worker_id, last_error, traceback, limit_key, created_at, "
    "traceparent, fair_key"
)


def _insert_statement(vendor: str, wake: bool) -> str:
    """The INSERT of one new row: its text never changes, so the driver parses it once."""
    payload_placeholder = "%s::jsonb" if vendor == "postgresql" else "%s"
    returning = "id, pg_notify(%s, '')" if wake else "id"
    return (
        f"INSERT INTO {Job._meta.db_table} ({INSERT_COLUMNS}) VALUES "
        f"(%s, {payload_placeholder}, %s, %s, %s, %s, %s, %s, %s, %s, %s, '', '', '', %s, %s, %s, "
        "%s) "
        f"ON CONFLICT (name, active_dedupe_key) DO NOTHING RETURNING {returning}"
    )


INSERT_STATEMENTS = {
    ("postgresql", False): _insert_statement("postgresql", wake=False),
    ("postgresql", True): _insert_statement("postgresql", wake=True),
    ("sqlite", False): _insert_statement("sqlite", wake=False),
}


def _insert_one_statement(row: Job, using: str, *, wake: bool) -> Job:
    """PostgreSQL and SQLite: one INSERT ... ON CONFLICT DO NOTHING RETURNING id, which
    also wakes idle PostgreSQL workers (pg_notify in RETURNING, delivered on commit).

    A conflict on (name, active_dedupe_key) inserts nothing and raises nothing, so no
    savepoint is needed inside the caller's transaction; the holder is returned.
    """
    connection = connections[using]
    wake = wake and connection.vendor == "postgresql"
    to_db = connection.ops.adapt_datetimefield_value  # unchanged on PostgreSQL
    params: list[Any] = [
        row.name,
        json.dumps(row.payload, ensure_ascii=False),
        row.status,
        row.queue,
        row.priority,
        row.attempts,
        row.max_attempts,
        to_db(row.run_at),
        to_db(row.scheduled_for),
        row.dedupe_key,
        row.active_dedupe_key,
        row.limit_key,
        to_db(row.created_at),
        row.traceparent,
        row.fair_key,
    ]
    if wake:
        params.append(NOTIFY_CHANNEL)
    sql = INSERT_STATEMENTS[connection.vendor, wake]
    for _ in range(DEDUPE_ATTEMPTS):
        with fast_cursor(connection) as cursor:
            cursor.execute(sql, params)
            inserted = cursor.fetchone()
        if inserted is not None:
            row.pk = inserted[0]
            row._state.adding = False
            row._state.db = using
            return row
        existing = active_holder(row, using)
        if existing is not None:
            return existing
    raise key_kept_changing_hands(row)


def _insert(row: Job, using: str) -> Job:
    row.save(force_insert=True, using=using)
    return row


def _insert_deduplicated(row: Job, using: str) -> Job:
    """Insert, or return the pending/running job holding the same name and dedupe key.

    The unique constraint on (name, active_dedupe_key) decides, so this holds under
    concurrent enqueues from many processes.
    """
    for _ in range(DEDUPE_ATTEMPTS):
        try:
            with transaction.atomic(using=using):
                row.save(force_insert=True, using=using)
            return row
        except IntegrityError as exc:
            if not is_key_conflict(exc):
                raise  # e.g. a CHECK constraint: the row itself is refused
            row.pk = None
            existing = active_holder(row, using)
            if existing is not None:
                return existing
    raise key_kept_changing_hands(row)
