"""The confirmation page of a job action on all the jobs the list's filters match (the
list's "Select all N jobs", Django's ``select_across``): it states N, how many of them the
action applies to, and the filters and search that picked them; nothing changes until its
"Yes" (a POST with ``post=yes``, as the cancel confirmation's). The action then works
through every matching row in batches (``operations.bulk``), each batch its own
transaction, never one over all of them.

N is counted exactly, in one query (``COUNT`` with its per-status parts), whatever the
size of the table: the operator confirms the number of rows the action will read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin import helpers
from django.contrib.admin.views.main import IGNORED_PARAMS, PAGE_VAR, SEARCH_VAR
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..models import Job, JobStatus
from .cancel_confirmation import CONFIRMED
from .job_actions import REQUEST_NOTE, JobAction
from .renderers import plural

if TYPE_CHECKING:
    from .base import ReadOnlyAdmin

#: Query parameters of the list that do not pick rows (its page, order, pop-up state).
NOT_FILTERS = frozenset({*IGNORED_PARAMS, PAGE_VAR, "_changelist_filters"}) - {SEARCH_VAR}


def selects_across(request: HttpRequest) -> bool:
    """Whether a list action is on all the rows the filters match, not a selection."""
    return request.method == "POST" and request.POST.get("select_across") == "1"


def filters_of(model_admin: ReadOnlyAdmin[Job], request: HttpRequest) -> list[tuple[str, str]]:
    """The list's filters and search, as (what, value): ("status", "failed")."""
    titles = {
        str(getattr(spec, "parameter_name", "")): str(getattr(spec, "title", ""))
        for spec in model_admin.list_filter
    }
    found: list[tuple[str, str]] = []
    for key, values in request.GET.lists():
        if key in NOT_FILTERS:
            continue
        label = "search" if key == SEARCH_VAR else titles.get(key) or key
        found.extend((label, value) for value in values if value)
    return found


def all_matching_page(
    model_admin: ReadOnlyAdmin[Job], request: HttpRequest, jobs: QuerySet[Job], action: JobAction
) -> HttpResponse:
    """The page asking to confirm ``action`` on every job of ``jobs`` (the list's)."""
    asking = Q(status=JobStatus.RUNNING, cancel_requested_at__isnull=True)
    counts = jobs.order_by().aggregate(
        total=Count("pk"),
        applicable=Count("pk", filter=Q(status__in=action.applies_to)),
        running=Count("pk", filter=asking),
    )
    from ..operations.bulk import BATCH_SIZE

    cancel = action.key == "cancel"
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": f"{action.label} all {plural(counts['total'], 'matching job')}?",
        "opts": model_admin.opts,
        "action": action,
        "action_name": request.POST.get("action", ""),
        "total": counts["total"],
        "total_text": plural(counts["total"], "job"),
        "applicable": counts["applicable"],
        "skipped": counts["total"] - counts["applicable"],
        "running": counts["running"] if cancel else 0,
        "note": REQUEST_NOTE if cancel and counts["running"] else "",
        "filters": filters_of(model_admin, request),
        "batch_size": BATCH_SIZE,
        "back_url": request.get_full_path(),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "confirmed": CONFIRMED,
        "media": model_admin.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(
        request, "django_cronqueue/admin/all_matching_confirmation.html", context
    )
