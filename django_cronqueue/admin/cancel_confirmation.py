"""The confirmation page before a cancel asks running jobs to stop, like Django's delete
confirmation: the Cancel button of a running job's page and the list's Cancel action on a
selection with running jobs show it first, naming those jobs; only its "Yes" (a POST with
``post=yes``) asks them to stop. Pending jobs are cancelled without it: a retry undoes that,
nothing undoes an interrupted run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..models import Job, JobStatus
from .job_actions import REQUEST_NOTE

if TYPE_CHECKING:
    from .base import ReadOnlyAdmin

#: The running jobs the page names; it counts the others.
LISTED = 20
CONFIRMED = "yes"


def confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("post") == CONFIRMED


def running_to_ask(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The running jobs of ``jobs`` that a cancel would ask to stop."""
    return jobs.filter(status=JobStatus.RUNNING, cancel_requested_at__isnull=True)


def confirmation_page(
    model_admin: ReadOnlyAdmin[Job],
    request: HttpRequest,
    jobs: QuerySet[Job],
    *,
    back_url: str,
    from_action: bool,
) -> HttpResponse | None:
    """The page asking to confirm the cancel of the running jobs among ``jobs``, or None
    when it has none (the cancel then goes ahead at once)."""
    running = running_to_ask(jobs).order_by("pk")
    listed = list(running.only("pk", "name", "queue", "started_at", "worker_id")[:LISTED])
    if not listed:
        return None
    count = len(listed) if len(listed) < LISTED else running.count()
    pending = jobs.filter(status=JobStatus.PENDING).count() if from_action else 0
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": "Cancel running jobs?" if count > 1 else "Cancel a running job?",
        "opts": model_admin.opts,
        "running": listed,
        "running_count": count,
        "more": count - len(listed),
        "pending_count": pending,
        "note": REQUEST_NOTE,
        "back_url": back_url,
        "from_action": from_action,
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "confirmed": CONFIRMED,
        "media": model_admin.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "django_cronqueue/admin/cancel_confirmation.html", context)
