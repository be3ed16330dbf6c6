"""The worker's transitions of a claimed (running) job: success, failure or retry,
snooze, cancel after a request, a lost lease, a give-back; and the lease renewals and
progress writes of the heartbeat. Each is one UPDATE guarded by the claim's lease token."""

from __future__ import annotations

import datetime as dt
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from functools import partial, reduce
from typing import Any

from django.db import DataError, IntegrityError, connections, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from .. import signals
from ..claiming import ClaimedJob
from ..conf import database_alias
from ..db.notify import wake_workers
from ..definitions.registry import JobDefinition
from ..exceptions import LeaseLost, Snooze
from ..history import counting
from ..models import AttemptOutcome, Job, JobStatus
from ..values.error_text import (
    MAX_ERROR_CHARS,
    class_path,
    clean_text,
    describe,
    format_traceback,
)
from . import workflow
from .attempts import AttemptEnd, failed_attempt, lost_attempt, recorded
from .common import (
    Outcome,
    erased_changes,
    job_rows,
    log_discarded,
    log_extra,
    running_rows,
    undoable,
    write_failure,
)

logger = logging.getLogger("django_cronqueue")

# --- the worker's transitions -------------------------------------------------------


def complete_success(
    job: ClaimedJob,
    *,
    now: dt.datetime,
    result: Any = None,
    progress: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
    attempt_row: bool = True,
) -> bool:
    """running -> succeeded, only if this claim still holds the lease. A handler that
    returned normally succeeded, even if a cancel was requested meanwhile: its work is done.
    ``payload``: the payload written with it (a sensitive job's, its secrets erased).

    A result the database refuses (IntegrityError, DataError: a limit no check knew
    of) is dropped and logged, and the success recorded without it.

    A success after an earlier attempt also writes its attempt row (``JobAttempt``) in
    the same transaction (``attempt_row=False``: the caller does). A first-attempt
    success costs only the comparison that tells it apart."""
    if job.attempts > 1 and attempt_row:
        return _complete_later_success(
            job, now=now, result=result, progress=progress, payload=payload
        )
    changes = {
        "status": JobStatus.SUCCEEDED,
        "finished_at": now,
        "locked_until": None,
        "lock_token": None,
        "active_dedupe_key": None,
        "result": result,
        **_progress_change(progress),
        **({} if payload is None else {"payload": payload}),
    }
    with counting.finishing(now, atomic=False):
        if job.in_workflow:
            updated = _record_workflow_success(job, changes, now)
        else:
            # A job that gained a downstream job since its claim: the workflow path.
            updated = _write_success(_running(job).filter(has_downstream=False), job, changes)
            if not updated and _running(job).filter(has_downstream=True).exists():
                updated = _record_workflow_success(job, changes, now)
    if not updated:
        log_discarded(job, "success")
    return bool(updated)


def _complete_later_success(
    job: ClaimedJob,
    *,
    now: dt.datetime,
    result: Any,
    progress: dict[str, Any] | None,
    payload: dict[str, Any] | None,
) -> bool:
    """The success of an attempt after the first, and its attempt row, in one
    transaction."""
    with transaction.atomic(using=database_alias()):
        row = _running(job).values("started_at", "worker_id").first()
        end = AttemptEnd.of_row(
            row, job.id, job.attempts, outcome=AttemptOutcome.SUCCEEDED, finished_at=now
        )
        written = complete_success(
            job, now=now, result=result, progress=progress, payload=payload, attempt_row=False
        )
        return bool(recorded(int(written), end))


def ended_without_success(write: Callable[[], int], job_id: int, now: dt.datetime) -> int:
    """Run ``write`` (a final failure or a cancellation of job ``job_id``) and, if it
    wrote, cancel the jobs that waited for it and count it in its batch, in one
    transaction."""
    with counting.finishing(now):
        updated = write()
        if updated:
            workflow.after_end([job_id], now)
    return updated


def _record_workflow_success(job: ClaimedJob, changes: dict[str, Any], now: dt.datetime) -> int:
    """The success of a workflow's job and the release of what waited for it (or its
    count in its batch), in one transaction. ``has_downstream`` never goes back to false,
    so a row claimed with it needs no read; one claimed without it is written on that
    condition first, then (it gained a downstream job since) on the other."""
    rows = _running(job)
    with transaction.atomic(using=database_alias()):
        has_downstream = job.has_downstream
        if has_downstream:
            updated = _write_success(rows, job, changes)
        else:
            updated = _write_success(rows.filter(has_downstream=False), job, changes)
            if not updated:
                has_downstream = True
                updated = _write_success(rows.filter(has_downstream=True), job, changes)
        if updated:
            workflow.after_success(
                job.id, has_downstream=has_downstream, batch_id=job.batch_id, now=now
            )
    return updated


def _write_success(rows: QuerySet[Job], job: ClaimedJob, changes: dict[str, Any]) -> int:
    """The success UPDATE; a result the database refuses is dropped (and logged)."""
    if changes["result"] is None:
        return rows.update(**changes)
    try:
        with undoable():
            return rows.update(**changes)
    except (DataError, IntegrityError) as exc:
        logger.warning(
            "Job %s #%s succeeded, but the database refused its return value, which "
            "was dropped (result is None): %s",
            job.name,
            job.id,
            describe(exc),
            extra=log_extra(job, "result_dropped"),
        )
        return rows.update(**{**changes, "result": None})


def running_with_downstream(jobs: Sequence[ClaimedJob]) -> list[int]:
    """The ids of ``jobs`` still held by their claim that have a downstream job."""
    held = _held(jobs)
    if held is None:
        return []
    rows = running_rows().filter(held, has_downstream=True)
    return list(rows.values_list("pk", flat=True))


def complete_failure(
    job: ClaimedJob,
    exc: BaseException,
    *,
    now: dt.datetime,
    definition: JobDefinition | None,
    final: bool = False,
    progress: dict[str, Any] | None = None,
) -> Outcome:
    """running -> pending (a retry, after the backoff) or failed (no attempt left, or
    ``final``); or cancelled, when a cancel of the job was requested. Returns the
    outcome: RETRYING, FAILED, CANCELLED or DISCARDED (the lease was lost meanwhile).
    The attempt's row (``JobAttempt``) is written with the job's."""
    row = _held_row(job)
    if row is not None and row["cancel_requested_at"] is not None:
        return _finish_cancelled(job, row, exc, now=now, progress=progress)
    failure = {
        "last_error": describe(exc),
        "traceback": format_traceback(exc),
        "exception_class_path": class_path(exc),
        **_progress_change(progress),
    }
    guard = _running(job)
    if job.attempts < job.max_attempts and not final:
        delay = _backoff_delay(definition, job.attempts)
        run_at = now + dt.timedelta(seconds=delay)
        changes = {
            "status": JobStatus.PENDING,
            "run_at": run_at,
            "locked_until": None,
            "lock_token": None,
            **failure,
        }
        end = failed_attempt(row, job.id, job.attempts, failure, now, retry_at=run_at)
        with transaction.atomic(using=database_alias()):
            updated = recorded(write_failure(guard, changes, job.id, job.name), end)
        if updated:
            signals.send(signals.job_retrying, job.name, job=job, exc=exc, run_at=run_at)
            return Outcome.RETRYING
    else:
        changes = {
            "status": JobStatus.FAILED,
            "finished_at": now,
            "locked_until": None,
            "lock_token": None,
            "active_dedupe_key": None,
            **failure,
        }
        end = failed_attempt(row, job.id, job.attempts, failure, now, retry_at=None)
        updated = ended_without_success(
            lambda: recorded(write_failure(guard, changes, job.id, job.name), end), job.id, now
        )
        if updated:
            report_failure(definition, job.id, exc)
            return Outcome.FAILED
    log_discarded(job, "failure")
    return Outcome.DISCARDED


def complete_snooze(
    job: ClaimedJob,
    snooze: Snooze,
    *,
    now: dt.datetime,
    progress: dict[str, Any] | None = None,
) -> Outcome:
    """running -> pending, due at ``now + snooze.delay``, the attempt given back and
    ``snoozes`` counted; the lease is released at once. A job whose cancel was requested
    ends cancelled instead. Returns SNOOZED, CANCELLED or DISCARDED. The attempt's row
    (``JobAttempt``) is written with the job's."""
    row = _held_row(job)
    if row is not None and row["cancel_requested_at"] is not None:
        return _finish_cancelled(job, row, snooze, now=now, progress=progress)
    run_at = now + snooze.delay
    end = AttemptEnd.of_row(
        row,
        job.id,
        job.attempts,
        outcome=AttemptOutcome.SNOOZED,
        finished_at=now,
        error=describe(snooze),
        retry_at=run_at,
    )
    with transaction.atomic(using=database_alias()):
        updated = recorded(
            _running(job).update(
                status=JobStatus.PENDING,
                run_at=run_at,
                attempts=F("attempts") - 1,
                snoozes=F("snoozes") + 1,
                locked_until=None,
                lock_token=None,
                worker_id="",
                started_at=None,
                **_progress_change(progress),
            ),
            end,
        )
    if not updated:
        log_discarded(job, "snooze")
        return Outcome.DISCARDED
    wake_workers(database_alias(), [run_at], now)
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "Job %s #%s snoozed until %s",
            job.name,
            job.id,
            run_at.isoformat(),
            extra=log_extra(job, Outcome.SNOOZED),
        )
    signals.send(signals.job_snoozed, job.name, job=job, run_at=run_at)
    return Outcome.SNOOZED


def cancelled_message(at: dt.datetime | None, by: str, reason: str) -> str:
    """The ``last_error`` of a job cancelled while it ran: who asked, when, and why."""
    when = at.isoformat() if at is not None else "an unknown time"
    text = f"cancelled while running: cancel requested by {by or 'code'} at {when}"
    return f"{text}: {reason}" if reason else text


def _held_row(job: ClaimedJob) -> Mapping[str, Any] | None:
    """What the end of an attempt reads of its row while its claim holds it: a cancel
    request (the row decides, not this process's view: a request may have come after
    the last heartbeat), and the attempt's start and worker. None: the lease was lost."""
    return (
        _running(job)
        .values(
            "cancel_requested_at",
            "cancel_requested_by",
            "cancel_reason",
            "started_at",
            "worker_id",
        )
        .first()
    )


def _finish_cancelled(
    job: ClaimedJob,
    request: Mapping[str, Any],
    exc: BaseException,
    *,
    now: dt.datetime,
    progress: dict[str, Any] | None,
) -> Outcome:
    """A handler raised after a cancel of its job was requested (``request``, its row):
    running -> cancelled, no retry, no ``on_failed``."""
    message = cancelled_message(
        request["cancel_requested_at"], request["cancel_requested_by"], request["cancel_reason"]
    )
    changes = {
        **_cancelled_changes(message, now),
        "traceback": format_traceback(exc),
        "exception_class_path": class_path(exc),
        **_progress_change(progress),
        **erased_changes(job.payload, None),  # its sensitive values, in the same UPDATE
    }
    end = AttemptEnd.of_row(
        request,
        job.id,
        job.attempts,
        outcome=AttemptOutcome.CANCELLED,
        finished_at=now,
        error=changes["last_error"],
        traceback=changes["traceback"],
    )
    updated = ended_without_success(
        lambda: recorded(write_failure(_running(job), changes, job.id, job.name), end),
        job.id,
        now,
    )
    if not updated:
        log_discarded(job, "cancellation")
        return Outcome.DISCARDED
    _announce_cancelled(job.id, job.name, request)
    return Outcome.CANCELLED


def _cancelled_changes(message: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "status": JobStatus.CANCELLED,
        "finished_at": now,
        "locked_until": None,
        "lock_token": None,
        "active_dedupe_key": None,
        "last_error": clean_text(message, MAX_ERROR_CHARS),
    }


def _announce_cancelled(job_id: int, name: str, request: Mapping[str, Any]) -> None:
    logger.info(
        "Job %s #%s cancelled while running (requested by %s)",
        name,
        job_id,
        request["cancel_requested_by"] or "code",
        extra={"job_id": job_id, "job_name": name, "outcome": Outcome.CANCELLED},
    )
    if signals.job_cancelled.receivers:
        signals.send(
            signals.job_cancelled,
            name,
            job=job_rows().filter(id=job_id).first(),
            requested_by=request["cancel_requested_by"],
            reason=request["cancel_reason"],
        )


def _progress_change(progress: dict[str, Any] | None) -> dict[str, Any]:
    return {} if progress is None else {"progress": progress}


def _running(job: ClaimedJob) -> QuerySet[Job]:
    """The row of this claim, while it holds the lease."""
    return running_rows().filter(id=job.id, lock_token=job.token)


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
    job = job_rows().filter(id=job_id).first()
    if job is None:
        return
    if definition.on_failed is not None:
        try:
            definition.on_failed(job, exc)
        except BaseException:  # even SystemExit: a hook must not stop the worker
            logger.exception("on_failed of job %s #%s raised", job.name, job.id)
    signals.send(signals.job_failed, job.name, job=job, exc=exc)


def release_unstarted(jobs: list[ClaimedJob], *, now: dt.datetime | None = None) -> int:
    """Give back claimed jobs whose handler never started: pending again, claim undone;
    those whose cancel was requested meanwhile end cancelled instead."""
    now = now or timezone.now()
    released = 0
    for job in jobs:
        request = (
            _running(job)
            .filter(cancel_requested_at__isnull=False)
            .values("cancel_requested_at", "cancel_requested_by", "cancel_reason")
            .first()
        )
        if request is not None:
            message = cancelled_message(
                request["cancel_requested_at"],
                request["cancel_requested_by"],
                request["cancel_reason"],
            ).replace("while running", "before it started")
            cancel = partial(_running(job).update, **_cancelled_changes(message, now))
            if ended_without_success(cancel, job.id, now):
                _announce_cancelled(job.id, job.name, request)
            continue
        released += (
            running_rows()
            .filter(id=job.id, lock_token=job.token)
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


def renew_leases(
    jobs: Sequence[ClaimedJob], *, until: dt.datetime, skip_locked: bool = False
) -> int:
    """Extend the leases of these claims, each only while its row is still running under
    that claim's token: never the lease of a later claim of the row, even one made under
    the same worker id. ``skip_locked`` (the heartbeat) leaves the rows another
    transaction holds for the next renewal: the statement that writes a claim's outcome
    holds its rows, in an order of its own, and an UPDATE of the same rows that waited on
    it could deadlock with it."""
    held = _held(jobs)
    if held is None:
        return 0
    connection = connections[database_alias()]
    if not (skip_locked and connection.features.has_select_for_update_skip_locked):
        return running_rows().filter(held).update(locked_until=until)
    with transaction.atomic(using=database_alias()):
        free = list(
            running_rows().filter(held).select_for_update(skip_locked=True).values_list("id")
        )
        if not free:
            return 0
        return running_rows().filter(id__in=[row[0] for row in free]).update(locked_until=until)


def leased_until(jobs: Sequence[ClaimedJob], until: dt.datetime) -> set[int]:
    """The ids of those claims whose row is still running under them with a lease that
    ends at ``until``: which of them a ``renew_leases(..., until=until)`` renewed."""
    held = _held(jobs)
    if held is None:
        return set()
    rows = running_rows().filter(held, locked_until=until)
    return set(rows.values_list("id", flat=True))


def _held(jobs: Sequence[ClaimedJob]) -> Q | None:
    """The rows of these claims, each under its own token; None for no claims."""
    ids_by_token: dict[str, list[int]] = {}
    for job in jobs:
        ids_by_token.setdefault(job.token, []).append(job.id)
    if not ids_by_token:
        return None
    return reduce(
        operator.or_, (Q(lock_token=token, id__in=ids) for token, ids in ids_by_token.items())
    )


def cancel_requested_among(jobs: Sequence[ClaimedJob]) -> set[int]:
    """The ids of those claims whose cancel was requested (the heartbeat asks)."""
    held = _held(jobs)
    if held is None:
        return set()
    return set(
        running_rows().filter(held, cancel_requested_at__isnull=False).values_list("id", flat=True)
    )


def write_progress(updates: Sequence[tuple[ClaimedJob, dict[str, Any]]]) -> int:
    """Store the latest progress of running claims (the heartbeat: at most once per
    beat for each job whose progress changed). Returns the rows written."""
    return sum(_running(job).update(progress=progress) for job, progress in updates)


def lose_lease(row: Mapping[str, Any], definition: JobDefinition | None, now: dt.datetime) -> bool:
    """An expired lease: running -> pending, due at once, or -> failed (with
    ``on_failed``) when no attempt is left. ``row`` holds the columns read by
    ``maintenance.recover_expired_leases``. False when the row moved on meanwhile.
    A job whose cancel was requested ends cancelled: it is not run again."""
    guard = running_rows().filter(id=row["id"], lock_token=row["lock_token"])
    if row.get("cancel_requested_at") is not None:
        message = cancelled_message(
            row["cancel_requested_at"], row["cancel_requested_by"], row["cancel_reason"]
        )
        cancelled = _cancelled_changes(f"{message} (its lease was lost)", now)
        end = lost_attempt(row, now, cancelled["last_error"], retry_at=None)
        if not ended_without_success(
            lambda: recorded(guard.update(**cancelled), end), row["id"], now
        ):
            return False
        _announce_cancelled(row["id"], row["name"], row)
        return True
    exc = LeaseLost(_lease_lost_message(row, definition, now))
    error = describe(exc)
    final = row["attempts"] >= row["max_attempts"]
    changes: dict[str, Any] = {
        "locked_until": None,
        "lock_token": None,
        "last_error": error,
        "traceback": "",  # not an earlier attempt's: a lost lease has none
        "exception_class_path": class_path(exc),
    }
    if final:
        changes.update(status=JobStatus.FAILED, finished_at=now, active_dedupe_key=None)
    else:
        changes.update(status=JobStatus.PENDING, run_at=now)
    end = lost_attempt(row, now, error, retry_at=None if final else now)
    if final:
        updated = ended_without_success(
            lambda: recorded(write_failure(guard, changes, row["id"], row["name"]), end),
            row["id"],
            now,
        )
    else:
        with transaction.atomic(using=database_alias()):
            updated = recorded(write_failure(guard, changes, row["id"], row["name"]), end)
    if not updated:
        return False
    if not final and signals.job_retrying.receivers:
        job = job_rows().filter(id=row["id"]).first()
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
    return True


def _lease_lost_message(
    row: Mapping[str, Any], definition: JobDefinition | None, now: dt.datetime
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
