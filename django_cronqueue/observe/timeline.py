"""A job's timeline, as its admin page shows it: when it was enqueued and due, each of
its attempts (``JobAttempt`` rows, and the run its own row describes), its snoozes and
retries, its progress, a cancel request, its end, and what operators did to it in the
admin (Django's ``LogEntry``), by time. Also the ``LogEntry`` entries of any object (a
cron schedule's page lists its own).

Three queries at most, whatever the number of attempts: the latest ``ATTEMPTS_SHOWN``
attempt rows, their total when there are more, and the latest ``LOG_ENTRIES_SHOWN``
admin entries.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.apps import apps
from django.db.models import Model
from django.utils import timezone

from ..models import AttemptOutcome, Job, JobAttempt, JobStatus
from .base import read_alias
from .control import progress_of

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry

__all__ = [
    "ATTEMPTS_SHOWN",
    "LOG_ENTRIES_SHOWN",
    "AttemptView",
    "LogLine",
    "Timeline",
    "TimelineEvent",
    "admin_log",
    "job_timeline",
]

#: A job's page shows at most this many of its attempts, the latest.
ATTEMPTS_SHOWN = 100
#: A page shows at most this many admin log entries of its object, the latest.
LOG_ENTRIES_SHOWN = 100


@dataclass(frozen=True)
class AttemptView:
    """One attempt: from a ``JobAttempt`` row, or from the job's row for the run it
    describes (running, or ended without a row: a first-attempt success)."""

    number: int
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    worker: str
    outcome: str  # an AttemptOutcome, or "running"
    error: str = ""
    traceback: str = ""
    retry_at: dt.datetime | None = None

    @property
    def then(self) -> str:
        """What followed the attempt for the job, before ``retry_at``: ``"retry due
        at"`` or ``"snoozed until"``; "" when the job ended with it or it still runs."""
        if self.retry_at is None:
            return ""
        return "snoozed until" if self.outcome == AttemptOutcome.SNOOZED else "retry due at"


@dataclass(frozen=True)
class LogLine:
    """One admin log entry (``LogEntry``): who did what, when."""

    at: dt.datetime
    user: str
    action: str


@dataclass(frozen=True)
class TimelineEvent:
    """One line of the timeline. ``kind``: enqueued, due, attempt, progress,
    cancel_request, finished or admin."""

    at: dt.datetime | None
    kind: str
    title: str
    detail: str = ""
    who: str = ""
    attempt: AttemptView | None = None


@dataclass(frozen=True)
class Timeline:
    events: list[TimelineEvent]
    earlier_attempts: int = 0  # attempts older than those shown
    more_log_entries: bool = False  # admin entries older than those shown


def job_timeline(job: Job) -> Timeline:
    """The timeline of ``job`` (a row read for its page), oldest event first."""
    rows = list(
        JobAttempt.objects.using(read_alias())
        .filter(job_id=job.pk)
        .order_by("-id")[: ATTEMPTS_SHOWN + 1]
    )
    earlier = 0
    if len(rows) > ATTEMPTS_SHOWN:
        rows = rows[:ATTEMPTS_SHOWN]
        total = JobAttempt.objects.using(read_alias()).filter(job_id=job.pk).count()
        earlier = total - ATTEMPTS_SHOWN
    attempts = [_from_row(row) for row in reversed(rows)]
    current = _current_run(job, rows)
    if current is not None:
        attempts.append(current)
    log, more = admin_log(job)
    events = [
        *_row_events(job),
        *(_attempt_event(attempt) for attempt in attempts),
        *(TimelineEvent(line.at, "admin", line.action, who=line.user) for line in log),
    ]
    events.sort(key=_order)
    return Timeline(events, earlier_attempts=earlier, more_log_entries=more)


def admin_log(obj: Model) -> tuple[list[LogLine], bool]:
    """The admin log entries of ``obj`` (by its content type and id), oldest first, at
    most ``LOG_ENTRIES_SHOWN`` (the latest), and whether there are older ones. None when
    the admin is not installed."""
    if not apps.is_installed("django.contrib.admin"):
        return [], False
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    content_type = ContentType.objects.get_for_model(obj, for_concrete_model=False)
    entries = list(
        LogEntry.objects.filter(content_type=content_type, object_id=str(obj.pk))
        .select_related("user")
        .order_by("-action_time", "-id")[: LOG_ENTRIES_SHOWN + 1]
    )
    more = len(entries) > LOG_ENTRIES_SHOWN
    lines = [
        LogLine(entry.action_time, _user_name(entry), _action_text(entry))
        for entry in reversed(entries[:LOG_ENTRIES_SHOWN])
    ]
    return lines, more


def _user_name(entry: LogEntry) -> str:
    return str(entry.user.get_username())


def _action_text(entry: LogEntry) -> str:
    """What the entry says was done: its message, or its kind when it has none."""
    if entry.is_addition():
        kind = "Added"
    elif entry.is_deletion():
        kind = "Deleted"
    else:
        kind = "Changed"
    message = str(entry.get_change_message())
    if not message or message == "No fields changed.":
        return f"{kind}."
    return message


def _from_row(row: JobAttempt) -> AttemptView:
    return AttemptView(
        number=row.attempt,
        started_at=row.started_at,
        finished_at=row.finished_at,
        worker=row.worker,
        outcome=row.outcome,
        error=row.error,
        traceback=row.traceback,
        retry_at=row.retry_at,
    )


def _current_run(job: Job, rows: list[JobAttempt]) -> AttemptView | None:
    """The run the job's row describes, when no attempt row does: one that runs now, or
    one that ended without a row (a first-attempt success, a job cancelled as it
    started). None when the row holds no run (pending, never started or given back)."""
    if job.started_at is None or job.attempts == 0:
        return None
    if any(row.attempt == job.attempts and row.started_at == job.started_at for row in rows):
        return None
    if job.status == JobStatus.RUNNING:
        return AttemptView(job.attempts, job.started_at, None, job.worker_id, "running")
    if job.status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        return None  # pending again: its last run's row is older than those shown
    failed = job.status != JobStatus.SUCCEEDED
    return AttemptView(
        job.attempts,
        job.started_at,
        job.finished_at,
        job.worker_id,
        str(job.status),
        error=job.last_error if failed else "",
        traceback=job.traceback if failed else "",
    )


def _attempt_event(attempt: AttemptView) -> TimelineEvent:
    titles = {
        AttemptOutcome.SUCCEEDED: "succeeded",
        AttemptOutcome.FAILED: "failed",
        AttemptOutcome.SNOOZED: "snoozed",
        AttemptOutcome.LOST: "lost its lease",
        AttemptOutcome.CANCELLED: "cancelled",
        "running": "running",
    }
    title = f"Attempt {attempt.number} {titles.get(attempt.outcome, attempt.outcome)}"
    return TimelineEvent(
        attempt.started_at or attempt.finished_at,
        "attempt",
        title,
        who=attempt.worker,
        attempt=attempt,
    )


def _row_events(job: Job) -> list[TimelineEvent]:
    """What the job's own row tells: enqueued, due, progress, a cancel request, its end."""
    enqueued = f"on queue {job.queue}, priority {job.priority}"
    if job.scheduled_for is not None:
        enqueued += f", the occurrence of {job.scheduled_for.isoformat(sep=' ')}"
    events = [
        TimelineEvent(job.created_at, "enqueued", "Enqueued", enqueued),
        TimelineEvent(job.run_at, "due", "Due (run_at)"),
    ]
    progress = progress_of(job.progress)
    if progress is not None:
        events.append(TimelineEvent(progress.at, "progress", "Progress", progress.describe()))
    if job.cancel_requested_at is not None:
        events.append(
            TimelineEvent(
                job.cancel_requested_at,
                "cancel_request",
                "Cancel requested",
                job.cancel_reason,
                who=job.cancel_requested_by or "code",
            )
        )
    if job.finished_at is not None:
        events.append(TimelineEvent(job.finished_at, "finished", f"Ended: {job.status}"))
    return events


# Events at one instant, in the order they happen: enqueued before due before a run.
_KIND_ORDER = {
    kind: rank
    for rank, kind in enumerate(
        ["enqueued", "due", "admin", "cancel_request", "attempt", "progress", "finished"]
    )
}
_UNKNOWN_TIME = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


def _order(event: TimelineEvent) -> tuple[dt.datetime, int]:
    at = event.at or _UNKNOWN_TIME
    if timezone.is_naive(at):  # a progress instant written without its offset
        at = at.replace(tzinfo=dt.timezone.utc)
    return (at, _KIND_ORDER[event.kind])
