"""The Batch admin: the groups of jobs (``jobs.group``), read-only.

The list shows each batch's counters and progress and links its ``then`` and ``finally``
callbacks (their status read by the same query, through a join). The batch page shows
its progress, its members counted by status (one GROUP BY on the ``batch_id`` index,
however many members), each count linking to the job list filtered to that batch and
status, and its callbacks. Batches are written by ``jobs.group()`` and counted by the
completion of their members: nobody adds, changes or deletes one here; the view
permission is enough to see them.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from .. import observe
from ..models import Batch, JobStatus
from .base import ReadOnlyAdmin
from .renderers import compact_time, detail_time
from .workflows import (
    batch_progress_bar,
    job_url,
    members_url,
    status_with_blocked,
)


class BatchAdmin(ReadOnlyAdmin[Batch]):
    list_display = [
        "id",
        "size_display",
        "succeeded_display",
        "failed_display",
        "progress_column",
        "finished_display",
        "created_display",
        "then_column",
        "finally_column",
    ]
    list_display_links = ["id"]
    actions = None  # nothing to do to a batch (not even Django's "delete selected")
    sortable_by = ["id"]
    show_full_result_count = False
    list_per_page = 100
    fieldsets = [
        (None, {"fields": ["progress_display", "members_display"]}),
        ("Callbacks", {"fields": ["then_display", "finally_display"]}),
        ("When", {"fields": ["created", "finished"]}),
    ]
    readonly_fields = [
        "progress_display",
        "members_display",
        "then_display",
        "finally_display",
        "created",
        "finished",
    ]

    def has_change_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False  # a batch is counted by its members' completions, never by hand

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        # The callbacks' status by a join, not by a query per row.
        return (
            super()
            .get_queryset(request)
            .annotate(then_status=F("then_job__status"), then_blocked=F("then_job__blocked"))
            .annotate(
                finally_status=F("finally_job__status"), finally_blocked=F("finally_job__blocked")
            )
        )

    # -- list columns

    @admin.display(description="size")
    def size_display(self, batch: Batch) -> str:
        return f"{batch.size:,}"

    @admin.display(description="succeeded")
    def succeeded_display(self, batch: Batch) -> str:
        return f"{batch.succeeded:,}"

    @admin.display(description="failed")
    def failed_display(self, batch: Batch) -> str:
        if not batch.failed:
            return "0"
        return format_html('<span class="cq-failed-text">{}</span>', f"{batch.failed:,}")

    @admin.display(description="progress")
    def progress_column(self, batch: Batch) -> str:
        return batch_progress_bar(batch.size, batch.succeeded, batch.failed, compact=True)

    @admin.display(description="finished")
    def finished_display(self, batch: Batch) -> str:
        return compact_time(batch.finished_at)

    @admin.display(description="created")
    def created_display(self, batch: Batch) -> str:
        return compact_time(batch.created_at)

    @admin.display(description="then")
    def then_column(self, batch: Batch) -> str:
        return self._callback_cell(batch.then_job_id, batch, "then")

    @admin.display(description="finally")
    def finally_column(self, batch: Batch) -> str:
        return self._callback_cell(batch.finally_job_id, batch, "finally")

    def _callback_cell(self, pk: int | None, batch: Batch, kind: str) -> str:
        if pk is None:
            return "-"
        status = getattr(batch, f"{kind}_status", None)
        blocked = bool(getattr(batch, f"{kind}_blocked", False))
        return format_html(
            '<a href="{}">#{}</a> {}',
            job_url(pk, self.admin_site.name),
            pk,
            status_with_blocked(status, blocked) if status else "",
        )

    # -- the batch page

    def state(self, batch: Batch) -> observe.BatchState:
        """The batch as its page shows it, read once per request (several fields)."""
        if "_cq_state" not in batch.__dict__:
            batch.__dict__["_cq_state"] = observe.batch_state(batch)
        state: observe.BatchState = batch.__dict__["_cq_state"]
        return state

    @admin.display(description="progress")
    def progress_display(self, batch: Batch) -> str:
        finished, pending, percent = observe.batch_progress(
            batch.size, batch.succeeded, batch.failed
        )
        return format_html(
            '{}<div class="cq-quiet">{} of {} members finished ({}%): {} succeeded, '
            "{} failed or cancelled, {} not finished{}</div>",
            batch_progress_bar(batch.size, batch.succeeded, batch.failed),
            f"{finished:,}",
            f"{batch.size:,}",
            percent,
            f"{batch.succeeded:,}",
            f"{batch.failed:,}",
            f"{pending:,}",
            "; the batch has finished" if batch.finished_at else "",
        )

    @admin.display(description="members by status")
    def members_display(self, batch: Batch) -> str:
        """Each status with its count, linked to the job list of those members."""
        site = self.admin_site.name
        counts = self.state(batch).members
        items = format_html_join(
            "",
            '<li><a href="{}" class="cq-count cq-count-{}"><span class="cq-count-label">{}'
            '</span> <span class="cq-count-n">{}</span></a></li>',
            (
                (members_url(batch.pk, site, status), status, label, f"{counts[status]:,}")
                for status, label in JobStatus.choices
            ),
        )
        return format_html(
            '<ul class="cq-counts cq-batch-members">'
            '<li><a href="{}" class="cq-count"><span class="cq-count-label">All</span> '
            '<span class="cq-count-n">{}</span></a></li>{}</ul>',
            members_url(batch.pk, site),
            f"{sum(counts.values()):,}",
            items,
        )

    @admin.display(description="then (runs once every member succeeded)")
    def then_display(self, batch: Batch) -> str:
        return self._callback_detail(batch.then_job_id, self.state(batch).then_job)

    @admin.display(description="finally (runs once every member finished)")
    def finally_display(self, batch: Batch) -> str:
        return self._callback_detail(batch.finally_job_id, self.state(batch).finally_job)

    def _callback_detail(self, pk: int | None, ref: observe.JobRef | None) -> str:
        if pk is None:
            return "-"
        if ref is None:
            return format_html("job #{} (deleted)", pk)
        return format_html(
            '<a href="{}">#{} {}</a> {}{}',
            job_url(ref.pk, self.admin_site.name),
            ref.pk,
            ref.name,
            status_with_blocked(ref.status, ref.blocked),
            ": waits for the batch to finish" if ref.waits else "",
        )

    @admin.display(description="created")
    def created(self, batch: Batch) -> str:
        return detail_time(batch.created_at)

    @admin.display(description="finished")
    def finished(self, batch: Batch) -> str:
        return detail_time(batch.finished_at)
