"""Enqueueing: turn a call into a ``Job`` row, after checking everything first.

Every check runs before anything is written. Inside ``transaction.atomic()`` the row
commits or rolls back with the caller's data; on PostgreSQL the wake-up NOTIFY is sent
in the same transaction, so workers hear of a job only once it is committed.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from .conf import database_alias, get_settings
from .cursors import fast_cursor
from .exceptions import InvalidPayload
from .models import MAX_DEDUPE_KEY_LENGTH, Job, JobStatus
from .registry import (
    MAX_PRIORITY,
    MAX_QUEUE_LENGTH,
    MIN_PRIORITY,
    JobDefinition,
    is_priority,
    registry,
)

NOTIFY_CHANNEL = "django_cronqueue"
DEDUPE_ATTEMPTS = 5
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
) -> Job:
    """Enqueue one run of ``job`` (a name or a handle) with ``payload`` as keyword arguments.

    With ``dedupe_key``, while a job of that name and key is pending or running this
    returns that job and creates nothing.
    """
    definition = registry.resolve(job)
    now = timezone.now()
    row = build_job(
        definition,
        payload,
        now=now,
        run_at=resolve_run_at(definition, now, run_at, delay),
        dedupe_key=check_dedupe_key(definition, dedupe_key),
        priority=priority,
        queue=queue,
    )
    using = database_alias()
    if connections[using].vendor in ONE_STATEMENT_VENDORS:
        saved = _insert_one_statement(row, using, wake=_due_soon(row.run_at, now))
    elif dedupe_key is None:
        saved = _insert(row, using)
    else:
        saved = _insert_deduplicated(row, using)
    if saved is row and get_settings().EAGER:  # tests: run it now (django_cronqueue.eager)
        from .eager import run_eagerly

        return run_eagerly(saved)
    return saved


def enqueue_many(
    job: str | JobDefinition,
    payloads: Iterable[Mapping[str, Any]],
    *,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    priority: int | None = None,
    queue: str | None = None,
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
    using = database_alias()
    with transaction.atomic(using=using):
        if connections[using].vendor == "postgresql":
            created = _bulk_insert_postgresql(
                using, definition, checked, queue=queue, priority=priority, run_at=when, now=now
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
                    created_at=now,
                )
                for payload in checked
            ]
            created = Job.objects.using(using).bulk_create(rows, batch_size=BULK_BATCH_SIZE)
        notify_workers(using, [when], now)
    if get_settings().EAGER:  # tests: run them now (django_cronqueue.eager)
        from .eager import run_many_eagerly

        return run_many_eagerly(created, now)
    return created


def _bulk_insert_postgresql(
    using: str,
    definition: JobDefinition,
    payloads: list[dict[str, Any]],
    *,
    queue: str,
    priority: int,
    run_at: dt.datetime,
    now: dt.datetime,
) -> list[Job]:
    """One ``INSERT ... SELECT FROM jsonb_array_elements(payloads)`` per batch: only the
    payloads vary, so they travel as one JSON array and the rest as single parameters."""
    fields = [field.attname for field in Job._meta.concrete_fields]
    sql = (
        f"INSERT INTO {Job._meta.db_table} (name, payload, status, queue, priority, attempts, "
        "max_attempts, run_at, worker_id, last_error, traceback, created_at) "
        "SELECT %s, t.p, %s, %s, %s, 0, %s, %s, '', '', '', %s "
        "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(p, n) ORDER BY t.n "
        "RETURNING id"
    )
    created: list[Job] = []
    with connections[using].cursor() as cursor:
        for start in range(0, len(payloads), BULK_BATCH_SIZE):
            batch = payloads[start : start + BULK_BATCH_SIZE]
            payloads_json = json.dumps(batch, ensure_ascii=False)
            cursor.execute(
                sql,
                [
                    definition.name,
                    JobStatus.PENDING,
                    queue,
                    priority,
                    definition.max_attempts,
                    run_at,
                    now,
                    payloads_json,
                ],
            )
            # Ids come from the sequence in insertion order, which follows t.n.
            ids = sorted(row[0] for row in cursor.fetchall())
            created.extend(
                Job.from_db(
                    using,
                    fields,
                    _pending_row(fields, job_id, definition, payload, queue, priority, run_at, now),
                )
                for job_id, payload in zip(ids, batch, strict=True)
            )
    return created


def _pending_row(
    fields: list[str],
    job_id: int,
    definition: JobDefinition,
    payload: dict[str, Any],
    queue: str,
    priority: int,
    run_at: dt.datetime,
    now: dt.datetime,
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
        "created_at": now,
    }
    return [values.get(field) for field in fields]


class EnqueueOptions:
    """``handle.using(run_at=..., dedupe_key=...)``: options for the next enqueue."""

    ALLOWED = frozenset({"run_at", "delay", "dedupe_key", "priority", "queue"})

    def __init__(self, definition: JobDefinition, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - self.ALLOWED)
        if unknown:
            raise TypeError(
                f"Job {definition.name!r}: using() got unknown option(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(self.ALLOWED))}."
            )
        self.definition = definition
        self.options = options

    def enqueue(self, **payload: Any) -> Job:
        return enqueue(self.definition, payload, **self.options)

    def enqueue_many(self, payloads: Iterable[Mapping[str, Any]]) -> list[Job]:
        options = {k: v for k, v in self.options.items() if k != "dedupe_key"}
        if "dedupe_key" in self.options:
            raise TypeError("enqueue_many() does not take a dedupe_key: each job needs its own.")
        return enqueue_many(self.definition, payloads, **options)


# --- checks -------------------------------------------------------------------------


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
) -> Job:
    """A checked, unsaved Job row."""
    return Job(
        name=definition.name,
        payload=check_payload(definition, payload),
        status=JobStatus.PENDING,
        queue=check_queue(definition, queue),
        priority=check_priority(definition, priority),
        max_attempts=definition.max_attempts,
        run_at=run_at,
        scheduled_for=scheduled_for,
        dedupe_key=dedupe_key,
        active_dedupe_key=dedupe_key,
        created_at=now,
    )


def check_payload(definition: JobDefinition, payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """The payload as a plain dict; raises InvalidPayload naming the job and the key."""
    name = definition.name
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise InvalidPayload(
            f"Job {name!r}: the payload must be a dict of keyword arguments, "
            f"got {type(payload).__name__}."
        )
    for key, value in payload.items():
        if not isinstance(key, str):
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} is a {type(key).__name__}; keys must be "
                "strings (they are the handler's keyword arguments)."
            )
        problem = _text_problem(key, f"payload key {key!r}") or json_problem(value, key)
        if problem:
            raise InvalidPayload(f"Job {name!r}: {problem}")
    _check_binds(definition, payload)
    payload = dict(payload)
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    limit = get_settings().MAX_PAYLOAD_BYTES
    if size > limit:
        raise InvalidPayload(
            f"Job {name!r}: the payload is {size} bytes of JSON, over the limit of {limit} "
            "(CRONQUEUE['MAX_PAYLOAD_BYTES']). Store large data elsewhere and pass its id."
        )
    return payload


def json_problem(value: Any, path: str) -> str | None:
    """Why ``value`` cannot round-trip through JSON, naming its path, or None."""
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"payload key {path!r} holds {value!r}, which JSON cannot represent."
    if isinstance(value, str):
        return _text_problem(value, f"payload key {path!r} holds a string that")
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = json_problem(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"payload key {path!r} holds a dict with a non-string key {key!r}."
            problem = _text_problem(key, f"payload key {path!r} holds a key that") or json_problem(
                item, f"{path}.{key}"
            )
            if problem:
                return problem
        return None
    return (
        f"payload key {path!r} holds a {type(value).__name__} ({_short_repr(value)}), which is "
        "not JSON. Pass plain JSON values: an id instead of a model instance, an ISO 8601 "
        "string instead of a datetime, a list instead of a set."
    )


def _text_problem(text: str, what: str) -> str | None:
    """Why a string (a value or a key) cannot be stored in the database, or None."""
    if "\x00" in text:
        return (
            f"{what} contains a NUL character (\\x00), which databases reject in text; "
            "remove it or encode the data (e.g. base64)."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} contains a lone surrogate, which is not valid UTF-8."
    return None


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_binds(definition: JobDefinition, payload: Mapping[str, Any]) -> None:
    name = definition.name
    if definition.cron is not None:
        if payload:
            raise InvalidPayload(
                f"Job {name!r} is a cron schedule; its handler takes only the CronRun, so the "
                f"payload must be empty (got key {next(iter(payload))!r})."
            )
        return
    parameters = definition.signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for key in payload:
        parameter = parameters.get(key)
        if parameter is None and not takes_any:
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} is not an argument of "
                f"{definition.qualified_function}{definition.signature}."
            )
        if parameter is not None and parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} names a positional-only argument; "
                "make it a normal or keyword-only argument."
            )
    for parameter in parameters.values():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_ONLY,
        )
        if required and parameter.name not in payload:
            raise InvalidPayload(
                f"Job {name!r}: payload key {parameter.name!r} is missing; "
                f"{definition.qualified_function}{definition.signature} requires it."
            )


def check_queue(definition: JobDefinition, queue: str | None) -> str:
    if queue is None:
        return definition.effective_queue
    if not isinstance(queue, str) or not queue.strip() or len(queue) > MAX_QUEUE_LENGTH:
        raise ValueError(
            f"Job {definition.name!r}: queue= must be a non-empty string of at most "
            f"{MAX_QUEUE_LENGTH} characters, got {queue!r}."
        )
    problem = _text_problem(queue, "queue=")
    if problem:
        raise ValueError(f"Job {definition.name!r}: {problem}")
    return queue


def check_priority(definition: JobDefinition, priority: int | None) -> int:
    if priority is None:
        return definition.priority
    if not is_priority(priority):
        raise ValueError(
            f"Job {definition.name!r}: priority= must be an integer from {MIN_PRIORITY} to "
            f"{MAX_PRIORITY}, got {priority!r}."
        )
    return priority


def check_dedupe_key(definition: JobDefinition, key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"Job {definition.name!r}: dedupe_key= must be a non-empty string, got {key!r}."
        )
    if len(key) > MAX_DEDUPE_KEY_LENGTH:
        raise ValueError(
            f"Job {definition.name!r}: dedupe_key= is {len(key)} characters long; the limit is "
            f"{MAX_DEDUPE_KEY_LENGTH}. Hash long keys (e.g. hashlib.sha256(key).hexdigest())."
        )
    problem = _text_problem(key, "dedupe_key=")
    if problem:
        raise ValueError(f"Job {definition.name!r}: {problem}")
    return key


def resolve_run_at(
    definition: JobDefinition,
    now: dt.datetime,
    run_at: dt.datetime | None,
    delay: dt.timedelta | float | None,
) -> dt.datetime:
    if run_at is not None and delay is not None:
        raise ValueError(f"Job {definition.name!r}: pass run_at= or delay=, not both.")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise ValueError(
                f"Job {definition.name!r}: run_at= must be a datetime, got {run_at!r}."
            )
        if timezone.is_naive(run_at):
            raise ValueError(
                f"Job {definition.name!r}: run_at= is a naive datetime; pass an aware one "
                "(e.g. django.utils.timezone.now() + timedelta(...))."
            )
        return run_at
    if delay is None:
        return now
    if isinstance(delay, dt.timedelta):
        return now + delay
    if isinstance(delay, (int, float)) and not isinstance(delay, bool) and math.isfinite(delay):
        return now + dt.timedelta(seconds=delay)
    raise ValueError(
        f"Job {definition.name!r}: delay= must be a timedelta or a finite number of seconds, "
        f"got {delay!r}."
    )


# --- writing ------------------------------------------------------------------------


ONE_STATEMENT_VENDORS = ("postgresql", "sqlite")


# The columns a new row sets; the others (lease, result, start and finish) start NULL.
INSERT_COLUMNS = (
    "name, payload, status, queue, priority, attempts, max_attempts, run_at, scheduled_for, "
    "dedupe_key, active_dedupe_key, worker_id, last_error, traceback, created_at"
)
_insert_statements: dict[tuple[str, bool], str] = {}


def _insert_statement(vendor: str, wake: bool) -> str:
    """The INSERT of one new row, built once per vendor: its text never changes, so the
    driver parses it once."""
    key = (vendor, wake)
    if key not in _insert_statements:
        payload_placeholder = "%s::jsonb" if vendor == "postgresql" else "%s"
        returning = "id, pg_notify(%s, '')" if wake and vendor == "postgresql" else "id"
        _insert_statements[key] = (
            f"INSERT INTO {Job._meta.db_table} ({INSERT_COLUMNS}) VALUES "
            f"(%s, {payload_placeholder}, %s, %s, %s, %s, %s, %s, %s, %s, %s, '', '', '', %s) "
            f"ON CONFLICT (name, active_dedupe_key) DO NOTHING RETURNING {returning}"
        )
    return _insert_statements[key]


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
        to_db(row.created_at),
    ]
    if wake:
        params.append(NOTIFY_CHANNEL)
    sql = _insert_statement(connection.vendor, wake)
    for _ in range(DEDUPE_ATTEMPTS):
        with fast_cursor(connection) as cursor:
            cursor.execute(sql, params)
            inserted = cursor.fetchone()
        if inserted is not None:
            row.pk = inserted[0]
            row._state.adding = False
            row._state.db = using
            return row
        existing = _active_holder(row, using)
        if existing is not None:
            return existing
    raise IntegrityError(
        f"Job {row.name!r}: could not enqueue with dedupe_key {row.dedupe_key!r}: the key kept "
        "changing hands; try again."
    )


def _due_soon(run_at: dt.datetime, now: dt.datetime) -> bool:
    return run_at <= now + dt.timedelta(seconds=get_settings().POLL_INTERVAL)


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
        except IntegrityError:
            row.pk = None
            existing = _active_holder(row, using)
            if existing is not None:
                return existing
    raise IntegrityError(
        f"Job {row.name!r}: could not enqueue with dedupe_key {row.dedupe_key!r}: the key kept "
        "changing hands; try again."
    )


def _active_holder(row: Job, using: str) -> Job | None:
    holders = Job.objects.using(using).filter(name=row.name, active_dedupe_key=row.dedupe_key)
    if connections[using].vendor == "mysql" and connections[using].in_atomic_block:
        holders = holders.select_for_update()  # a locking read sees the latest commit
    return holders.first()


def notify_workers(using: str, run_ats: list[dt.datetime], now: dt.datetime) -> None:
    """Wake idle PostgreSQL workers (delivered when the enqueuing transaction commits)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    horizon = now + dt.timedelta(seconds=get_settings().POLL_INTERVAL)
    if not any(run_at <= horizon for run_at in run_ats):
        return
    with connection.cursor() as cursor:
        cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")
