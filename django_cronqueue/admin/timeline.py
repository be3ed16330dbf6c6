"""The timeline section of a job's page and the admin log section of a cron schedule's
page: what the templates ``_timeline.html`` and ``_admin_log.html`` show, read from
``observe.timeline``."""

from __future__ import annotations

from typing import Any

from ..models import CronSchedule, Job
from ..observe.timeline import admin_log, job_timeline

__all__ = ["job_timeline_context", "schedule_log_context"]


def job_timeline_context(job: Job) -> dict[str, Any]:
    """The context of a job page's timeline."""
    return {"cq_timeline": job_timeline(job)}


def schedule_log_context(schedule: CronSchedule) -> dict[str, Any]:
    """The context of a schedule page's list of admin log entries."""
    lines, more = admin_log(schedule)
    return {"cq_admin_log": lines, "cq_admin_log_more": more}
