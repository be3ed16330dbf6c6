"""The attempt rows (``JobAttempt``) of the jobs that run more than once.

A transition of ``running`` that ends an attempt in anything but a first-attempt
success (a failure, retried or final; a snooze; a lost lease; a cancel while running; a
success after an earlier attempt) writes its attempt here, in the transaction of the
job's own UPDATE and only when that UPDATE changed the row: an attempt is never lost
nor written twice. A first-attempt success writes nothing and costs nothing here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError

from ..conf import database_alias
from ..models import AttemptOutcome, JobAttempt
from ..values.error_text import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS, ascii_text
from .common import is_unstorable_text, undoable

__all__ = ["AttemptEnd", "failed_attempt", "lost_attempt", "record_attempt", "recorded"]


@dataclass(frozen=True)
class AttemptEnd:
    """One attempt as it ended: the columns of its ``JobAttempt`` row."""

    job_id: int
    attempt: int
    started_at: dt.datetime | None
    worker: str
    outcome: AttemptOutcome
    finished_at: dt.datetime
    error: str = ""
    traceback: str = ""
    retry_at: dt.datetime | None = None

    @classmethod
    def of_row(
        cls, row: Mapping[str, Any] | None, job_id: int, attempt: int, **ending: Any
    ) -> AttemptEnd:
        """The attempt ``attempt`` of job ``job_id``, whose row (``started_at``,
        ``worker_id``; None when it was not found) was read while the attempt held it."""
        row = row or {}
        return cls(
            job_id=job_id,
            attempt=attempt,
            started_at=row.get("started_at"),
            worker=row.get("worker_id") or "",
            **ending,
        )


def failed_attempt(
    row: Mapping[str, Any] | None,
    job_id: int,
    attempt: int,
    failure: Mapping[str, Any],
    now: dt.datetime,
    *,
    retry_at: dt.datetime | None,
) -> AttemptEnd:
    """An attempt whose handler raised: ``failure`` holds the job's ``last_error`` and
    ``traceback``; ``retry_at``, when the job is due again (None: it failed for good)."""
    return AttemptEnd.of_row(
        row,
        job_id,
        attempt,
        outcome=AttemptOutcome.FAILED,
        finished_at=now,
        error=failure["last_error"],
        traceback=failure["traceback"],
        retry_at=retry_at,
    )


def lost_attempt(
    row: Mapping[str, Any], now: dt.datetime, error: str, *, retry_at: dt.datetime | None
) -> AttemptEnd:
    """An attempt whose lease expired, found at ``now``: ``row`` holds the columns
    ``housekeeping.maintenance.recover_expired_leases`` reads."""
    return AttemptEnd.of_row(
        row,
        row["id"],
        row["attempts"],
        outcome=AttemptOutcome.LOST,
        finished_at=now,
        error=error,
        retry_at=retry_at,
    )


def record_attempt(end: AttemptEnd) -> None:
    """INSERT the attempt row, in the caller's transaction. An error text the database
    cannot store (a character its character set lacks, a text it refuses) is stored with
    non-ASCII characters escaped, as the job's own ``last_error`` is."""
    values = asdict(end)
    try:
        with undoable():
            _insert(values)
    except DatabaseError as exc:
        if not (isinstance(exc, (DataError, IntegrityError)) or is_unstorable_text(exc)):
            raise
        values["error"] = ascii_text(end.error, MAX_ERROR_CHARS)
        values["traceback"] = ascii_text(end.traceback, MAX_TRACEBACK_CHARS)
        _insert(values)


def recorded(updated: int, end: AttemptEnd) -> int:
    """``updated`` (the rows the job's UPDATE changed), after writing the attempt row
    ``end`` when it changed the job's: call it inside that UPDATE's transaction."""
    if updated:
        record_attempt(end)
    return updated


def _insert(values: dict[str, Any]) -> None:
    JobAttempt.objects.using(database_alias()).bulk_create([JobAttempt(**values)])
