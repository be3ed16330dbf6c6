"""Dedupe keys: finding the job that holds a key, telling a unique key violation from
other refusals, and inserting a row whose key holds for a span (``dedupe_for``)."""

from __future__ import annotations

import datetime as dt
import random
import time
from typing import Any

from django.db import IntegrityError, OperationalError, connections, transaction

from ..db.notify import wake_workers
from ..history.archive.mysql import IN_HOT_PARTITION
from ..models import Job

DEDUPE_ATTEMPTS = 5
# How many times an enqueue outside a transaction tries again after the database chose
# it as a deadlock's victim (MySQL's ER_LOCK_DEADLOCK, PostgreSQL's SQLSTATE 40P01).
DEADLOCK_RETRIES = 10
MYSQL_DEADLOCK = 1213
LOCKING_VENDORS = ("mysql", "postgresql")  # SQLite runs one writing transaction at a time
POSTGRESQL_DEADLOCK = "40P01"


def is_deadlock(exc: OperationalError) -> bool:
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return sqlstate == POSTGRESQL_DEADLOCK or (bool(exc.args) and exc.args[0] == MYSQL_DEADLOCK)


def insert_within_span(row: Job, using: str, now: dt.datetime) -> Job:
    """Insert a row whose dedupe key holds for a span (``dedupe_for``), or return the job
    that holds the key: the one created within the span (any status), or a pending or
    running one. A holder whose span has passed gives the key up (a conditional UPDATE),
    and the insert is tried again. The unique constraints on (name, window_dedupe_key)
    and (name, active_dedupe_key) decide, so this holds under concurrent enqueues from
    many processes, on every vendor.

    Racers inside their own transactions could deadlock: on MySQL and MariaDB each failed
    insert holds a shared lock on the key that all want exclusively to free it; on
    PostgreSQL one waits for the other's insert on one unique index while the other
    waits on the second. Inside a transaction the holder is therefore locked first, so
    racers queue on it; outside one, a deadlock victim (only its own statement was
    rolled back) simply tries again."""
    connection = connections[using]
    lock_first = connection.vendor in LOCKING_VENDORS and connection.in_atomic_block
    deadlocks = 0
    while True:
        try:
            return _insert_within_span(row, using, now, lock_first=lock_first)
        except OperationalError as exc:
            if not is_deadlock(exc) or connection.in_atomic_block or deadlocks >= DEADLOCK_RETRIES:
                raise
            deadlocks += 1
            row.pk = None
            time.sleep(random.uniform(0, 0.01 * deadlocks))


def _insert_within_span(row: Job, using: str, now: dt.datetime, *, lock_first: bool) -> Job:
    for _ in range(DEDUPE_ATTEMPTS):
        holder = (
            holder_of(using, lock=True, name=row.name, window_dedupe_key=row.dedupe_key)
            if lock_first
            else None
        )
        if holder is not None and holder.dedupe_until is not None and holder.dedupe_until > now:
            return holder
        if holder is not None:
            release_span(holder, now, using)
        try:
            with transaction.atomic(using=using):
                row.save(force_insert=True, using=using)
                wake_workers(using, [row.run_at], now)
            return row
        except IntegrityError as exc:
            if not is_unique_violation(exc, using):
                raise  # e.g. a CHECK constraint: the row itself is refused
            row.pk = None
        holder = holder_of(using, name=row.name, window_dedupe_key=row.dedupe_key)
        if holder is not None:
            if holder.dedupe_until is not None and holder.dedupe_until > now:
                return holder
            release_span(holder, now, using)
            continue
        existing = active_holder(row, using)
        if existing is not None:
            return existing
    raise key_kept_changing_hands(row)


def key_kept_changing_hands(row: Job) -> IntegrityError:
    """The error of an enqueue whose dedupe key was taken and freed again on every try."""
    return IntegrityError(
        f"Job {row.name!r}: could not enqueue with dedupe_key {row.dedupe_key!r}: the key kept "
        "changing hands; try again."
    )


def release_span(holder: Job, now: dt.datetime, using: str) -> None:
    """The span of ``holder``'s key has passed: the key is free for a new job (unless
    the holder is still pending or running: its active key then still holds)."""
    Job.objects.using(using).filter(
        pk=holder.pk, window_dedupe_key=holder.window_dedupe_key, dedupe_until__lte=now
    ).update(window_dedupe_key=None)


def is_unique_violation(exc: IntegrityError, using: str) -> bool:
    """A unique key violation, not another refusal (a CHECK constraint's)."""
    vendor = connections[using].vendor
    if vendor == "mysql":
        return is_key_conflict(exc)
    if vendor == "postgresql":
        cause = exc.__cause__
        return (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) == "23505"
    return "UNIQUE constraint failed" in str(exc)


# MySQL and MariaDB error numbers of a unique key violation: ER_DUP_KEY,
# ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME.
MYSQL_DUPLICATE_KEY_ERRORS = frozenset({1022, 1062, 1586})


def is_key_conflict(exc: IntegrityError) -> bool:
    """A unique key violation (Django keeps the driver's error number in ``args``), not
    another refusal such as a CHECK constraint's."""
    return bool(exc.args) and exc.args[0] in MYSQL_DUPLICATE_KEY_ERRORS


def active_holder(row: Job, using: str) -> Job | None:
    return holder_of(using, name=row.name, active_dedupe_key=row.dedupe_key)


def holder_of(using: str, *, lock: bool = False, **key: Any) -> Job | None:
    """The job holding ``key``; with ``lock`` (in a transaction), its row locked."""
    holders = Job.objects.using(using).filter(**key)
    connection = connections[using]
    if connection.vendor == "mysql":
        # A key's holder is in the hot partition (a row moved to history holds no key:
        # archive.mysql). Named whole, the unique key is read as one entry, as racers
        # inside transactions must find it to queue on its lock (see insert_within_span).
        holders = holders.filter(IN_HOT_PARTITION)
    if connection.in_atomic_block and (lock or connection.vendor == "mysql"):
        holders = holders.select_for_update()  # a locking read sees the latest commit
    return holders.first()
