"""Moved to ``django_cronqueue.operations.bulk``; this path, which docs/observability.md
showed, keeps working (docs/architecture.md lists every moved path)."""

from .operations.bulk import BATCH_SIZE, BulkOutcome, cancel_jobs, retry_jobs, run_jobs_now

__all__ = ["BATCH_SIZE", "BulkOutcome", "cancel_jobs", "retry_jobs", "run_jobs_now"]
