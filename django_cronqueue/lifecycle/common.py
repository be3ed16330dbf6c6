"""What the lifecycle's transitions share: the outcome of recording a run, the rows,
the failure write that never leaves a row running, and the log records."""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError, connections, transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Concat
from django.db.models.lookups import Exact

from ..claiming import ClaimedJob
from ..conf import database_alias
from ..definitions.registry import registry
from ..integrations import encryption
from ..models import Job, JobStatus
from ..values.error_text import (
    MAX_CLASS_PATH_CHARS,
    MAX_ERROR_CHARS,
    MAX_TRACEBACK_CHARS,
    ascii_text,
    describe,
)

logger = logging.getLogger("django_cronqueue")


class Outcome(str, enum.Enum):
    """What recording a run did to its row."""

    SUCCEEDED = "succeeded"
    RETRYING = "retrying"  # back to pending, after the backoff
    FAILED = "failed"  # no attempt left
    DISCARDED = "discarded"  # the lease was lost meanwhile: the row had moved on
    RELEASED = "released"  # given back unstarted (its code is gone from this process)
    CANCELLED = "cancelled"  # a cancel was requested and the handler raised
    SNOOZED = "snoozed"  # the handler raised jobs.Snooze: pending again, later

    def __str__(self) -> str:
        return self.value


def job_rows() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def running_rows() -> QuerySet[Job]:
    """The running rows, for a lookup by id (with the lease's token).

    The status is tested through an expression no index can read, so the primary key
    finds the rows: an index on status holds an entry for every version of a row that ever
    ran, none of which can be removed while a transaction is held open, and the planner,
    which counts the few live running rows, would otherwise read them all through it (as
    ``claiming.base.running_by_id`` for the claim's SQL)."""
    return job_rows().filter(Exact(Concat(F("status"), Value("")), JobStatus.RUNNING))


# The length limit of each text a failure writes.
_FAILURE_TEXT_LIMITS = {
    "last_error": MAX_ERROR_CHARS,
    "traceback": MAX_TRACEBACK_CHARS,
    "exception_class_path": MAX_CLASS_PATH_CHARS,
}

# MySQL/MariaDB: "Incorrect string value" (a character the column's or the connection's
# character set cannot hold, e.g. an emoji in utf8mb3) and "Invalid ... character string".
_UNSTORABLE_TEXT_ERRORS = frozenset({1366, 1300})


def is_unstorable_text(exc: DatabaseError) -> bool:
    return bool(exc.args) and exc.args[0] in _UNSTORABLE_TEXT_ERRORS


def write_failure(rows: QuerySet[Job], changes: dict[str, Any], job_id: int, name: str) -> int:
    """UPDATE ``rows`` with a failure. When the database cannot store a character of the
    error text, or refuses the text (IntegrityError, DataError), write it again with
    non-ASCII characters escaped: an error message must never leave a row running until
    its lease expires, nor be retried as if the database were down."""
    try:
        with undoable():
            return rows.update(**changes)
    except DatabaseError as exc:
        if is_unstorable_text(exc):
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


def undoable() -> contextlib.AbstractContextManager[Any]:
    """Inside a transaction, a savepoint: after an error PostgreSQL accepts no statement
    until it is rolled back to. In autocommit, nothing: a refused statement did nothing."""
    using = database_alias()
    if connections[using].in_atomic_block:
        return transaction.atomic(using=using)
    return contextlib.nullcontext()


def apply_changes(job: Job, changes: dict[str, Any]) -> None:
    for name, value in changes.items():
        setattr(job, name, value)


def log_discarded(job: ClaimedJob, what: str) -> None:
    logger.warning(
        "Discarded the %s of job %s #%s: its lease was lost and the row has moved on",
        what,
        job.name,
        job.id,
        extra=log_extra(job, "discarded"),
    )


def log_extra(job: ClaimedJob, outcome: str) -> dict[str, Any]:
    return {"job_id": job.id, "job_name": job.name, "outcome": outcome}


# The statuses of rows whose sensitive values are erased: a failed row keeps them for a
# retry until it is pruned.
ERASED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.CANCELLED)


def erase_secrets(ids: Sequence[int]) -> int:
    """Erase the encrypted values (and an encrypted result) of the rows ``ids`` that
    succeeded or were cancelled. Free while this process defines no sensitive job; the
    rows are read, not trusted to be of such a job (a name may have left the code)."""
    if not registry.sensitive_names or not ids:
        return 0
    ended = job_rows().filter(pk__in=list(ids), status__in=ERASED_STATUSES)
    erased = 0
    for pk, payload, result in ended.values_list("pk", "payload", "result"):
        changes = erased_changes(payload, result)
        if changes:
            erased += ended.filter(pk=pk).update(**changes)
    return erased


def erased_changes(payload: Any, result: Any) -> dict[str, Any]:
    """The columns of a row to write with its secrets erased (none when it holds none)."""
    changes: dict[str, Any] = {}
    if encryption.holds_encrypted(payload):
        changes["payload"] = encryption.erase_payload(payload)
    if encryption.is_encrypted(result) and not encryption.is_erased(result):
        changes["result"] = encryption.erased()
    return changes


def erase_unsaved(job: Job) -> None:
    """An unsaved row created cancelled: its secrets erased before it is written."""
    if encryption.holds_encrypted(job.payload):
        job.payload = encryption.erase_payload(job.payload)
