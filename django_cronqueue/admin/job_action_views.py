"""The job admin's actions and buttons, Retry, Cancel and Run now (``JobActionsAdmin``,
a base of ``JobAdmin``): each list action, on a selection or on all the jobs the filters
match (after the confirmation page that counts them, ``all_matching``), and each button
of a job's page, carried out by ``job_actions.perform`` in batches, each batch in its own
transaction where it also writes the history entry of every job it changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from ..models import Job, JobStatus
from .actions import Action, by_whom, entry_of
from .all_matching import all_matching_page, selects_across
from .base import ReadOnlyAdmin
from .cancel_confirmation import confirmation_page, confirmed
from .job_actions import CANCEL_REQUEST, JOB_ACTIONS, outcome_messages, perform

if TYPE_CHECKING:  # the operations load when an action runs
    from ..operations.bulk import BatchChanges


class JobActionsAdmin(ReadOnlyAdmin[Job]):
    def _run(self, request: HttpRequest, key: str, jobs: QuerySet[Job]) -> None:
        """The action on ``jobs``: one message per outcome, one history entry per job it
        changed (a cancel both cancels pending jobs and asks running ones to stop),
        written by each batch in its transaction."""
        action = JOB_ACTIONS[key]

        def record(batch: BatchChanges) -> None:
            self.log_jobs(request, action, action.leaves, batch.changed)
            self.log_jobs(request, CANCEL_REQUEST, JobStatus.RUNNING, batch.requested)

        outcome = perform(action, jobs, by=by_whom(request), on_batch=record)
        for message, level in outcome_messages(action, outcome):
            self.message_user(request, message, level)

    def log_jobs(
        self, request: HttpRequest, action: Action, status: str, jobs: list[tuple[int, str]]
    ) -> None:
        """The history entries of the jobs (id, name) an action left in ``status``: the
        rows are not read, their ``object_repr`` is what ``str()`` of each would say."""
        changed = [Job(pk=pk, name=name, status=status) for pk, name in jobs]
        self.log_changes(request, changed, entry_of(action))

    def _act(self, request: HttpRequest, key: str, jobs: QuerySet[Job]) -> HttpResponse | None:
        """A list action: on all the jobs the filters match, after the confirmation page
        that counts them."""
        if selects_across(request) and not confirmed(request):
            return all_matching_page(self, request, jobs, JOB_ACTIONS[key])
        self._run(request, key, jobs)
        return None

    @admin.action(description="Retry selected jobs (failed or cancelled)", permissions=["change"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._act(request, "retry", queryset)

    @admin.action(
        description="Cancel selected jobs (pending; running ones are asked to stop)…",
        permissions=["change"],
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """Pending jobs are cancelled at once; running ones only after the confirmation
        (that of all matching jobs, which counts them, or the one that names them)."""
        if not confirmed(request) and not selects_across(request):
            back = request.get_full_path()
            page = confirmation_page(self, request, queryset, back_url=back, from_action=True)
            if page is not None:
                return page
        return self._act(request, "cancel", queryset)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The Cancel button: a pending job is cancelled at once, a running one after its
        confirmation page (shown on GET too)."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        job = self.get_object(request, unquote(object_id))
        if job is None:
            return self.missing_object(request, object_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        if not confirmed(request):
            selection = self.get_queryset(request).filter(pk=job.pk)
            back = self.change_url(job)
            page = confirmation_page(self, request, selection, back_url=back, from_action=False)
            if page is not None:
                return page
        if request.method == "GET":
            return HttpResponseRedirect(self.change_url(job))
        return self.object_button_view(
            request,
            object_id,
            lambda job: self._run(request, "cancel", self.get_queryset(request).filter(pk=job.pk)),
        )

    @admin.action(description="Run selected jobs now (pending)", permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._act(request, "run_now", queryset)
