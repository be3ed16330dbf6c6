"""Signals sent around a job's life. Every one is sent with ``sender`` = the job's name.

- ``job_started(job)``: a worker is about to call the handler.
- ``job_succeeded(job, result, duration)``: the handler returned.
- ``job_retrying(job, exc, run_at)``: the handler raised (or its lease was lost) and the
  job will run again at ``run_at``.
- ``job_failed(job, exc)``: the last attempt failed; the job is ``failed``.
- ``job_timed_out(job, timeout)``: a worker's handler ran past its ``timeout`` (seconds):
  its lease is no longer renewed, and its slot takes no new work until it returns.
- ``job_snoozed(job, run_at)``: the handler raised ``jobs.Snooze``; the job is pending
  again, due at ``run_at``, its attempt given back.
- ``job_cancelled(job, requested_by, reason)``: a running job whose cancel was requested
  stopped (its handler raised); the job is ``cancelled``.
- ``cron_occurrence_created(job, schedule)``: a cron occurrence became a job row.
"""

import logging

from django.dispatch import Signal

logger = logging.getLogger("django_cronqueue")

job_started = Signal()
job_succeeded = Signal()
job_failed = Signal()
job_retrying = Signal()
job_timed_out = Signal()
job_snoozed = Signal()
job_cancelled = Signal()
cron_occurrence_created = Signal()


def send(signal: Signal, sender: str, **kwargs: object) -> None:
    """Send ``signal`` to its receivers; a receiver that raises is logged, never
    allowed to break the worker or the caller."""
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender=sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "Receiver %r of a django-cronqueue signal raised for %s",
                receiver,
                sender,
                exc_info=response,
            )
