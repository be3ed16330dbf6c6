"""The operator's transitions: retry, cancel (of a pending job, or a request to stop a
running one), run now; for one job (``Job.retry()`` ...) and for many rows at once
(``django_cronqueue.operations.bulk``). Each is one conditional UPDATE, written once below
(``retry_rows``, ``cancel_rows``, ``request_cancel_rows``, ``make_rows_due``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ..conf import database_alias
from ..db.notify import announce_cancel, wake_workers
from ..history import archive, counting
from ..models import FINISHED_STATUSES, Job, JobStatus
from ..values.error_text import MAX_ERROR_CHARS, clean_text
from . import workflow
from .common import apply_changes, erase_secrets, erase_unsaved, job_rows, running_rows

logger = logging.getLogger("django_cronqueue")

MAX_CANCELLED_BY_CHARS = 150  # Job.cancel_requested_by
CANCEL_TRIES = 3

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
        apply_changes(job, {**_retry_changes(now), "active_dedupe_key": job.dedupe_key})
        wake_workers(database_alias(), [now], now)
    return bool(updated)


@dataclasses.dataclass(frozen=True)
class Cancellation:
    """What ``jobs.cancel()`` did. True when it changed something."""

    job_id: int
    outcome: str  # "cancelled" (was pending), "requested" (running), "finished" (nothing)
    message: str

    def __bool__(self) -> bool:
        return self.outcome != "finished"


def cancel(job: Job, *, reason: str = "", by: str = "", now: dt.datetime | None = None) -> bool:
    """pending -> cancelled; running -> a cancel is requested from its handler. False
    when the job had already finished (nothing changes)."""
    return bool(cancel_job(job, reason=reason, by=by, now=now))


def cancel_job(
    job: Job, *, reason: str = "", by: str = "", now: dt.datetime | None = None
) -> Cancellation:
    """Cancel ``job``: a pending one at once; a running one by asking its handler to
    stop (``cancel_requested_at``; its worker learns of it by NOTIFY on PostgreSQL, by
    its heartbeat elsewhere); a finished one is left as it is, and the result says so."""
    now = now or timezone.now()
    label = f"Job {job.name} #{job.pk}"
    # A row can move between the two UPDATEs (claimed, or retried and claimed): try
    # again until one applies or the row is seen finished or already asked.
    for _ in range(CANCEL_TRIES):
        if cancel_rows([job.pk], reason, now, by=by):
            apply_changes(job, _cancel_changes(reason, now, by))
            return Cancellation(job.pk, "cancelled", f"{label} was pending and is now cancelled.")
        if request_cancel_rows([job.pk], reason, now, by=by):
            apply_changes(job, _cancel_request_changes(reason, by, now))
            return Cancellation(
                job.pk, "requested", f"{label} is running; its handler was asked to stop."
            )
        current = job_rows().filter(pk=job.pk).values("status", "cancel_requested_at").first()
        if current is None:
            raise Job.DoesNotExist(f"{label} does not exist (any more).")
        apply_changes(job, dict(current))
        requested_at = current["cancel_requested_at"]
        if current["status"] == JobStatus.RUNNING and requested_at is not None:
            return Cancellation(
                job.pk,
                "requested",
                f"{label} is running; a cancel was already requested at "
                f"{requested_at.isoformat()}.",
            )
        if current["status"] in FINISHED_STATUSES:
            break
    message = f"{label} has already ended ({job.status}); cancelling it changes nothing."
    logger.info(message, extra={"job_id": job.pk, "job_name": job.name})
    return Cancellation(job.pk, "finished", message)


def run_now(job: Job, *, now: dt.datetime | None = None) -> bool:
    """pending -> due now. False when the job is not pending."""
    now = now or timezone.now()
    updated = make_rows_due([job.pk], now)
    if updated:
        apply_changes(job, {"run_at": now})
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
        "cancel_requested_at": None,
        "cancel_requested_by": "",
        "cancel_reason": "",
        "progress": None,
    }


def retry_rows(ids: list[int], now: dt.datetime) -> int:
    """The UPDATE of a retry, for the rows ``ids`` that are failed or cancelled: their
    dedupe key becomes active again, and they (and the workflow jobs they reopen) leave
    the counts of finished rows. Raises IntegrityError (its savepoint rolled back)
    when another pending or running job of the same name holds one of those keys."""
    if not ids:
        return 0
    retryable = job_rows().filter(id__in=ids, status__in=RETRYABLE)
    with transaction.atomic(using=database_alias()):
        counted_until = counting.lock_mark()
        rows = list(retryable.select_for_update().values_list("pk", *counting.ROW_FIELDS))
        retried = [row[0] for row in rows]
        archive.reopen(retried)
        updated = retryable.filter(pk__in=retried).update(
            **_retry_changes(now), active_dedupe_key=F("dedupe_key")
        )
        reopened = workflow.reopen(retried, now)
        counting.uncount([row[1:] for row in rows] + reopened, counted_until)
    return updated


def _cancel_changes(reason: str, now: dt.datetime, by: str = "") -> dict[str, Any]:
    return {
        "status": JobStatus.CANCELLED,
        "finished_at": now,
        "active_dedupe_key": None,
        "last_error": clean_text(cancel_text(reason, by), MAX_ERROR_CHARS),
    }


def cancel_text(reason: str, by: str) -> str:
    """The ``last_error`` of a pending job cancelled by ``by`` for ``reason``."""
    if not by:
        return reason or "cancelled"
    return f"cancelled by {by}: {reason}" if reason else f"cancelled by {by}"


def cancel_rows(ids: list[int], reason: str, now: dt.datetime, *, by: str = "") -> int:
    """The UPDATE of a cancel, for the rows ``ids`` that are pending."""
    if not ids:
        return 0
    changes = _cancel_changes(reason, now, by)
    pending = job_rows().filter(id__in=ids, status=JobStatus.PENDING)
    # ``now`` is the caller's clock (a web host's), maybe behind the counts' mark.
    with counting.counting_stamped(now):
        in_workflow = list(
            pending.exclude(has_downstream=False, batch__isnull=True)
            .select_for_update()
            .values_list("pk", flat=True)
        )
        updated = pending.update(**changes)
        erase_secrets(ids)
        workflow.after_end(in_workflow, now)
    return updated


def _cancel_request_changes(reason: str, by: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "cancel_requested_at": now,
        "cancel_requested_by": clean_text(by, MAX_CANCELLED_BY_CHARS),
        "cancel_reason": clean_text(reason, MAX_ERROR_CHARS),
    }


def request_cancel_rows(ids: list[int], reason: str, now: dt.datetime, *, by: str = "") -> int:
    """Ask the handlers of the rows ``ids`` that are running (and not asked already) to
    stop, and tell PostgreSQL workers at once (on commit)."""
    if not ids:
        return 0
    updated = (
        running_rows()
        .filter(id__in=ids, cancel_requested_at__isnull=True)
        .update(**_cancel_request_changes(reason, by, now))
    )
    if updated:
        announce_cancel(database_alias(), ids)
    return updated


def make_rows_due(ids: list[int], now: dt.datetime) -> int:
    """The UPDATE of a run-now, for the rows ``ids`` that are pending."""
    if not ids:
        return 0
    return job_rows().filter(id__in=ids, status=JobStatus.PENDING).update(run_at=now)


def mark_skipped(job: Job, reason: str, *, now: dt.datetime) -> None:
    """An unsaved occurrence row that will not run (overlap='skip'): created cancelled."""
    erase_unsaved(job)
    apply_changes(
        job,
        {
            "status": JobStatus.CANCELLED,
            "finished_at": now,
            "active_dedupe_key": None,
            "last_error": clean_text(reason, MAX_ERROR_CHARS),
        },
    )
