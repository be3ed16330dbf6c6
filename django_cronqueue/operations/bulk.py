"""Operator actions on many jobs at once: ``retry_jobs``, ``cancel_jobs`` and
``run_jobs_now`` (the admin's list actions, "select all" included). ``cancel_jobs``
cancels the pending jobs and asks the handlers of the running ones to stop.

They read the jobs of a queryset ``BATCH_SIZE`` at a time, in id order (one keyset query
per batch, never a Job object), set aside those in a status the action does not apply
to, and change the others with the very UPDATE the single-job functions of
``lifecycle`` use, one statement per batch. A ``BulkOutcome`` counts what changed and
what was skipped, by reason, with the ids of the first few of each: a million rows cost
a few thousand queries and a few kilobytes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import IntegrityError
from django.db.models import QuerySet
from django.utils import timezone

from .. import lifecycle
from ..conf import database_alias
from ..db.notify import wake_workers
from ..models import Job, JobStatus

#: A set-based action reads and updates at most this many rows per statement: their ids
#: are parameters, and SQLite before 3.32 takes at most 999 (Django assumes that limit).
BATCH_SIZE = 500
#: A Tally keeps the ids of this many jobs, for messages ("#1, #2 and 40 more").
SAMPLE_IDS = 10


@dataclass
class Tally:
    """How many jobs, and the ids of up to ``SAMPLE_IDS`` of them (the lowest known)."""

    count: int = 0
    ids: list[int] = field(default_factory=list)

    def add(self, ids: Sequence[int]) -> None:
        self.count += len(ids)
        self.ids.extend(ids[: max(SAMPLE_IDS - len(self.ids), 0)])

    def add_unnamed(self, count: int) -> None:
        """Jobs whose ids are not known (which rows of a batch an UPDATE changed)."""
        self.count += count


@dataclass
class BulkOutcome:
    """What a set-based action did to the jobs it was given."""

    changed: Tally = field(default_factory=Tally)
    #: Jobs in a status the action does not apply to, by that status.
    not_applicable: dict[str, Tally] = field(default_factory=dict)
    #: Retry only: another pending or running job of the same name holds the dedupe key.
    dedupe_key_taken: Tally = field(default_factory=Tally)
    #: Applicable when read, but changed (by a worker, say) or deleted before the UPDATE.
    changed_meanwhile: Tally = field(default_factory=Tally)
    #: Cancel only: running jobs whose handlers were asked to stop (``changed`` counts
    #: the pending jobs that were cancelled).
    requested: Tally = field(default_factory=Tally)
    #: Cancel only: running jobs whose cancel had been requested before.
    already_requested: Tally = field(default_factory=Tally)


@dataclass(frozen=True)
class _Row:
    id: int
    status: str
    name: str
    dedupe_key: str | None
    cancel_requested_at: dt.datetime | None


def retry_jobs(
    jobs: QuerySet[Job], *, now: dt.datetime | None = None, batch_size: int = BATCH_SIZE
) -> BulkOutcome:
    """``lifecycle.retry`` every failed or cancelled job of ``jobs``, ``batch_size`` rows
    per UPDATE. A job whose dedupe key another pending or running job of its name holds
    (or an earlier job of ``jobs`` took back) is left alone, and counted apart."""
    now = now or timezone.now()

    def update(rows: list[_Row], outcome: BulkOutcome) -> None:
        free, taken = _split_by_dedupe_key(rows)
        outcome.dedupe_key_taken.add(taken)
        try:
            _count(outcome, free, lifecycle.retry_rows(free, now))
        except IntegrityError:  # a key was taken since it was checked: one by one
            for job_id in free:
                try:
                    _count(outcome, [job_id], lifecycle.retry_rows([job_id], now))
                except IntegrityError:
                    outcome.dedupe_key_taken.add([job_id])

    outcome = _in_batches(jobs, lifecycle.RETRYABLE, update, batch_size)
    if outcome.changed.count:
        wake_workers(database_alias(), [now], now)
    return outcome


def cancel_jobs(
    jobs: QuerySet[Job],
    *,
    reason: str = "",
    by: str = "",
    now: dt.datetime | None = None,
    batch_size: int = BATCH_SIZE,
) -> BulkOutcome:
    """Cancel every pending job of ``jobs`` and ask the handlers of its running jobs to
    stop (``lifecycle.cancel_rows`` and ``request_cancel_rows``, as ``jobs.cancel()``
    does one job), ``batch_size`` rows per UPDATE. ``by`` says who asked: it is
    recorded with a running job's request, and in a pending job's ``last_error``."""
    now = now or timezone.now()

    def update(rows: list[_Row], outcome: BulkOutcome) -> None:
        pending = [row.id for row in rows if row.status == JobStatus.PENDING]
        _cancel_pending(outcome, pending, reason, by, now)
        running = [row for row in rows if row.status == JobStatus.RUNNING]
        outcome.already_requested.add([row.id for row in running if row.cancel_requested_at])
        ask = [row.id for row in running if row.cancel_requested_at is None]
        asked = lifecycle.request_cancel_rows(ask, reason, now, by=by)
        _count(outcome, ask, asked, into=outcome.requested)

    return _in_batches(jobs, (JobStatus.PENDING, JobStatus.RUNNING), update, batch_size)


def _cancel_pending(
    outcome: BulkOutcome, ids: list[int], reason: str, by: str, now: dt.datetime
) -> None:
    """Cancel the rows ``ids``, read pending; those claimed since are asked to stop, as
    ``jobs.cancel()`` does."""
    cancelled = lifecycle.cancel_rows(ids, reason, now, by=by)
    if cancelled == len(ids):
        outcome.changed.add(ids)
        return
    asked = lifecycle.request_cancel_rows(ids, reason, now, by=by)
    outcome.changed.add_unnamed(cancelled)
    outcome.requested.add_unnamed(asked)
    outcome.changed_meanwhile.add_unnamed(len(ids) - cancelled - asked)


def run_jobs_now(
    jobs: QuerySet[Job], *, now: dt.datetime | None = None, batch_size: int = BATCH_SIZE
) -> BulkOutcome:
    """``lifecycle.run_now`` every pending job of ``jobs``, ``batch_size`` rows per UPDATE."""
    now = now or timezone.now()

    def update(rows: list[_Row], outcome: BulkOutcome) -> None:
        ids = [row.id for row in rows]
        _count(outcome, ids, lifecycle.make_rows_due(ids, now))

    outcome = _in_batches(jobs, (JobStatus.PENDING,), update, batch_size)
    if outcome.changed.count:
        wake_workers(database_alias(), [now], now)
    return outcome


def _in_batches(
    jobs: QuerySet[Job],
    applies_to: tuple[str, ...],
    update: Callable[[list[_Row], BulkOutcome], None],
    batch_size: int,
) -> BulkOutcome:
    """Read ``jobs`` ``batch_size`` rows at a time (in id order, one keyset query per
    batch), set aside those in a status the action does not apply to, and ``update``
    the others."""
    outcome = BulkOutcome()
    for batch in _batches(jobs, batch_size):
        applicable = []
        for row in batch:
            if row.status in applies_to:
                applicable.append(row)
            else:
                outcome.not_applicable.setdefault(row.status, Tally()).add([row.id])
        update(applicable, outcome)
    return outcome


def _batches(jobs: QuerySet[Job], size: int) -> Iterator[list[_Row]]:
    if size < 1:
        raise ValueError(f"batch_size must be at least 1, got {size!r}.")
    rows = jobs.order_by("pk").values_list(
        "pk", "status", "name", "dedupe_key", "cancel_requested_at"
    )
    after: int | None = None
    while True:
        page = rows if after is None else rows.filter(pk__gt=after)
        batch = [_Row(*values) for values in page[:size]]
        if batch:
            yield batch
        if len(batch) < size:
            return
        after = batch[-1].id


def _split_by_dedupe_key(rows: list[_Row]) -> tuple[list[int], list[int]]:
    """The ids of ``rows`` that can take their dedupe key back, and of those that cannot:
    another pending or running job of the same name holds it (one query), or an earlier
    row of ``rows`` takes it."""
    keyed = [row for row in rows if row.dedupe_key is not None]
    held: set[tuple[str, str | None]] = set()
    if keyed:
        held = set(
            Job.objects.using(database_alias())
            .filter(
                name__in={row.name for row in keyed},
                active_dedupe_key__in={row.dedupe_key for row in keyed},
            )
            .values_list("name", "active_dedupe_key")
        )
    free, taken = [], []
    for row in rows:
        key = (row.name, row.dedupe_key)
        if row.dedupe_key is not None and key in held:
            taken.append(row.id)
            continue
        if row.dedupe_key is not None:
            held.add(key)
        free.append(row.id)
    return free, taken


def _count(
    outcome: BulkOutcome, ids: list[int], updated: int, *, into: Tally | None = None
) -> None:
    """Record an UPDATE of the rows ``ids`` that changed ``updated`` of them (in
    ``outcome.changed``, or in ``into``)."""
    changed = outcome.changed if into is None else into
    if updated == len(ids):
        changed.add(ids)
    else:  # some changed since they were read; which ones, the UPDATE does not say
        changed.add_unnamed(updated)
        outcome.changed_meanwhile.add_unnamed(len(ids) - updated)
