"""What the admin shows of workflows (``jobs.chain``, ``jobs.group``, ``using(after=...)``):
a batch's members counted by status, its callbacks, and the jobs a job waits for or
that wait for it.

Each function is one query (or two, when a list is cut short and its total is counted),
whatever the size of the batch or the number of links: a batch of 10,000 members is
counted by one GROUP BY on the ``batch_id`` index, never member by member.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery

from ..models import Batch, Job, JobDependency, JobStatus
from .base import jobs

__all__ = [
    "LINKS_SHOWN",
    "BatchState",
    "CallbackOf",
    "JobRef",
    "Linked",
    "WorkflowLinks",
    "batch_progress",
    "batch_state",
    "downstream_jobs",
    "upstream_jobs",
    "with_workflow_links",
    "workflow_links",
]

#: The change page of a job lists at most this many upstream (and downstream) jobs.
LINKS_SHOWN = 50


@dataclass(frozen=True)
class JobRef:
    """Enough of a job to link it and show its state."""

    pk: int
    name: str
    status: str
    blocked: bool

    @property
    def waits(self) -> bool:
        """Pending but never claimed until its upstream jobs (or its batch) are done."""
        return self.status == JobStatus.PENDING and self.blocked


@dataclass(frozen=True)
class Linked:
    """The first ``LINKS_SHOWN`` jobs of a list, by id, and how many there are in all."""

    shown: list[JobRef]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.shown)


@dataclass(frozen=True)
class BatchState:
    """A batch as its page shows it: the counters of its row, its members per status
    (every status present), and its callbacks (None: it has none, or it was deleted)."""

    batch: Batch
    members: dict[str, int]
    then_job: JobRef | None
    finally_job: JobRef | None

    @property
    def finished(self) -> int:
        return self.batch.succeeded + self.batch.failed


@dataclass(frozen=True)
class CallbackOf:
    """The batch whose callback a job is, and which one (``then`` or ``finally``)."""

    batch_id: int
    kind: str


_REF = ("pk", "name", "status", "blocked")


def _ref(row: tuple[int, str, str, bool]) -> JobRef:
    return JobRef(*row)


def batch_state(batch: Batch) -> BatchState:
    """Two queries: the members per status (one GROUP BY) and both callbacks."""
    counts = dict.fromkeys(JobStatus.values, 0)
    rows = jobs().filter(batch_id=batch.pk).order_by().values_list("status")
    for status, n in rows.annotate(n=Count("pk")):
        counts[status] = n
    callback_ids = [pk for pk in (batch.then_job_id, batch.finally_job_id) if pk is not None]
    refs = {}
    if callback_ids:
        refs = {
            row[0]: _ref(row)
            for row in jobs().filter(pk__in=callback_ids).order_by().values_list(*_REF)
        }
    return BatchState(
        batch=batch,
        members=counts,
        then_job=refs.get(batch.then_job_id) if batch.then_job_id else None,
        finally_job=refs.get(batch.finally_job_id) if batch.finally_job_id else None,
    )


def batch_progress(size: int, succeeded: int, failed: int) -> tuple[int, int, int]:
    """(finished, pending, percent finished) of a batch's counters; an empty batch has
    finished."""
    finished = succeeded + failed
    pending = max(size - finished, 0)
    percent = 100 if size <= 0 else min(finished * 100 // size, 100)
    return finished, pending, percent


def upstream_jobs(job_id: int, limit: int = LINKS_SHOWN) -> Linked:
    """The jobs ``job_id`` waits for (``JobDependency``), by id."""
    return _linked(jobs().filter(downstream_links__downstream_id=job_id), limit)


def downstream_jobs(job_id: int, limit: int = LINKS_SHOWN) -> Linked:
    """The jobs that wait for ``job_id`` (``JobDependency``), by id."""
    return _linked(jobs().filter(upstream_links__upstream_id=job_id), limit)


def _linked(queryset: QuerySet[Job], limit: int) -> Linked:
    rows = queryset.order_by("pk").values_list(*_REF)
    shown = [_ref(row) for row in rows[: limit + 1]]
    if len(shown) <= limit:
        return Linked(shown, len(shown))
    return Linked(shown[:limit], rows.count())


@dataclass(frozen=True)
class WorkflowLinks:
    """How a job takes part in workflows: a member of a batch, a callback of one, waiting
    for upstream jobs or waited for by downstream ones (or none of these)."""

    batch_id: int | None
    callback: CallbackOf | None
    has_upstream: bool
    has_downstream: bool

    @property
    def any(self) -> bool:
        return (
            self.batch_id is not None
            or self.callback is not None
            or self.has_upstream
            or self.has_downstream
        )


def with_workflow_links(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs with what ``workflow_links`` reads, in the same query: whether a job has
    upstream jobs, and the batch whose ``then`` or ``finally`` callback it is."""
    callback_of = Batch.objects.filter(
        Q(then_job_id=OuterRef("pk")) | Q(finally_job_id=OuterRef("pk"))
    ).order_by()
    return queryset.annotate(
        cq_has_upstream=Exists(JobDependency.objects.filter(downstream_id=OuterRef("pk"))),
        cq_callback_batch=Subquery(callback_of.values("pk")[:1]),
        cq_callback_then=Exists(Batch.objects.filter(then_job_id=OuterRef("pk"))),
    )


def workflow_links(job: Job) -> WorkflowLinks:
    """The workflow facts of a job read by ``with_workflow_links`` (no query), or of any
    job object (one query)."""
    if not hasattr(job, "cq_has_upstream"):
        job = with_workflow_links(jobs().filter(pk=job.pk)).get()
    facts = vars(job)  # the annotations of with_workflow_links
    callback = None
    if facts["cq_callback_batch"] is not None:
        kind = "then" if facts["cq_callback_then"] else "finally"
        callback = CallbackOf(facts["cq_callback_batch"], kind)
    return WorkflowLinks(
        batch_id=job.batch_id,
        callback=callback,
        has_upstream=facts["cq_has_upstream"],
        has_downstream=job.has_downstream,
    )
