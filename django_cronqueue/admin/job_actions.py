"""The job admin's actions, Retry, Cancel and Run now: which jobs each applies to, how
it is carried out (set-based, ``django_cronqueue.operations.bulk``) and what the operator is told.

Cancel applies to pending jobs (cancelled at once) and to running ones (their handlers
are asked to stop; a job ends cancelled when its handler then stops, succeeded when it
finishes anyway), as ``jobs.cancel()`` does; a running job already asked to stop is
skipped, and said to be.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import messages
from django.db.models import QuerySet

from ..models import Job, JobStatus
from .actions import Action, summary_messages

if TYPE_CHECKING:  # the operations load when an action runs
    from ..operations import bulk

JOB = "job"
RUNNING_JOB = "running job"
DEDUPE_KEY_TAKEN = "another pending or running job of the same name holds its dedupe key"
ALREADY_REQUESTED = "running: a cancel was already requested"
REQUEST_NOTE = (
    "A running job asked to stop ends cancelled once its handler stops (it is told within "
    "a second on PostgreSQL, within a third of the lease elsewhere); if its handler "
    "finishes anyway, it ends succeeded."
)


@dataclass(frozen=True)
class JobAction(Action):
    """An action on jobs, applicable to the jobs of some statuses only."""

    applies_to: frozenset[str]
    applies_text: str
    #: The status of the jobs it changed, for their history entries' ``object_repr``.
    leaves: str
    button_class: str = ""

    def applies(self, job: Job) -> bool:
        """Whether the detail page of ``job`` offers this action's button."""
        if self.key == "cancel" and job.cancel_requested_at is not None:
            return False  # a running job that was already asked to stop
        return job.status in self.applies_to


JOB_ACTIONS = {
    action.key: action
    for action in (
        JobAction(
            "retry",
            "Retry",
            "Retried",
            frozenset({JobStatus.FAILED, JobStatus.CANCELLED}),
            "only failed or cancelled jobs can be retried",
            JobStatus.PENDING,
            "cq-primary",
        ),
        JobAction(
            "cancel",
            "Cancel",
            "Cancelled",
            frozenset({JobStatus.PENDING, JobStatus.RUNNING}),
            "only pending or running jobs can be cancelled",
            JobStatus.CANCELLED,
            "cq-danger",
        ),
        JobAction(
            "run_now",
            "Run now",
            "Made {} due now",
            frozenset({JobStatus.PENDING}),
            "only pending jobs can be run now",
            JobStatus.PENDING,
        ),
    )
}
#: What the history and the messages call the cancel of running jobs.
CANCEL_REQUEST = Action("cancel", "Cancel request", "Asked {} to stop")


def perform(
    action: JobAction, jobs: QuerySet[Job], *, by: str, on_batch: bulk.OnBatch
) -> bulk.BulkOutcome:
    """The action on every job of ``jobs`` it applies to: set-based, in batches, each its
    own transaction, in which ``on_batch`` is told what the batch changed. ``by`` (who
    acts) is recorded with a cancel."""
    from ..operations import bulk

    if action.key == "retry":
        return bulk.retry_jobs(jobs, on_batch=on_batch)
    if action.key == "cancel":
        return bulk.cancel_jobs(jobs, by=by, on_batch=on_batch)
    return bulk.run_jobs_now(jobs, on_batch=on_batch)


def outcome_messages(action: JobAction, outcome: bulk.BulkOutcome) -> list[tuple[str, int]]:
    """What changed (for a cancel: the pending jobs cancelled, then the running ones asked
    to stop), then what was skipped, by reason."""
    skipped = [
        (f"{status}: {action.applies_text}", outcome.not_applicable[status])
        for status in JobStatus.values
        if status in outcome.not_applicable
    ]
    skipped += [
        (ALREADY_REQUESTED, outcome.already_requested),
        (DEDUPE_KEY_TAKEN, outcome.dedupe_key_taken),
        ("changed meanwhile", outcome.changed_meanwhile),
    ]
    changes = [(action, JOB, outcome.changed), (CANCEL_REQUEST, RUNNING_JOB, outcome.requested)]
    found = summary_messages(changes, skipped, JOB)
    if outcome.requested.count:
        found.append((REQUEST_NOTE, messages.INFO))
    return found
