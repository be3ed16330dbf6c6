"""Workflows: signatures, chains, groups with callbacks, and jobs that wait for others.

    jobs.chain(fetch.s(url=u), parse.s(), store.s()).enqueue()        # one after the other
    jobs.group([resize.s(image_id=i) for i in ids]).then(notify.s(album_id=7)).enqueue()
    report.using(after=[job_a, job_b]).enqueue(day="2026-12-01")       # waits for both

A signature (``handle.s(**payload)``) is checked as ``enqueue`` checks its arguments, when
it is made. Everything one ``enqueue()`` of a workflow writes is written in one
transaction: the jobs, the rows saying which waits for which (``JobDependency``) and the
group's ``Batch``. A job that waits is ``pending`` and ``blocked``: the claim never sees
it. ``lifecycle.workflow`` releases it when its last upstream job succeeds, in the
transaction that records that success, and cancels it when one fails for good.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from ..conf import database_alias, get_settings
from ..db.notify import wake_workers
from ..definitions.registry import JobDefinition
from ..exceptions import InvalidPayload
from ..history import counting
from ..integrations.tracing import producer_span
from ..lifecycle import mark_upstream_ended, upstream_ended_text
from ..models import Batch, Job, JobDependency, JobStatus
from .arguments import check_priority, check_queue, resolve_run_at
from .eager import run_eagerly
from .enqueue import build_job, note_fair_keys

#: The options a signature takes (``handle.using(...).s(...)``): a workflow's jobs
#: have no dedupe key, and their order comes from the workflow, not from ``after``.
SIGNATURE_OPTIONS = frozenset({"run_at", "delay", "priority", "queue"})


@dataclasses.dataclass(frozen=True)
class Signature:
    """One job of a workflow: its definition, its checked payload and options."""

    definition: JobDefinition
    payload: dict[str, Any]
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def make(
        cls, definition: JobDefinition, payload: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Signature:
        """Check ``payload`` and ``options`` as ``enqueue`` would; raises before anything
        is written."""
        unknown = sorted(set(options) - SIGNATURE_OPTIONS)
        if unknown:
            raise TypeError(
                f"Job {definition.name!r}: a signature (.s()) takes no {', '.join(unknown)}; "
                f"a workflow's jobs allow {', '.join(sorted(SIGNATURE_OPTIONS))}."
            )
        now = timezone.now()
        row = _build(definition, payload, options, now)  # every check of an enqueue
        return cls(definition, row.payload, dict(options))

    def __repr__(self) -> str:
        return f"<Signature {self.definition.name}({self.payload!r})>"

    def row(self, now: dt.datetime) -> Job:
        """An unsaved pending row of this signature."""
        return _build(self.definition, self.payload, self.options, now)


def _build(
    definition: JobDefinition,
    payload: Mapping[str, Any],
    options: Mapping[str, Any],
    now: dt.datetime,
) -> Job:
    return build_job(
        definition,
        payload,
        now=now,
        run_at=resolve_run_at(definition, now, options.get("run_at"), options.get("delay")),
        priority=check_priority(definition, options.get("priority")),
        queue=check_queue(definition, options.get("queue")),
        fair_key=options.get("fair_key"),
    )


def _signatures(items: Iterable[Any], where: str) -> list[Signature]:
    signatures = list(items)
    for item in signatures:
        if not isinstance(item, Signature):
            raise TypeError(
                f"{where} takes signatures (handle.s(**payload)), got {item!r}; write "
                "my_job.s(...) instead of my_job(...) or my_job.enqueue(...)."
            )
    return signatures


class Chain:
    """``jobs.chain(a.s(), b.s(), c.s())``: each job waits for the one before it."""

    def __init__(self, *signatures: Signature) -> None:
        self.signatures = _signatures(signatures, "jobs.chain()")
        if not self.signatures:
            raise ValueError("jobs.chain() needs at least one signature.")

    def enqueue(self) -> list[Job]:
        """Write every job of the chain in one transaction; returns them in order. The
        first is due as its options say; each of the others is blocked until the one
        before it succeeded."""
        now = timezone.now()
        rows = [signature.row(now) for signature in self.signatures]
        for upstream, downstream in itertools.pairwise(rows):
            upstream.has_downstream = True
            downstream.blocked = True
            downstream.waiting_for = 1
        using = database_alias()
        with _traced(rows), transaction.atomic(using=using):
            saved = _insert(rows, using)
            JobDependency.objects.using(using).bulk_create(
                JobDependency(upstream=up, downstream=down)
                for up, down in itertools.pairwise(saved)
            )
            wake_workers(using, [saved[0].run_at], now)
        if get_settings().EAGER:
            return _run_eagerly(saved)
        return saved

    def enqueue_on_commit(self, using: str | None = None) -> None:
        """``enqueue()`` when the transaction on the site's database ``using`` (``default``
        when None) commits; a rollback drops the chain."""
        transaction.on_commit(self.enqueue, using=using)


class Group:
    """``jobs.group([a.s(), b.s()])``: jobs that run side by side, counted by a ``Batch``;
    ``.then(sig)`` runs once every member succeeded, ``.finally_(sig)`` once every member
    finished, whatever the outcome."""

    def __init__(
        self,
        signatures: Iterable[Signature],
        then: Signature | None = None,
        finally_: Signature | None = None,
    ) -> None:
        self.signatures = _signatures(signatures, "jobs.group()")
        self.then_signature = then
        self.finally_signature = finally_

    def then(self, signature: Signature) -> Group:
        [checked] = _signatures([signature], "group.then()")
        return Group(self.signatures, checked, self.finally_signature)

    def finally_(self, signature: Signature) -> Group:
        [checked] = _signatures([signature], "group.finally_()")
        return Group(self.signatures, self.then_signature, checked)

    def enqueue(self) -> Batch:
        """Write the batch, its callbacks (blocked until the batch finishes) and its
        members in one transaction; returns the batch."""
        now = timezone.now()
        using = database_alias()
        members = [signature.row(now) for signature in self.signatures]
        then_job = self._callback(self.then_signature, now, empty=not members)
        finally_job = self._callback(self.finally_signature, now, empty=not members)
        callbacks = [row for row in (then_job, finally_job) if row is not None]
        with _traced([*members, *callbacks]), transaction.atomic(using=using):
            for row in callbacks:
                row.save(using=using, force_insert=True)
            note_fair_keys(using, callbacks)
            batch = Batch.objects.using(using).create(
                size=len(members),
                then_job=then_job,
                finally_job=finally_job,
                created_at=now,
                finished_at=None if members else now,
            )
            for member in members:
                member.batch = batch
            saved = _insert(members, using)
            wake_workers(using, [row.run_at for row in saved] or [now], now)
        if get_settings().EAGER:
            _run_eagerly(saved + callbacks)
            batch.refresh_from_db(using=using)
        return batch

    def enqueue_on_commit(self, using: str | None = None) -> None:
        """``enqueue()`` when the transaction on the site's database ``using`` (``default``
        when None) commits; a rollback drops the group."""
        transaction.on_commit(self.enqueue, using=using)

    @staticmethod
    def _callback(signature: Signature | None, now: dt.datetime, *, empty: bool) -> Job | None:
        """The unsaved row of a callback, blocked until the batch finishes."""
        if signature is None:
            return None
        row = signature.row(now)
        row.blocked = not empty  # a group of no members has finished already
        return row


def chain(*signatures: Signature) -> Chain:
    return Chain(*signatures)


def group(signatures: Iterable[Signature]) -> Group:
    return Group(signatures)


def enqueue_after(
    definition: JobDefinition,
    payload: Mapping[str, Any],
    after: Sequence[Job | int],
    options: Mapping[str, Any],
) -> Job:
    """``handle.using(after=[job_a, job_b]).enqueue(**payload)``: a job that waits until
    every job of ``after`` succeeded. One that succeeded already counts as done; if one
    failed for good or was cancelled, the job is written cancelled, naming it."""
    ids = _upstream_ids(definition, after)
    now = timezone.now()
    row = _build(definition, payload, options, now)
    using = database_alias()
    with _traced([row]), transaction.atomic(using=using):
        upstream = list(
            Job.objects.using(using)
            .select_for_update()
            .filter(pk__in=ids)
            .order_by("pk")
            .values_list("pk", "name", "status")
        )
        missing = sorted(set(ids) - {pk for pk, _, _ in upstream})
        if missing:
            raise ValueError(
                f"Job {definition.name!r}: after= names job(s) that do not exist: "
                f"{', '.join(f'#{pk}' for pk in missing)}."
            )
        ended = [(pk, name, status) for pk, name, status in upstream if status in _ENDED]
        waiting = [pk for pk, _, status in upstream if status in _UNFINISHED]
        if ended:
            pk, name, status = ended[0]
            mark_upstream_ended(row, upstream_ended_text(pk, name, status), now=now)
            # created finished, stamped by this host's clock: counted whatever the mark
            with counting.counting_stamped(now):
                row.save(using=using, force_insert=True)
        else:
            if waiting:
                row.blocked = True
                row.waiting_for = len(waiting)
            row.save(using=using, force_insert=True)
            note_fair_keys(using, [row])
        if waiting and not ended:
            Job.objects.using(using).filter(pk__in=waiting).update(has_downstream=True)
            JobDependency.objects.using(using).bulk_create(
                JobDependency(upstream_id=pk, downstream=row) for pk in waiting
            )
        elif not ended:
            wake_workers(using, [row.run_at], now)
    if get_settings().EAGER and not row.blocked and row.status == JobStatus.PENDING:
        return run_eagerly(row)
    return row


def check_enqueue_after(
    definition: JobDefinition,
    payload: Mapping[str, Any],
    after: Sequence[Job | int],
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], list[int]]:
    """The checks of ``enqueue_after`` that read nothing (the upstream jobs are looked
    up when it writes): a copy of the checked payload, and the upstream ids."""
    ids = _upstream_ids(definition, after)
    row = _build(definition, payload, options, timezone.now())
    return copy.deepcopy(row.payload), ids


_ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)
_UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING)


def _upstream_ids(definition: JobDefinition, after: Sequence[Job | int]) -> list[int]:
    if isinstance(after, (str, bytes)) or not isinstance(after, Iterable):
        raise TypeError(
            f"Job {definition.name!r}: after= takes a list of jobs or job ids, got {after!r}."
        )
    ids = []
    for item in after:
        pk = item.pk if isinstance(item, Job) else item
        if isinstance(pk, bool) or not isinstance(pk, int):
            raise TypeError(f"Job {definition.name!r}: after= takes jobs or job ids, got {item!r}.")
        ids.append(pk)
    if not ids:
        raise InvalidPayload(f"Job {definition.name!r}: after= needs at least one job.")
    return sorted(set(ids))


@contextmanager
def _traced(rows: list[Job]) -> Iterator[None]:
    """One producer span around the writing of a workflow's ``rows``, which store its
    traceparent."""
    names, queues = {row.name for row in rows}, {row.queue for row in rows}
    with producer_span(_only(names), _only(queues), count=len(rows)) as producer:
        for row in rows:
            row.traceparent = producer.traceparent
        yield
        producer.set_message_ids(row.pk for row in rows)


def _only(values: set[str]) -> str:
    """The value all share, or "" when they differ."""
    return next(iter(values)) if len(values) == 1 else ""


def _insert(rows: list[Job], using: str) -> list[Job]:
    """Save ``rows`` with their ids: one INSERT per 1,000 where the database returns the
    ids of a bulk insert, else one INSERT each (MySQL)."""
    if connections[using].features.can_return_rows_from_bulk_insert:
        saved = Job.objects.using(using).bulk_create(rows, batch_size=1000)
    else:
        for row in rows:
            row.save(using=using, force_insert=True)
        saved = rows
    note_fair_keys(using, saved)
    return saved


def _run_eagerly(rows: list[Job]) -> list[Job]:
    """Eager mode: run each row that is due and unblocked, in order, until none is left
    (a chain's next job is released by the success of the one before it)."""
    using = database_alias()
    ran: dict[int, Job] = {}
    progress = True
    while progress:
        progress = False
        pending = Job.objects.using(using).filter(
            pk__in=[row.pk for row in rows], status=JobStatus.PENDING, blocked=False
        )
        # Each job runs once (to its end, or until it snoozes): a snoozed one stays pending.
        for row in pending.exclude(pk__in=list(ran)).order_by("pk"):
            ran[row.pk] = run_eagerly(row)
            progress = True
    for row in rows:
        row.refresh_from_db(using=using)
    return rows
