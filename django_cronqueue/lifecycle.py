"""Every change of a job's status happens here.

The worker, the admin and user code call these functions (or the ``Job`` methods
that wrap them); nothing else writes ``status``. Each transition is one conditional
UPDATE, so two actors racing for the same row cannot both win: completions are
guarded by the lease token of the claim that ran them.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, transaction
from django.db.models import F
from django.utils import timezone

from . import errors, signals
from .conf import database_alias, get_settings
from .exceptions import LeaseLost
from .models import Job, JobStatus
from .registry import JobDefinition, registry

if TYPE_CHECKING:
    from .claiming import ClaimedJob

logger = logging.getLogger("django_cronqueue")

EXPIRED_BATCH = 500
DEAD_WORKER_AGE = dt.timedelta(days=1)


def _jobs() -> Any:
    return Job.objects.using(database_alias())


# --- the worker's transitions -------------------------------------------------------


def complete_success(job: ClaimedJob, *, now: dt.datetime, result: Any = None) -> bool:
    """running -> succeeded, only if this claim still holds the lease."""
    updated = (
        _jobs()
        .filter(id=job.id, status=JobStatus.RUNNING, lock_token=job.token)
        .update(
            status=JobStatus.SUCCEEDED,
            finished_at=now,
            locked_until=None,
            lock_token=None,
            active_dedupe_key=None,
            result=result,
        )
    )
    if not updated:
        _log_discarded(job, "success")
    return bool(updated)


def complete_successes(jobs: list[ClaimedJob], *, now: dt.datetime) -> set[int]:
    """running -> succeeded for many rows at once (handlers that returned None), each
    only if its claim still holds the lease. Returns the ids written."""
    from .claiming.base import TABLE, adapt, placeholders

    connection = connections[database_alias()]
    returning = connection.vendor != "mysql"  # MariaDB and MySQL have no UPDATE ... RETURNING
    by_token: dict[str, list[int]] = {}
    for job in jobs:
        by_token.setdefault(job.token, []).append(job.id)
    written: set[int] = set()
    with connection.cursor() as cursor:
        for token, ids in by_token.items():
            sql = (
                f"UPDATE {TABLE} SET status = %s, finished_at = %s, locked_until = NULL, "
                f"lock_token = NULL, active_dedupe_key = NULL "
                f"WHERE lock_token = %s AND status = %s AND id IN ({placeholders(ids)})"
            )
            params = adapt(connection, [JobStatus.SUCCEEDED, now, token, JobStatus.RUNNING, *ids])
            if returning:
                cursor.execute(sql + " RETURNING id", params)
                written.update(row[0] for row in cursor.fetchall())
            else:
                cursor.execute(sql, params)
                if cursor.rowcount == len(ids):
                    written.update(ids)
                else:
                    written.update(_succeeded_at(cursor, connection, ids, now))
    for job in jobs:
        if job.id not in written:
            _log_discarded(job, "success")
    return written


def _succeeded_at(cursor: Any, connection: Any, ids: list[int], now: dt.datetime) -> set[int]:
    from .claiming.base import TABLE, adapt, placeholders

    cursor.execute(
        f"SELECT id FROM {TABLE} WHERE status = %s AND finished_at = %s "
        f"AND id IN ({placeholders(ids)})",
        adapt(connection, [JobStatus.SUCCEEDED, now, *ids]),
    )
    return {row[0] for row in cursor.fetchall()}


def complete_failure(
    job: ClaimedJob, exc: BaseException, *, now: dt.datetime, definition: JobDefinition | None
) -> str:
    """running -> pending (a retry, after the backoff) or failed. Returns the outcome:
    ``"retrying"``, ``"failed"`` or ``"discarded"`` (the lease was lost meanwhile)."""
    error, trace = errors.describe(exc), errors.format_traceback(exc)
    guard = _jobs().filter(id=job.id, status=JobStatus.RUNNING, lock_token=job.token)
    if job.attempts < job.max_attempts:
        delay = _backoff_delay(definition, job.attempts)
        run_at = now + dt.timedelta(seconds=delay)
        updated = guard.update(
            status=JobStatus.PENDING,
            run_at=run_at,
            locked_until=None,
            lock_token=None,
            last_error=error,
            traceback=trace,
        )
        if updated:
            signals.send(signals.job_retrying, job.name, job=job, exc=exc, run_at=run_at)
            return "retrying"
    else:
        updated = guard.update(
            status=JobStatus.FAILED,
            finished_at=now,
            locked_until=None,
            lock_token=None,
            active_dedupe_key=None,
            last_error=error,
            traceback=trace,
        )
        if updated:
            report_failure(definition, job.id, exc)
            return "failed"
    _log_discarded(job, "failure")
    return "discarded"


def _backoff_delay(definition: JobDefinition | None, attempt: int) -> float:
    if definition is None:
        return 0.0
    try:
        return max(float(definition.backoff(attempt)), 0.0)
    except Exception:
        logger.exception("Backoff of job %s raised; retrying at once", definition.name)
        return 0.0


def report_failure(definition: JobDefinition | None, job_id: int, exc: BaseException) -> None:
    """After the final attempt failed: ``on_failed`` once, then ``job_failed``.

    Errors of ``on_failed`` are logged and never retried.
    """
    if definition is None or (definition.on_failed is None and not signals.job_failed.receivers):
        return
    job = _jobs().filter(id=job_id).first()
    if job is None:
        return
    if definition.on_failed is not None:
        try:
            definition.on_failed(job, exc)
        except BaseException:  # even SystemExit: a hook must not stop the worker
            logger.exception("on_failed of job %s #%s raised", job.name, job.id)
    signals.send(signals.job_failed, job.name, job=job, exc=exc)


def claim_one(job_id: int, *, worker_id: str) -> ClaimedJob | None:
    """pending -> running for one row whatever its run_at (eager mode's claim: the
    worker's, minus the due and concurrency conditions). None if it is not pending."""
    from .claiming import ClaimedJob

    now = timezone.now()
    name = _jobs().filter(id=job_id).values_list("name", flat=True).first() or ""
    definition = registry.get(name)
    timeout = definition.effective_timeout if definition else 0.0
    token = uuid.uuid4().hex
    claimed = (
        _jobs()
        .filter(id=job_id, status=JobStatus.PENDING)
        .update(
            status=JobStatus.RUNNING,
            attempts=F("attempts") + 1,
            locked_until=now + dt.timedelta(seconds=get_settings().LEASE + timeout),
            lock_token=token,
            worker_id=worker_id,
            started_at=now,
        )
    )
    if not claimed:
        return None
    row = _jobs().get(id=job_id)
    return ClaimedJob(
        id=row.pk,
        name=row.name,
        payload=row.payload,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        queue=row.queue,
        priority=row.priority,
        run_at=row.run_at,
        scheduled_for=row.scheduled_for,
        created_at=row.created_at,
        token=token,
    )


def release_unstarted(jobs: list[ClaimedJob]) -> int:
    """Give back claimed jobs whose handler never started: pending again, claim undone."""
    released = 0
    for job in jobs:
        released += (
            _jobs()
            .filter(id=job.id, status=JobStatus.RUNNING, lock_token=job.token)
            .update(
                status=JobStatus.PENDING,
                attempts=F("attempts") - 1,
                locked_until=None,
                lock_token=None,
                worker_id="",
                started_at=None,
            )
        )
    return released


def renew_leases(worker_id: str, job_ids: list[int], *, until: dt.datetime) -> int:
    """Extend the leases this worker still holds."""
    if not job_ids:
        return 0
    return (
        _jobs()
        .filter(id__in=job_ids, status=JobStatus.RUNNING, worker_id=worker_id)
        .update(locked_until=until)
    )


def recover_expired_leases(now: dt.datetime) -> int:
    """Running rows whose lease expired go back to pending, due at once, or to failed
    (with ``on_failed``) when no attempt is left."""
    expired = list(
        _jobs()
        .filter(status=JobStatus.RUNNING, locked_until__lt=now)
        .values("id", "name", "lock_token", "attempts", "max_attempts", "started_at", "worker_id")
        .order_by("locked_until")[:EXPIRED_BATCH]
    )
    recovered = 0
    for row in expired:
        recovered += _recover_one(row, now)
    return recovered


def _recover_one(row: dict[str, Any], now: dt.datetime) -> int:
    definition = registry.get(row["name"])
    exc = LeaseLost(_lease_lost_message(row, definition, now))
    error = errors.describe(exc)
    final = row["attempts"] >= row["max_attempts"]
    changes: dict[str, Any] = {"locked_until": None, "lock_token": None, "last_error": error}
    if final:
        changes.update(status=JobStatus.FAILED, finished_at=now, active_dedupe_key=None)
    else:
        changes.update(status=JobStatus.PENDING, run_at=now)
    updated = (
        _jobs()
        .filter(id=row["id"], status=JobStatus.RUNNING, lock_token=row["lock_token"])
        .update(**changes)
    )
    if not updated:
        return 0
    if not final and signals.job_retrying.receivers:
        job = _jobs().filter(id=row["id"]).first()
        signals.send(signals.job_retrying, row["name"], job=job, exc=exc, run_at=now)
    logger.warning(
        "Job %s #%s lost its lease: %s",
        row["name"],
        row["id"],
        error,
        extra={"job_id": row["id"], "job_name": row["name"], "outcome": "lease_lost"},
    )
    if final:
        report_failure(definition, row["id"], exc)
    return 1


def _lease_lost_message(
    row: dict[str, Any], definition: JobDefinition | None, now: dt.datetime
) -> str:
    attempt = f"attempt {row['attempts']} of {row['max_attempts']}"
    started = row["started_at"]
    if definition is not None and started is not None:
        timeout = definition.effective_timeout
        if now - started >= dt.timedelta(seconds=timeout):
            return (
                f"lease lost: {attempt} was still unfinished past its timeout of {timeout:g}s "
                "(the handler overran, or its worker stopped)"
            )
    holder = row["worker_id"] or "unknown worker"
    return f"lease lost: {attempt} stopped being renewed by {holder} (worker crashed or stopped)"


def prune(now: dt.datetime) -> int:
    """Delete finished rows past their retention, in batches. Never pending or running rows."""
    settings = get_settings()
    deleted = 0
    if settings.SUCCEEDED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.SUCCEEDED_RETENTION)
        deleted += _delete_in_batches([JobStatus.SUCCEEDED], cutoff, settings.PRUNE_BATCH_SIZE)
    if settings.FAILED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.FAILED_RETENTION)
        deleted += _delete_in_batches(
            [JobStatus.FAILED, JobStatus.CANCELLED], cutoff, settings.PRUNE_BATCH_SIZE
        )
    prune_dead_workers(now)
    return deleted


def prune_dead_workers(now: dt.datetime) -> int:
    """Forget workers not seen for a day (they crashed without unregistering)."""
    from .models import Worker

    cutoff = now - DEAD_WORKER_AGE
    deleted, _ = Worker.objects.using(database_alias()).filter(last_seen__lt=cutoff).delete()
    return deleted


def _delete_in_batches(statuses: list[str], cutoff: dt.datetime, batch_size: int) -> int:
    deleted = 0
    while True:
        ids = list(
            _jobs()
            .filter(status__in=statuses, finished_at__lt=cutoff)
            .order_by("finished_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        count, _ = _jobs().filter(id__in=ids, status__in=statuses).delete()
        deleted += count
        if len(ids) < batch_size:
            return deleted


# --- operator actions ---------------------------------------------------------------


def retry(job: Job, *, now: dt.datetime | None = None) -> bool:
    """failed or cancelled -> pending, due now, attempts reset.

    False when the job is in another state, or when its dedupe key is taken by
    another pending or running job of the same name.
    """
    now = now or timezone.now()
    changes = {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "run_at": now,
        "finished_at": None,
        "started_at": None,
        "locked_until": None,
        "lock_token": None,
        "worker_id": "",
        "active_dedupe_key": job.dedupe_key,
    }
    try:
        with transaction.atomic(using=database_alias()):
            updated = (
                _jobs()
                .filter(id=job.pk, status__in=[JobStatus.FAILED, JobStatus.CANCELLED])
                .update(**changes)
            )
    except IntegrityError:
        return False
    if updated:
        _apply(job, changes)
        _wake_workers(now)
    return bool(updated)


def cancel(job: Job, *, reason: str = "", now: dt.datetime | None = None) -> bool:
    """pending -> cancelled. False when the job is not pending."""
    now = now or timezone.now()
    changes = {
        "status": JobStatus.CANCELLED,
        "finished_at": now,
        "active_dedupe_key": None,
        "last_error": errors.clean_text(reason or "cancelled", errors.MAX_ERROR_CHARS),
    }
    updated = _jobs().filter(id=job.pk, status=JobStatus.PENDING).update(**changes)
    if updated:
        _apply(job, changes)
    return bool(updated)


def run_now(job: Job, *, now: dt.datetime | None = None) -> bool:
    """pending -> due now. False when the job is not pending."""
    now = now or timezone.now()
    changes = {"run_at": now}
    updated = _jobs().filter(id=job.pk, status=JobStatus.PENDING).update(**changes)
    if updated:
        _apply(job, changes)
        _wake_workers(now)
    return bool(updated)


def _wake_workers(now: dt.datetime) -> None:
    from .enqueue import notify_workers

    notify_workers(database_alias(), [now], now)


def mark_skipped(job: Job, reason: str, *, now: dt.datetime) -> None:
    """An unsaved occurrence row that will not run (overlap='skip'): created cancelled."""
    _apply(
        job,
        {
            "status": JobStatus.CANCELLED,
            "finished_at": now,
            "active_dedupe_key": None,
            "last_error": errors.clean_text(reason, errors.MAX_ERROR_CHARS),
        },
    )


def _apply(job: Job, changes: dict[str, Any]) -> None:
    for field, value in changes.items():
        setattr(job, field, value)


def _log_discarded(job: ClaimedJob, what: str) -> None:
    logger.warning(
        "Discarded the %s of job %s #%s: its lease was lost and the row has moved on",
        what,
        job.name,
        job.id,
        extra={"job_id": job.id, "job_name": job.name, "outcome": "discarded"},
    )
