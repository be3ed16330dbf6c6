"""The job list's columns (and the status, name and attempts the job's page shows too).

The list has five columns, so that it fits beside Django's navigation sidebar and the
filters on a 1280-pixel screen: the attempts and a running job's progress sit under its
status, the queue under the name, a cron occurrence under the run time.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from .. import observe
from ..claiming.aging import effective_priority
from ..conf import priority_aging
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


def aged_priority(job: Job) -> int | None:
    """The priority a due pending job ranks as under PRIORITY_AGING, when it differs from
    the stored one (``claiming.aging``); None otherwise."""
    aging = priority_aging()
    if aging is None or job.status != JobStatus.PENDING or job.blocked:
        return None
    aged = effective_priority(job.priority, job.run_at, timezone.now(), aging)
    return aged if aged != job.priority else None


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
        aged = aged_priority(job)
        return format_html(
            '{}<div class="cq-quiet">queue {}{}{}</div>',
            self.name_display(job),
            job.queue,
            format_html(", key {}", job.fair_key) if job.fair_key else "",
            format_html(", priority {} ranks as {}", job.priority, aged) if aged else "",
        )

    @admin.display(description="priority")
    def priority_display(self, job: Job) -> str:
        """The stored priority, and for a waiting job that PRIORITY_AGING has aged the
        priority it ranks as now."""
        aged = aged_priority(job)
        if aged is None:
            return str(job.priority)
        return f"{job.priority} (waiting: ranks as {aged})"

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
