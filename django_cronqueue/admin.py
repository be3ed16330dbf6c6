"""The Django admin for jobs: list, filter, search, and retry / cancel / run now."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from .models import Job, JobStatus

STATUS_COLOURS = {
    JobStatus.PENDING: "#6c757d",
    JobStatus.RUNNING: "#0d6efd",
    JobStatus.SUCCEEDED: "#198754",
    JobStatus.FAILED: "#dc3545",
    JobStatus.CANCELLED: "#b58900",
}


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "coloured_status",
        "name",
        "queue",
        "attempts_of_max",
        "run_at",
        "scheduled_for",
        "short_error",
    ]
    list_filter = ["status", "queue", "name"]
    search_fields = ["=id", "name", "dedupe_key", "last_error"]
    show_full_result_count = False
    actions = ["retry_jobs", "cancel_jobs", "run_jobs_now"]
    readonly_fields = [
        "name",
        "status",
        "queue",
        "priority",
        "attempts",
        "max_attempts",
        "run_at",
        "scheduled_for",
        "dedupe_key",
        "pretty_payload",
        "last_error",
        "traceback_block",
        "worker_id",
        "locked_until",
        "created_at",
        "started_at",
        "finished_at",
    ]
    exclude = ["payload", "traceback", "lock_token", "active_dedupe_key", "result"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="status", ordering="status")
    def coloured_status(self, job: Job) -> str:
        return format_html(
            '<strong style="color: {}">{}</strong>',
            STATUS_COLOURS.get(job.status, "inherit"),
            job.get_status_display(),
        )

    @admin.display(description="attempts")
    def attempts_of_max(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="last error")
    def short_error(self, job: Job) -> str:
        text = job.last_error.splitlines()[0] if job.last_error else ""
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="payload")
    def pretty_payload(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", json.dumps(job.payload, indent=2, ensure_ascii=False))

    @admin.display(description="traceback")
    def traceback_block(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", job.traceback) if job.traceback else "-"

    def _apply(self, request: HttpRequest, queryset: QuerySet[Job], verb: str, method: str) -> None:
        done = skipped = 0
        for job in queryset:
            if getattr(job, method)():
                done += 1
            else:
                skipped += 1
        self.message_user(request, f"{verb} {done} job(s); skipped {skipped}.", messages.SUCCESS)

    @admin.action(description="Retry selected jobs (failed or cancelled)", permissions=["change"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "Retried", "retry")

    @admin.action(description="Cancel selected jobs (pending)", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "Cancelled", "cancel")

    @admin.action(description="Run selected jobs now (pending)", permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, "Moved to now", "run_now")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj)
