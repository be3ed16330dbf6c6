"""The attempts of the jobs that ran more than once (``JobAttempt``): one row per attempt
that ended in anything but a first-attempt success, written by ``lifecycle`` in the
transaction that changes the job's status."""

from __future__ import annotations

from django.db import models

__all__ = ["AttemptOutcome", "JobAttempt"]


class AttemptOutcome(models.TextChoices):
    """How one attempt ended. Whether the job was retried is ``JobAttempt.retry_at``."""

    SUCCEEDED = "succeeded", "succeeded"  # a success after an earlier attempt
    FAILED = "failed", "failed"  # the handler raised (or overran its timeout)
    SNOOZED = "snoozed", "snoozed"  # the handler raised jobs.Snooze
    LOST = "lost", "lost"  # its lease expired: the worker died, stopped or hung
    CANCELLED = "cancelled", "cancelled"  # a cancel was requested and the handler stopped


class JobAttempt(models.Model):
    """One attempt of a job that ran more than once, or that was snoozed, lost or
    cancelled while it ran: when it started and ended, the worker that ran it, how it
    ended and its error. A job that succeeds on its first attempt has none (its row says
    it all).

    ``job`` is a foreign key without a database constraint: on PostgreSQL a finished job
    moves to a history table that inherits from the job table (``history.archive``),
    which a constraint on the job table would not see (the move would fail, or cascade
    to its attempts); MariaDB keeps no foreign key on the partitioned job table. The
    attempts go with their job all the same: ``Job.delete()`` cascades (Django's
    collector), and the prune deletes them with each batch of jobs and with each day's
    history table it drops (``housekeeping.maintenance``)."""

    Outcome = AttemptOutcome

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        "django_cronqueue.Job",
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,  # the (job, id) index below serves look-ups by job
        related_name="attempt_log",
    )
    attempt = models.PositiveIntegerField(help_text="The job's attempt number: 1 for the first.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(help_text="When the attempt ended (or was found lost).")
    worker = models.CharField(max_length=100, blank=True, default="", help_text="Lease holder.")
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    retry_at = models.DateTimeField(
        null=True, blank=True, help_text="When the job was due again after it; empty: it ended."
    )

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["job_id", "id"]
        indexes = [
            # A job's attempts in order (the timeline), and the prune's delete by job.
            models.Index(fields=["job", "id"], name="cronqueue_attempt_job"),
        ]

    def __str__(self) -> str:
        return f"Attempt {self.attempt} of job #{self.job_id} ({self.outcome})"
