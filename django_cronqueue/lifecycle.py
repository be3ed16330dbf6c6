"""Every change of a job's status happens here.

The worker, the admin and user code call these functions (or the ``Job`` methods
that wrap them); nothing else writes ``status``, except the claim itself
(``django_cronqueue.claiming``: pending -> running, and its batched successes). Each
transition is one conditional UPDATE, so two actors racing for the same row cannot both
win: completions are guarded by the lease token of the claim that ran them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import logging
import operator
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError, connections, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from . import signals
from .claiming import ClaimedJob
from .conf import database_alias
from .error_text import (
    MAX_CLASS_PATH_CHARS,
    MAX_ERROR_CHARS,
    MAX_TRACEBACK_CHARS,
    ascii_text,
    class_path,
    clean_text,
    describe,
    format_traceback,
)
from .exceptions import LeaseLost
from .models import Job, JobStatus
from .notify import wake_workers
from .registry import JobDefinition

logger = logging.getLogger("django_cronqueue")


class Outcome(str, enum.Enum):
    """What recording a run did to its row."""

    SUCCEEDED = "succeeded"
    RETRYING = "retrying"  # back to pending, after the backoff
    FAILED = "failed"  # no attempt left
    DISCARDED = "discarded"  # the lease was lost meanwhile: the row had moved on
    RELEASED = "released"  # given back unstarted (its code is gone from this process)

    def __str__(self) -> str:
        return self.value


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


# --- the worker's transitions -------------------------------------------------------


def complete_success(job: ClaimedJob, *, now: dt.datetime, result: Any = None) -> bool:
    """running -> succeeded, only if this claim still holds the lease.

    A result the database refuses (IntegrityError, DataError: a limit no check knew
    of) is dropped and logged, and the success recorded without it."""
    changes = {
        "status": JobStatus.SUCCEEDED,
        "finished_at": now,
        "locked_until": None,
        "lock_token": None,
        "active_dedupe_key": None,
        "result": result,
    }
    if result is None:
        updated = _running(job).update(**changes)
    else:
        try:
            with _undoable():
                updated = _running(job).update(**changes)
        except (DataError, IntegrityError) as exc:
            logger.warning(
                "Job %s #%s succeeded, but the database refused its return value, which "
                "was dropped (result is None): %s",
                job.name,
                job.id,
                describe(exc),
                extra=_log_extra(job, "result_dropped"),
            )
            updated = _running(job).update(**{**changes, "result": None})
    if not updated:
        _log_discarded(job, "success")
    return bool(updated)


def complete_failure(
    job: ClaimedJob,
    exc: BaseException,
    *,
    now: dt.datetime,
    definition: JobDefinition | None,
    final: bool = False,
) -> Outcome:
    """running -> pending (a retry, after the backoff) or failed (no attempt left, or
    ``final``). Returns the outcome: RETRYING, FAILED or DISCARDED (the lease was lost
    meanwhile)."""
    failure = {
        "last_error": describe(exc),
        "traceback": format_traceback(exc),
        "exception_class_path": class_path(exc),
    }
    guard = _running(job)
    if job.attempts < job.max_attempts and not final:
        delay = _backoff_delay(definition, job.attempts)
        run_at = now + dt.timedelta(seconds=delay)
        updated = _write_failure(
            guard,
            {
                "status": JobStatus.PENDING,
                "run_at": run_at,
                "locked_until": None,
                "lock_token": None,
                **failure,
            },
            job.id,
            job.name,
        )
        if updated:
            signals.send(signals.job_retrying, job.name, job=job, exc=exc, run_at=run_at)
            return Outcome.RETRYING
    else:
        updated = _write_failure(
            guard,
            {
                "status": JobStatus.FAILED,
                "finished_at": now,
                "locked_until": None,
                "lock_token": None,
                "active_dedupe_key": None,
                **failure,
            },
            job.id,
            job.name,
        )
        if updated:
            report_failure(definition, job.id, exc)
            return Outcome.FAILED
    _log_discarded(job, "failure")
    return Outcome.DISCARDED


# The length limit of each text a failure writes.
_FAILURE_TEXT_LIMITS = {
    "last_error": MAX_ERROR_CHARS,
    "traceback": MAX_TRACEBACK_CHARS,
    "exception_class_path": MAX_CLASS_PATH_CHARS,
}

# MySQL/MariaDB: "Incorrect string value" (a character the column's or the connection's
# character set cannot hold, e.g. an emoji in utf8mb3) and "Invalid ... character string".
_UNSTORABLE_TEXT_ERRORS = frozenset({1366, 1300})


def _is_unstorable_text(exc: DatabaseError) -> bool:
    return bool(exc.args) and exc.args[0] in _UNSTORABLE_TEXT_ERRORS


def _write_failure(rows: QuerySet[Job], changes: dict[str, Any], job_id: int, name: str) -> int:
    """UPDATE ``rows`` with a failure. When the database cannot store a character of the
    error text, or refuses the text (IntegrityError, DataError), write it again with
    non-ASCII characters escaped: an error message must never leave a row running until
    its lease expires, nor be retried as if the database were down."""
    try:
        with _undoable():
            return rows.update(**changes)
    except DatabaseError as exc:
        if _is_unstorable_text(exc):
            logger.warning(
                "Job %s #%s: the database cannot store a character of its error (%s); it is "
                "stored with non-ASCII characters escaped. Run migrate (migration 0004 makes "
                "the tables utf8mb4) and connect with DATABASES OPTIONS {'charset': 'utf8mb4'} "
                "(system check django_cronqueue.W003).",
                name,
                job_id,
                exc,
                extra={"job_id": job_id, "job_name": name},
            )
        elif isinstance(exc, (DataError, IntegrityError)):
            logger.warning(
                "Job %s #%s: the database refused the text of its error (%s); it is stored "
                "with non-ASCII characters escaped.",
                name,
                job_id,
                describe(exc),
                extra={"job_id": job_id, "job_name": name},
            )
        else:
            raise
        escaped = {
            field: ascii_text(value, _FAILURE_TEXT_LIMITS[field])
            if field in _FAILURE_TEXT_LIMITS
            else value
            for field, value in changes.items()
        }
        return rows.update(**escaped)


def _undoable() -> contextlib.AbstractContextManager[Any]:
    """Inside a transaction, a savepoint: after an error PostgreSQL accepts no statement
    until it is rolled back to. In autocommit, nothing: a refused statement did nothing."""
    using = database_alias()
    if connections[using].in_atomic_block:
        return transaction.atomic(using=using)
    return contextlib.nullcontext()


def _running(job: ClaimedJob) -> QuerySet[Job]:
    """The row of this claim, while it holds the lease."""
    return _jobs().filter(id=job.id, status=JobStatus.RUNNING, lock_token=job.token)


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


def renew_leases(jobs: Sequence[ClaimedJob], *, until: dt.datetime) -> int:
    """Extend the leases of these claims, each only while its row is still running under
    that claim's token: never the lease of a later claim of the row, even one made under
    the same worker id."""
    ids_by_token: dict[str, list[int]] = {}
    for job in jobs:
        ids_by_token.setdefault(job.token, []).append(job.id)
    if not ids_by_token:
        return 0
    held = reduce(
        operator.or_, (Q(lock_token=token, id__in=ids) for token, ids in ids_by_token.items())
    )
    return _jobs().filter(held, status=JobStatus.RUNNING).update(locked_until=until)


def lose_lease(row: Mapping[str, Any], definition: JobDefinition | None, now: dt.datetime) -> bool:
    """An expired lease: running -> pending, due at once, or -> failed (with
    ``on_failed``) when no attempt is left. ``row`` holds the columns read by
    ``maintenance.recover_expired_leases``. False when the row moved on meanwhile."""
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
    guard = _jobs().filter(id=row["id"], status=JobStatus.RUNNING, lock_token=row["lock_token"])
    updated = _write_failure(guard, changes, row["id"], row["name"])
    if not updated:
        return False
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


# --- operator actions ---------------------------------------------------------------
#
# Each operator transition is one conditional UPDATE, written once below (``retry_rows``,
# ``cancel_rows``, ``make_rows_due``) and used both for one job (``retry``, ``cancel``,
# ``run_now``) and for a whole queryset in batches (``django_cronqueue.bulk``).

RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)


def retry(job: Job, *, now: dt.datetime | None = None) -> bool:
    """failed or cancelled -> pending, due now, attempts reset.

    False when the job is in another state, or when its dedupe key is taken by
    another pending or running job of the same name.
    """
    now = now or timezone.now()
    try:
        updated = retry_rows([job.pk], now)
    except IntegrityError:
        return False
    if updated:
        _apply(job, {**_retry_changes(now), "active_dedupe_key": job.dedupe_key})
        wake_workers(database_alias(), [now], now)
    return bool(updated)


def cancel(job: Job, *, reason: str = "", now: dt.datetime | None = None) -> bool:
    """pending -> cancelled. False when the job is not pending."""
    now = now or timezone.now()
    updated = cancel_rows([job.pk], reason, now)
    if updated:
        _apply(job, _cancel_changes(reason, now))
    return bool(updated)


def run_now(job: Job, *, now: dt.datetime | None = None) -> bool:
    """pending -> due now. False when the job is not pending."""
    now = now or timezone.now()
    updated = make_rows_due([job.pk], now)
    if updated:
        _apply(job, {"run_at": now})
        wake_workers(database_alias(), [now], now)
    return bool(updated)


def _retry_changes(now: dt.datetime) -> dict[str, Any]:
    return {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "run_at": now,
        "finished_at": None,
        "started_at": None,
        "locked_until": None,
        "lock_token": None,
        "worker_id": "",
    }


def retry_rows(ids: list[int], now: dt.datetime) -> int:
    """The UPDATE of a retry, for the rows ``ids`` that are failed or cancelled: their
    dedupe key becomes active again. Raises IntegrityError (its savepoint rolled back)
    when another pending or running job of the same name holds one of those keys."""
    if not ids:
        return 0
    with transaction.atomic(using=database_alias()):
        return (
            _jobs()
            .filter(id__in=ids, status__in=RETRYABLE)
            .update(**_retry_changes(now), active_dedupe_key=F("dedupe_key"))
        )


def _cancel_changes(reason: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "status": JobStatus.CANCELLED,
        "finished_at": now,
        "active_dedupe_key": None,
        "last_error": clean_text(reason or "cancelled", MAX_ERROR_CHARS),
    }


def cancel_rows(ids: list[int], reason: str, now: dt.datetime) -> int:
    """The UPDATE of a cancel, for the rows ``ids`` that are pending."""
    if not ids:
        return 0
    changes = _cancel_changes(reason, now)
    return _jobs().filter(id__in=ids, status=JobStatus.PENDING).update(**changes)


def make_rows_due(ids: list[int], now: dt.datetime) -> int:
    """The UPDATE of a run-now, for the rows ``ids`` that are pending."""
    if not ids:
        return 0
    return _jobs().filter(id__in=ids, status=JobStatus.PENDING).update(run_at=now)


def mark_skipped(job: Job, reason: str, *, now: dt.datetime) -> None:
    """An unsaved occurrence row that will not run (overlap='skip'): created cancelled."""
    _apply(
        job,
        {
            "status": JobStatus.CANCELLED,
            "finished_at": now,
            "active_dedupe_key": None,
            "last_error": clean_text(reason, MAX_ERROR_CHARS),
        },
    )


def _apply(job: Job, changes: dict[str, Any]) -> None:
    for name, value in changes.items():
        setattr(job, name, value)


def _log_discarded(job: ClaimedJob, what: str) -> None:
    logger.warning(
        "Discarded the %s of job %s #%s: its lease was lost and the row has moved on",
        what,
        job.name,
        job.id,
        extra=_log_extra(job, "discarded"),
    )


def _log_extra(job: ClaimedJob, outcome: str) -> dict[str, Any]:
    return {"job_id": job.id, "job_name": job.name, "outcome": outcome}
