"""A job's statuses: the values of ``Job.status``."""

from __future__ import annotations

from django.db import models

__all__ = ["FINISHED_STATUSES", "STATUS_EXPRESSION", "JobStatus"]


class JobStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

# The status as an expression no index on status can read (PostgreSQL): the claim index's
# condition is written with it (migration 0022), so a query that compares it too reads
# the job table's pending rows from that index, and rows looked up by id are found by
# their primary key rather than through an index on status.
STATUS_EXPRESSION = "status || ''"
