"""Operator actions on many jobs at once: ``retry_jobs``, ``cancel_jobs`` and
``run_jobs_now`` (the admin's list actions, "select all" included). ``cancel_jobs``
cancels the pending jobs and asks the handlers of the running ones to stop.

They read the jobs of a queryset ``BATCH_SIZE`` at a time, in id order (one keyset query
per batch, never a Job object), set aside those in a status the action does not apply
to, and change the others with the very UPDATE the single-job functions of
``lifecycle`` use, one statement per batch, whose WHERE checks the status again. Each
batch is its own transaction: a million rows never hold one transaction (and its locks)
open, and a failure keeps the batches before it. A ``BulkOutcome`` counts what changed
and what was skipped, by reason, with the ids of the first few of each: a million rows
cost a few thousand queries and a few kilobytes.

``on_batch``, when given, is called inside each batch's transaction with the jobs that
batch changed, every one named (the admin writes its history entries there).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
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


@dataclass
class BatchChanges:
    """The jobs one batch changed, as (id, name): ``changed`` by the action itself,
    ``requested``: running jobs asked to stop (a cancel only)."""

    changed: list[tuple[int, str]] = field(default_factory=list)
    requested: list[tuple[int, str]] = field(default_factory=list)


#: Called inside a batch's transaction, after its UPDATEs, with what the batch changed.
OnBatch = Callable[[BatchChanges], None]


@dataclass(frozen=True)
class _Row:
    id: int
    status: str
    name: str
    dedupe_key: str | None
    cancel_requested_at: dt.datetime | None


def retry_jobs(
    jobs: QuerySet[Job],
    *,
    now: dt.datetime | None = None,
    batch_size: int = BATCH_SIZE,
    on_batch: OnBatch | None = None,
) -> BulkOutcome:
    """``lifecycle.retry`` every failed or cancelled job of ``jobs``, ``batch_size`` rows
    per UPDATE. A job whose dedupe key another pending or running job of its name holds
    (or an earlier job of ``jobs`` took back) is left alone, and counted apart."""
    now = now or timezone.now()
    retried = Q(status=JobStatus.PENDING, run_at=now, attempts=0)

    def update(batch: _Batch) -> None:
        free, taken = _split_by_dedupe_key(batch.rows)
        batch.outcome.dedupe_key_taken.add(taken)
        try:
            batch.count(free, lifecycle.retry_rows(free, now), retried)
        except IntegrityError:  # a key was taken since it was checked: one by one
            for job_id in free:
                try:
                    batch.count([job_id], lifecycle.retry_rows([job_id], now), retried)
                except IntegrityError:
                    batch.outcome.dedupe_key_taken.add([job_id])

    outcome = _in_batches(jobs, lifecycle.RETRYABLE, update, batch_size, on_batch)
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
    on_batch: OnBatch | None = None,
) -> BulkOutcome:
    """Cancel every pending job of ``jobs`` and ask the handlers of its running jobs to
    stop (``lifecycle.cancel_rows`` and ``request_cancel_rows``, as ``jobs.cancel()``
    does one job), ``batch_size`` rows per UPDATE. ``by`` says who asked: it is
    recorded with a running job's request, and in a pending job's ``last_error``."""
    now = now or timezone.now()
    cancelled = Q(status=JobStatus.CANCELLED, finished_at=now)
    asked = Q(cancel_requested_at=now)

    def update(batch: _Batch) -> None:
        pending = [row.id for row in batch.rows if row.status == JobStatus.PENDING]
        if pending:
            done = lifecycle.cancel_rows(pending, reason, now, by=by)
            if done < len(pending):  # claimed since they were read: asked to stop instead
                batch.count(pending, done, cancelled, meanwhile=False)
                claimed = lifecycle.request_cancel_rows(pending, reason, now, by=by)
                batch.count(pending, claimed, asked, requested=True, meanwhile=False)
                batch.outcome.changed_meanwhile.add_unnamed(len(pending) - done - claimed)
            else:
                batch.count(pending, done, cancelled)
        running = [row for row in batch.rows if row.status == JobStatus.RUNNING]
        batch.outcome.already_requested.add([row.id for row in running if row.cancel_requested_at])
        ask = [row.id for row in running if row.cancel_requested_at is None]
        batch.count(
            ask, lifecycle.request_cancel_rows(ask, reason, now, by=by), asked, requested=True
        )

    return _in_batches(jobs, (JobStatus.PENDING, JobStatus.RUNNING), update, batch_size, on_batch)


def run_jobs_now(
    jobs: QuerySet[Job],
    *,
    now: dt.datetime | None = None,
    batch_size: int = BATCH_SIZE,
    on_batch: OnBatch | None = None,
) -> BulkOutcome:
    """``lifecycle.run_now`` every pending job of ``jobs``, ``batch_size`` rows per UPDATE."""
    now = now or timezone.now()
    made_due = Q(status=JobStatus.PENDING, run_at=now)

    def update(batch: _Batch) -> None:
        ids = [row.id for row in batch.rows]
        batch.count(ids, lifecycle.make_rows_due(ids, now), made_due)

    outcome = _in_batches(jobs, (JobStatus.PENDING,), update, batch_size, on_batch)
    if outcome.changed.count:
        wake_workers(database_alias(), [now], now)
    return outcome


@dataclass
class _Batch:
    """One batch's applicable rows, the action's outcome so far, and (``named``) the
    jobs the batch changed, by id, for ``on_batch``."""

    rows: list[_Row]
    outcome: BulkOutcome
    named: BatchChanges | None

    def count(
        self,
        ids: list[int],
        updated: int,
        marked: Q,
        *,
        requested: bool = False,
        meanwhile: bool = True,
    ) -> None:
        """Record an UPDATE of the rows ``ids`` that changed ``updated`` of them (in
        ``outcome.changed``, or ``requested``); ``meanwhile``: the others changed since
        they were read. ``marked`` picks the rows the UPDATE changed (the values it set,
        with this action's own ``now``), read only when not all changed and the jobs
        must be named."""
        tally = self.outcome.requested if requested else self.outcome.changed
        if updated == len(ids):
            tally.add(ids)
            changed = ids
        else:  # some changed since they were read; which ones, the UPDATE does not say
            tally.add_unnamed(updated)
            if meanwhile:
                self.outcome.changed_meanwhile.add_unnamed(len(ids) - updated)
            changed = _marked(ids, marked) if updated and self.named is not None else []
        if self.named is not None and changed:
            names = {row.id: row.name for row in self.rows}
            into = self.named.requested if requested else self.named.changed
            into.extend((job_id, names[job_id]) for job_id in changed)


def _marked(ids: list[int], marked: Q) -> list[int]:
    """The rows of ``ids`` that hold the values an UPDATE set (``marked``): read in the
    batch's transaction, where no other writer can have changed them since."""
    rows = Job.objects.using(database_alias()).filter(marked, pk__in=ids)
    return list(rows.order_by("pk").values_list("pk", flat=True))


def _in_batches(
    jobs: QuerySet[Job],
    applies_to: tuple[str, ...],
    update: Callable[[_Batch], None],
    batch_size: int,
    on_batch: OnBatch | None,
) -> BulkOutcome:
    """Read ``jobs`` ``batch_size`` rows at a time (in id order, one keyset query per
    batch), set aside those in a status the action does not apply to, and ``update``
    the others, each batch in its own transaction (with its ``on_batch`` call)."""
    outcome = BulkOutcome()
    for rows in _batches(jobs, batch_size):
        applicable = []
        for row in rows:
            if row.status in applies_to:
                applicable.append(row)
            else:
                outcome.not_applicable.setdefault(row.status, Tally()).add([row.id])
        if not applicable:
            continue
        batch = _Batch(applicable, outcome, None if on_batch is None else BatchChanges())
        with transaction.atomic(using=database_alias()):
            update(batch)
            if on_batch is not None and batch.named is not None:
                on_batch(batch.named)
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
