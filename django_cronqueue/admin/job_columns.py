"""The job list's columns (and the status, name and attempts the job's page shows too).

The list has five columns, so that it fits beside Django's navigation sidebar and the
filters on a 1280-pixel screen: the attempts and a running job's progress sit under its
status, the queue under the name, a cron occurrence under the run time.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from .. import observe
from ..definitions.registry import registry
from ..models import Job, JobStatus
from .filters import ERROR_CHARS
from .renderers import (
    breakable_name,
    compact_time,
    orphan_badge,
    progress_bar,
    stranded_badge,
    warning_badge,
)
from .workflows import status_with_blocked


class JobColumns:
    @admin.display(description="status")
    def status_display(self, job: Job) -> str:
        """The status, "blocked" for a pending job that waits (no query: a column), and a
        mark for a due one whose name no live worker defines."""
        return format_html(
            "{}{}", status_with_blocked(job.status, job.blocked), stranded_badge(job)
        )

    @admin.display(description="status, attempts")
    def status_column(self, job: Job) -> str:
        """The status (and its badges), the attempts, and for a running job its progress
        bar and whether it was asked to stop."""
        return format_html(
            '{}<div class="cq-quiet cq-attempts">{} attempts</div>{}',
            self.status_display(job),
            self.attempts_display(job),
            self.progress_line(job),
        )

    def progress_line(self, job: Job) -> str:
        """A bar for a running job that reports its progress, and whether it was asked to
        stop; nothing for the others."""
        if job.status != JobStatus.RUNNING:
            return ""
        bar = progress_bar(observe.progress_of(job.progress), compact=True)
        if job.cancel_requested_at is None:
            return format_html("<div>{}</div>", bar) if bar else ""
        return format_html("<div>{} {}</div>", bar, warning_badge("cancel requested"))

    @admin.display(description="name, queue")
    def name_column(self, job: Job) -> str:
        return format_html(
            '{}<div class="cq-quiet">queue {}</div>', self.name_display(job), job.queue
        )

    @admin.display(description="name")
    def name_display(self, job: Job) -> str:
        name = breakable_name(job.name)
        if job.name in registry:
            return name
        return format_html("{} {}", name, orphan_badge())

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="run at (occurrence)")
    def run_at_column(self, job: Job) -> str:
        """When the job is due, and for a cron occurrence the instant it stands for."""
        if job.scheduled_for is None:
            return compact_time(job.run_at)
        return format_html(
            '{}<div class="cq-quiet">occurrence {}</div>',
            compact_time(job.run_at),
            compact_time(job.scheduled_for),
        )

    @admin.display(description="last error")
    def error_display(self, job: Job) -> str:
        text = getattr(job, "error_head", None)
        if text is None:
            text = job.last_error
        line = text.strip().splitlines()[0] if text.strip() else ""
        if not line:
            return ""
        short = line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"
        return format_html('<span class="cq-error" title="{}">{}</span>', line, short)
