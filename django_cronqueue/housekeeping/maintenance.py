"""Housekeeping that a tick does besides running jobs: returning expired leases (the
transition itself is ``lifecycle.lose_lease``), pruning finished rows past their
retention (and out of the counts of finished rows, ``history``), the batches none of
whose jobs are left, and the flow-control log past its windows, and forgetting workers
that died without unregistering."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from django.db import connections, transaction
from django.db.models import Exists, Model, OuterRef, Q, QuerySet

from ..conf import database_alias, get_settings, max_clock_skew
from ..db.cursors import fast_cursor
from ..definitions.registry import registry
from ..history import archive, counting
from ..lifecycle import lose_lease
from ..models import (
    Batch,
    FlowLock,
    Job,
    JobAttempt,
    JobDependency,
    JobStart,
    JobStatus,
    Worker,
)

EXPIRED_BATCH = 500
DEAD_WORKER_AGE = dt.timedelta(days=1)
PRUNE_EVERY = dt.timedelta(hours=1)
# Starts are kept this much longer than their window, for the workers whose clocks run
# behind the pruner's (at least twice the clock skew a worker may have).
START_MARGIN = dt.timedelta(minutes=5)
# Starts of a name this process defines without a rate limit (another deploy may have
# one) are kept this long; a FlowLock row not saturated for this long is deleted (a
# claim re-creates it).
FLOW_IDLE_AGE = dt.timedelta(days=1)


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def recover_expired_leases(now: dt.datetime) -> int:
    """Running rows whose lease expired go back to pending, due at once, or to failed
    (with ``on_failed``) when no attempt is left. Returns how many."""
    expired = list(
        _jobs()
        .filter(status=JobStatus.RUNNING, locked_until__lt=now)
        .values(
            "id",
            "name",
            "lock_token",
            "attempts",
            "max_attempts",
            "started_at",
            "worker_id",
            "cancel_requested_at",
            "cancel_requested_by",
            "cancel_reason",
        )
        .order_by("locked_until")[:EXPIRED_BATCH]
    )
    return sum(lose_lease(row, registry.get(row["name"]), now) for row in expired)


class PruneClock:
    """Decides when pruning (or another periodic chore, ``every``) is due: at most once
    per ``every`` of tick time (a ``now`` before the last time, as tests inject, starts
    over)."""

    def __init__(self, every: dt.timedelta = PRUNE_EVERY) -> None:
        self._every = every
        self._last: dt.datetime | None = None
        self._lock = threading.Lock()

    def due(self, now: dt.datetime) -> bool:
        with self._lock:
            if self._last is None or now < self._last or now - self._last >= self._every:
                self._last = now
                return True
            return False

    def arm(self, now: dt.datetime) -> None:
        """As if the chore ran at ``now``: next due one interval later."""
        with self._lock:
            self._last = now

    def again(self) -> None:
        """The chore was left undone: due again at the next ``due``."""
        with self._lock:
            self._last = None


def prune(now: dt.datetime) -> int:
    """Delete finished rows past their retention, in batches. Never pending or running rows.

    Raises ``history.Busy`` (the batches before it deleted) when another transaction
    holds the counts, which each batch changes, or is making the history table of ended
    rows: a pass never waits on them."""
    settings = get_settings()
    deleted = 0
    counting.ensure_mark()
    if settings.SUCCEEDED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.SUCCEEDED_RETENTION)
        deleted += _drop_expired_days(now, cutoff)
        deleted += _delete_in_batches([JobStatus.SUCCEEDED], cutoff, settings.PRUNE_BATCH_SIZE)
    if settings.FAILED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.FAILED_RETENTION)
        deleted += _delete_in_batches(
            [JobStatus.FAILED, JobStatus.CANCELLED], cutoff, settings.PRUNE_BATCH_SIZE
        )
    prune_batches()
    prune_flow(now)
    prune_dead_workers(now)
    return deleted


def prune_batches() -> int:
    """Delete the finished batches whose members and callbacks have all been pruned
    (their rows go with the jobs' retention; a batch would otherwise outlive them)."""
    finished = Batch.objects.using(database_alias()).filter(finished_at__isnull=False)
    if not finished.exists():  # a site without batches: no statement over the job tables
        return 0
    jobs_left = Job.objects.filter(batch_id=OuterRef("pk"))
    gone = finished.filter(
        ~Exists(jobs_left),
        then_job__isnull=True,
        finally_job__isnull=True,
    )
    return _delete_batches(gone, get_settings().PRUNE_BATCH_SIZE)


def prune_flow(now: dt.datetime) -> int:
    """Delete the starts that no rate window can count any more, and the FlowLock rows
    of keys not saturated for a day. Returns how many rows."""
    batch_size = get_settings().PRUNE_BATCH_SIZE
    margin = max(START_MARGIN, dt.timedelta(seconds=2 * max_clock_skew()))
    starts = JobStart.objects.using(database_alias())
    windows = {d.name: d.rate_limit.window for d in registry if d.rate_limit is not None}
    deleted = 0
    for name, window in windows.items():
        old = starts.filter(name=name, started_at__lt=now - window - margin)
        deleted += _delete_batches(old, batch_size)
    others = starts.exclude(name__in=list(windows)).filter(started_at__lt=now - FLOW_IDLE_AGE)
    deleted += _delete_batches(others, batch_size)
    return deleted + _delete_idle_flow_locks(now)


def _delete_idle_flow_locks(now: dt.datetime) -> int:
    """Delete the FlowLock rows of keys not saturated for a day, a key a transaction:
    locked by its unique key, checked, then deleted by primary key. Claims lock these rows
    by that key, in (name, key) order, and hold them to their commit. A DELETE filtering
    on ``blocked_until`` may scan that index (InnoDB picks it even for one id) and lock
    other keys' rows on the way, holding one while it waits for another that a claim
    holds, which may be waiting for the first (a deadlock)."""
    alias = database_alias()
    idle_since = now - FLOW_IDLE_AGE
    idle = Q(blocked_until__isnull=True) | Q(blocked_until__lt=idle_since)
    rows = FlowLock.objects.using(alias)
    keys = rows.filter(idle).order_by("name", "limit_key").values_list("name", "limit_key")
    deleted = 0
    for name, limit_key in list(keys):
        with transaction.atomic(using=alias):
            held = rows.select_for_update().filter(name=name, limit_key=limit_key)
            for pk, blocked_until in held.values_list("pk", "blocked_until"):
                if blocked_until is None or blocked_until < idle_since:
                    deleted += rows.filter(pk=pk).delete()[0]
    return deleted


def _delete_batches(rows: QuerySet[Model], batch_size: int) -> int:
    deleted = 0
    while True:
        ids = list(rows.order_by().values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        count, _ = rows.filter(pk__in=ids).delete()
        deleted += count
        if len(ids) < batch_size:
            return deleted


def prune_dead_workers(now: dt.datetime) -> int:
    """Forget workers not seen for a day (they crashed without unregistering)."""
    cutoff = now - DEAD_WORKER_AGE
    deleted, _ = Worker.objects.using(database_alias()).filter(last_seen__lt=cutoff).delete()
    return deleted


def _drop_expired_days(now: dt.datetime, cutoff: dt.datetime) -> int:
    """PostgreSQL: the days of succeeded rows wholly past ``cutoff`` go with their history
    tables (``archive``), out of the counts in the same transaction; the planner's
    statistics of the job table are then taken again."""
    connection = connections[database_alias()]
    if not archive.keeps_days(connection):
        return 0
    if not archive.postgresql.expired_days(connection, cutoff):
        return 0  # most hours: no day to drop, and the counts' lock is not taken
    # The counts brought up to date, with their days (after an upgrade, the first pass
    # counts them): a day's rows then leave the counts by its counts, never read.
    counting.count_finished(now)
    with transaction.atomic(using=database_alias()):
        counted_until = counting.lock_mark(wait=False)
        # Listed again under the lock: another worker's prune may have dropped them.
        expired = archive.postgresql.expired_days(connection, cutoff)
        dropped = sum(_drop_counted_day(connection, name, counted_until) for name in expired)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(Job._meta.db_table)}")
    return dropped


def _drop_counted_day(connection: Any, name: str, counted_until: dt.datetime | None) -> int:
    """Drop one day table, its rows out of the counts by the day's counts (a mark
    deleted meanwhile: nothing is counted); returns how many rows went."""
    day = archive.postgresql.day_of_table(name)
    staying = archive.postgresql.kept_elsewhere(connection, day, counted_until)
    counted = counting.uncount_day(day, staying)
    return counted + archive.postgresql.drop_day(connection, name, counted_until)


def _delete_in_batches(statuses: list[str], cutoff: dt.datetime, batch_size: int) -> int:
    """Each batch in a transaction of its own that also takes its rows out of the counts
    of finished rows (``history``). Rows another transaction holds are left for the next
    prune: a move to history (``archive``) or a retry has them, and a prune that waited
    on one could deadlock with it (MariaDB's move checks its unique keys in the history
    partition, where the prune holds rows)."""
    deleted = 0
    while True:
        with transaction.atomic(using=database_alias()):
            counted_until = counting.lock_mark(wait=False)
            rows = list(
                _jobs()
                .filter(status__in=statuses, finished_at__lt=cutoff)
                .order_by("finished_at")
                .select_for_update(skip_locked=True)
                .values_list("id", *counting.ROW_FIELDS)[:batch_size]
            )
            if rows:
                deleted += _delete_jobs([row[0] for row in rows])
                counting.uncount([row[1:] for row in rows], counted_until)
        if len(rows) < batch_size:
            return deleted


def _delete_jobs(ids: list[int]) -> int:
    """Delete these job rows and what points at them, as ``QuerySet.delete()`` would
    (dependency links and attempt rows cascade, a batch's callback is set to NULL), with
    one statement per table, and none for a workflow table that is empty (a site that
    uses no workflows):
    ``delete()`` loads every row as a model instance first, because jobs are pointed at,
    which made a prune of millions of rows take half an hour."""
    alias = database_alias()
    links = JobDependency.objects.using(alias)
    if links.exists():
        links.filter(Q(upstream_id__in=ids) | Q(downstream_id__in=ids)).delete()
    batches = Batch.objects.using(alias)
    if batches.exists():
        batches.filter(then_job_id__in=ids).update(then_job=None)
        batches.filter(finally_job_id__in=ids).update(finally_job=None)
    # No database constraint links an attempt to its job (see JobAttempt): its delete
    # is this one, in the transaction of the job's.
    JobAttempt.objects.using(alias).filter(job_id__in=ids).delete()
    connection = connections[alias]
    table = connection.ops.quote_name(Job._meta.db_table)
    params: list[Any]
    if connection.vendor == "postgresql":  # one array parameter, not a thousand
        where, params = "id = ANY(%s)", [ids]
    else:
        where, params = f"id IN ({', '.join(['%s'] * len(ids))})", list(ids)
    with fast_cursor(connection) as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {where}", params)
        return int(cursor.rowcount)
