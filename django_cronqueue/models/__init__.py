"""The tables: jobs, cron schedules, worker heartbeats, per-name concurrency locks,
pauses of queues and job names, and the flow-control locks and start log (and, from
``finished_counts``, the counts of finished rows; from ``attempts``, the attempts of
the jobs that ran more than once); ``statuses`` holds a job's statuses and
``fields`` the package's own model field. ``django_cronqueue.models`` is the public path
of every model.

May import ``definitions``, ``cron``, ``values`` and ``conf`` only.

The models sit below the code that changes their rows, so their verbs (``Job.retry()``,
``CronSchedule.run_now()``, ...) are declared here and carried out by ``ModelVerbs``,
which ``django_cronqueue.operations.model_methods`` implements (status changes in
``lifecycle``, schedules in ``schedules.scheduler``) and ``AppConfig.ready()`` attaches to
the app config.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol, cast

from django.apps import apps
from django.db import models
from django.utils import timezone

from ..cron.spec import DEFAULT_MAX_CATCH_UP
from ..definitions.flow_options import MAX_LIMIT_KEY_LENGTH
from ..definitions.registry import JobDefinition
from ..integrations import encryption
from ..values.validation import (
    MAX_DEDUPE_KEY_LENGTH,
    MAX_EXPRESSION_LENGTH,
    MAX_NAME_LENGTH,
    MAX_QUEUE_LENGTH,
    MAX_TRACEPARENT_LENGTH,
    MAX_ZONE_NAME_LENGTH,
)
from .attempts import AttemptOutcome, JobAttempt
from .fair_shares import TURN_NEVER, FairShare
from .fields import ExactCharField
from .finished_counts import FinishedCount, FinishedCountMark, FinishedDayCount
from .statuses import FINISHED_STATUSES, JobStatus

__all__ = [
    "FINISHED_STATUSES",
    "MAX_DEDUPE_KEY_LENGTH",
    "TURN_NEVER",
    "AttemptOutcome",
    "Batch",
    "CronSchedule",
    "CronScheduleSource",
    "ExactCharField",
    "FairShare",
    "FinishedCount",
    "FinishedCountMark",
    "FinishedDayCount",
    "FlowLock",
    "Job",
    "JobAttempt",
    "JobDependency",
    "JobStart",
    "JobStatus",
    "ModelVerbs",
    "NameLock",
    "Pause",
    "Worker",
]


class Job(models.Model):
    """One run of a job: created by enqueue or by a cron occurrence.

    State changes go through the methods below (carried out by ``lifecycle``) and the
    worker's claim and completion functions; nothing else writes ``status``.
    """

    Status = JobStatus

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=MAX_NAME_LENGTH)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    queue = ExactCharField(max_length=MAX_QUEUE_LENGTH, default="default")
    priority = models.IntegerField(default=0, help_text="Higher runs first.")
    attempts = models.PositiveIntegerField(default=0, help_text="How many times it was claimed.")
    max_attempts = models.PositiveIntegerField(default=4)
    run_at = models.DateTimeField(default=timezone.now, help_text="Due from this instant.")
    scheduled_for = models.DateTimeField(
        null=True, blank=True, help_text="The cron occurrence this row runs."
    )
    # NULL, not "", means "no key": NULLs never collide in the unique constraints below.
    dedupe_key = models.CharField(max_length=MAX_DEDUPE_KEY_LENGTH, null=True, blank=True)  # noqa: DJ001
    # The dedupe key while the job is pending or running, NULL once it ends. A plain
    # unique constraint on it works on every vendor (MariaDB has no partial indexes).
    active_dedupe_key = models.CharField(  # noqa: DJ001
        max_length=MAX_DEDUPE_KEY_LENGTH, null=True, blank=True, editable=False
    )
    # dedupe_for: the key stays taken, whatever the status, until dedupe_until. Never
    # cleared by a completion; a later enqueue clears it once the span has passed.
    window_dedupe_key = ExactCharField(
        max_length=MAX_DEDUPE_KEY_LENGTH, null=True, blank=True, editable=False
    )
    dedupe_until = models.DateTimeField(
        null=True, blank=True, help_text="Its dedupe key is not reused before this instant."
    )
    locked_until = models.DateTimeField(null=True, blank=True, help_text="Lease expiry.")
    lock_token = models.CharField(max_length=32, null=True, blank=True, editable=False)  # noqa: DJ001
    worker_id = models.CharField(max_length=100, blank=True, default="", help_text="Lease holder.")
    last_error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    # The dotted path of the exception class a failure raised, recorded when the failure
    # is written, so nothing ever derives code to import from error text. db_default lets
    # the raw INSERTs of enqueue leave it out.
    exception_class_path = models.CharField(max_length=255, blank=True, default="", db_default="")
    result = models.JSONField(null=True, blank=True)
    # A cancel of the running job was asked for (jobs.cancel()): its handler sees it
    # through jobs.current(), and if it then raises, the row ends cancelled.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=150, blank=True, default="", db_default="")
    cancel_reason = models.TextField(blank=True, default="", db_default="")
    snoozes = models.PositiveIntegerField(
        default=0, db_default=0, help_text="How many times its handler asked to run later."
    )
    # {"done", "total", "message", "at"}: written by the worker's heartbeat and at completion.
    progress = models.JSONField(null=True, blank=True)
    # Flow control: the limit_by value of the payload, computed at enqueue; "" for a
    # job without limit_by (its limits, if any, apply to the name as a whole).
    limit_key = ExactCharField(
        max_length=MAX_LIMIT_KEY_LENGTH, blank=True, default="", db_default="", editable=False
    )
    # Fair shares: the fair_by value of the payload (or using(fair_key=...)), computed at
    # enqueue; "" for a job without one. A queue's keys take turns at its claims.
    fair_key = ExactCharField(
        max_length=MAX_LIMIT_KEY_LENGTH, blank=True, default="", db_default="", editable=False
    )
    # The dynamic schedule (CronSchedule.objects.create_dynamic) this row is an occurrence
    # or a manual run of; "" for every other row. Its occurrences carry the name of the job
    # they run, so two schedules of one job tell their rows apart by this column.
    schedule = ExactCharField(
        "dynamic schedule",
        max_length=MAX_NAME_LENGTH,
        blank=True,
        default="",
        db_default="",
        editable=False,
    )
    # Workflows (jobs.chain, jobs.group, using(after=...)): a blocked job is pending but
    # never claimed, until its last upstream job succeeded (``waiting_for`` counts those
    # left) or, for a group's callback, until its batch finished. ``has_downstream`` tells
    # the completion of a job that it has blocked jobs to release; ``batch`` is the group
    # a member belongs to.
    blocked = models.BooleanField(
        default=False, db_default=False, help_text="Waits for its upstream jobs or its batch."
    )
    waiting_for = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    has_downstream = models.BooleanField(default=False, db_default=False, editable=False)
    batch = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="members",
        help_text="The group (jobs.group) this job is a member of.",
    )
    traceparent = models.CharField(
        max_length=MAX_TRACEPARENT_LENGTH,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="The W3C traceparent of the span that enqueued it (OpenTelemetry); "
        "its run continues that trace.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["-id"]
        indexes = [
            # The claim query: WHERE status = 'pending' AND NOT blocked AND run_at <= now
            # ORDER BY priority DESC, run_at, id (blocked rows are never walked).
            models.Index(
                fields=["status", "blocked", "-priority", "run_at", "id"],
                name="cronqueue_job_claim",
            ),
            # Running rows (few): the expired-lease scan reads them all and filters on
            # locked_until, the running list orders them by start. locked_until is left
            # out: a lease renewal then changes no indexed column, so on PostgreSQL it is
            # a HOT update that writes no index entry.
            models.Index(fields=["status", "started_at"], name="cronqueue_job_running"),
            # Pruning: WHERE status = 'succeeded' AND finished_at < cutoff.
            models.Index(fields=["status", "finished_at"], name="cronqueue_job_finished"),
            models.Index(fields=["queue", "status"], name="cronqueue_job_queue"),
            # A name's rows per status; with queue, the metrics' rows per status, name and
            # queue are counted from this index alone (an index-only scan).
            models.Index(fields=["name", "status", "queue"], name="cronqueue_job_name"),
            models.Index(fields=["dedupe_key"], name="cronqueue_job_dedupe_key"),
            # Flow control: running rows per (name, limit_key), counted by the claim.
            models.Index(fields=["status", "name", "limit_key"], name="cronqueue_job_flow"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["name", "active_dedupe_key"], name="cronqueue_job_unique_active_dedupe"
            ),
            # One row per occurrence: of a code schedule (name, scheduled_for, ""), and of
            # each dynamic schedule of a job (job name, scheduled_for, schedule name). ""
            # rather than NULL for the others: NULLs never collide.
            models.UniqueConstraint(
                fields=["name", "scheduled_for", "schedule"],
                name="cronqueue_job_unique_schedule_occurrence",
            ),
            models.UniqueConstraint(
                fields=["name", "window_dedupe_key"], name="cronqueue_job_unique_window_dedupe"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk} ({self.status})"

    def retry(self, *, now: dt.datetime | None = None) -> bool:
        """Failed or cancelled -> pending, due now, attempts reset. False if not applicable."""
        return verbs().retry_job(self, now=now)

    def cancel(self, *, reason: str = "", by: str = "", now: dt.datetime | None = None) -> bool:
        """Pending -> cancelled; running -> a cancel is requested from its handler.
        False when the job has already finished (nothing changes)."""
        return verbs().cancel_job(self, reason=reason, by=by, now=now)

    def run_now(self, *, now: dt.datetime | None = None) -> bool:
        """Pending -> due now. False if the job is not pending any more."""
        return verbs().run_job_now(self, now=now)

    def decrypted_payload(self) -> dict[str, Any]:
        """The payload with its sensitive values in clear (``@jobs.job(sensitive=...)``),
        as stored otherwise (typed values tagged). Raises ``DecryptionError`` for a value
        no key of ``CRONQUEUE["ENCRYPTION_KEYS"]`` decrypts, or one erased (its job
        ended)."""
        payload = self.payload if isinstance(self.payload, dict) else {}
        return encryption.decrypt_payload(payload, f"Job {self.name} #{self.pk}")


class Batch(models.Model):
    """A group of jobs (``jobs.group``): how many of its members succeeded and failed
    (for good, or cancelled), when the last one finished, and its callbacks: ``then_job``
    runs once every member succeeded, ``finally_job`` once every member finished."""

    id = models.BigAutoField(primary_key=True)
    size = models.PositiveIntegerField()
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(
        default=0, help_text="Members that failed for good or were cancelled."
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    then_job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="batch_then"
    )
    finally_job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="batch_finally"
    )

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["-id"]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"Batch #{self.pk} ({self.succeeded + self.failed}/{self.size} finished)"

    @property
    def pending(self) -> int:
        """Members not finished yet."""
        return self.size - self.succeeded - self.failed

    @property
    def member_ids(self) -> list[int]:
        """The ids of its members, in order (read from the database when asked)."""
        return list(self.members.order_by("id").values_list("id", flat=True))

    def results(self) -> dict[int, Any]:
        """The return value of each succeeded member, by job id."""
        rows = self.members.filter(status=JobStatus.SUCCEEDED).order_by("id")
        return dict(rows.values_list("id", "result"))


class JobDependency(models.Model):
    """``downstream`` waits until ``upstream`` succeeded (``jobs.chain``,
    ``using(after=...)``)."""

    upstream = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="downstream_links")
    downstream = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="upstream_links")

    class Meta:
        app_label = "django_cronqueue"
        constraints = [
            models.UniqueConstraint(
                fields=["upstream", "downstream"], name="cronqueue_dependency_unique"
            )
        ]

    def __str__(self) -> str:
        return f"#{self.downstream_id} after #{self.upstream_id}"


class Worker(models.Model):
    """A running ``runjobs`` process, kept alive by its heartbeat."""

    id = models.CharField(max_length=100, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True)
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)
    clock_offset = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds this host's clock runs ahead of the database's, at the last heartbeat.",
    )
    job_names = models.JSONField(
        null=True,
        blank=True,
        help_text="The job names its code defines (null: not recorded, as by older versions).",
    )

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.id


class NameLock(models.Model):
    """One row per job name with a ``concurrency=`` cap.

    Claimers of a capped name lock its row (SELECT ... FOR UPDATE) so that
    counting the running rows and claiming more is one atomic step.
    """

    name = models.CharField(max_length=MAX_NAME_LENGTH, primary_key=True)

    class Meta:
        app_label = "django_cronqueue"

    def __str__(self) -> str:
        return self.name


class FlowLock(models.Model):
    """One row per (job name, limit key) of a job with ``limit_by`` or ``rate_limit``.

    Claimers of those jobs lock the rows of the keys they mean to claim, in a stable
    order, so that counting the key's running rows and recent starts and claiming more
    is one atomic step. ``blocked_until`` is when a key saturated by its rate limit can
    start again: the claim's candidate query skips the key until then (a hint; the
    count under the lock decides)."""

    name = ExactCharField(max_length=MAX_NAME_LENGTH)
    limit_key = ExactCharField(max_length=MAX_LIMIT_KEY_LENGTH, blank=True, default="")
    blocked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_cronqueue"
        constraints = [
            models.UniqueConstraint(fields=["name", "limit_key"], name="cronqueue_flowlock_key")
        ]
        indexes = [models.Index(fields=["blocked_until"], name="cronqueue_flowlock_blocked")]

    def __str__(self) -> str:
        return f"{self.name} [{self.limit_key}]"


class JobStart(models.Model):
    """One row per claim of a job with ``rate_limit``: the log a rate limit counts in
    (``Job.started_at`` is overwritten by a retry). Pruned past the longest window."""

    id = models.BigAutoField(primary_key=True)
    name = ExactCharField(max_length=MAX_NAME_LENGTH)
    limit_key = ExactCharField(max_length=MAX_LIMIT_KEY_LENGTH, blank=True, default="")
    started_at = models.DateTimeField()

    class Meta:
        app_label = "django_cronqueue"
        indexes = [
            models.Index(
                fields=["name", "limit_key", "started_at"], name="cronqueue_jobstart_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.limit_key}] at {self.started_at}"


class Pause(models.Model):
    """A paused queue or job name: no worker claims its pending jobs while the pause
    holds (until it is deleted by a resume, or ``until`` passes). Exactly one of
    ``queue`` and ``name`` is set."""

    queue = ExactCharField(max_length=MAX_QUEUE_LENGTH, blank=True, default="")
    name = ExactCharField("job name", max_length=MAX_NAME_LENGTH, blank=True, default="")
    until = models.DateTimeField(
        null=True, blank=True, help_text="The pause ends by itself at this instant."
    )
    reason = models.TextField(blank=True, default="")
    created_by = models.CharField("paused by", max_length=150, blank=True, default="")
    created_at = models.DateTimeField("paused at", default=timezone.now)

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["queue", "name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="cronqueue_pause_unique"),
            models.CheckConstraint(
                condition=(models.Q(queue="") & ~models.Q(name=""))
                | (~models.Q(queue="") & models.Q(name="")),
                name="cronqueue_pause_queue_or_name",
            ),
        ]

    def __str__(self) -> str:
        return f"queue {self.queue}" if self.queue else f"job {self.name}"

    def holds(self, now: dt.datetime) -> bool:
        return self.until is None or self.until > now


class CronScheduleManager(models.Manager["CronSchedule"]):
    def create_dynamic(
        self,
        *,
        name: str,
        job: str | JobDefinition,
        expression: str,
        payload: dict[str, Any] | None = None,
        tz: str | None = None,
        catch_up: str = "latest",
        catch_up_window: dt.timedelta | float | None = None,
        max_catch_up: int = DEFAULT_MAX_CATCH_UP,
        overlap: str = "allow",
        retries: int | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> CronSchedule:
        """A schedule made at run time: ``job`` (a ``@jobs.job`` name or handle) runs with
        ``payload`` as keyword arguments at every occurrence of ``expression`` in ``tz``.
        Armed at its creation: nothing earlier fires."""
        return verbs().create_dynamic_schedule(
            name=name,
            job=job,
            payload=payload,
            expression=expression,
            tz=tz,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            max_catch_up=max_catch_up,
            overlap=overlap,
            retries=retries,
            queue=queue,
            priority=priority,
        )


class CronScheduleSource(models.TextChoices):
    CODE = "code", "Code (@jobs.cron)"
    DYNAMIC = "dynamic", "Dynamic (created at run time)"


class CronSchedule(models.Model):
    """The stored state of a cron schedule: a ``@jobs.cron`` one (``source`` "code") or
    one created at run time by ``CronSchedule.objects.create_dynamic`` ("dynamic").

    For a code schedule the code is the source of truth for ``expression``, ``tz`` and
    ``options``; this row keeps what the code cannot: the ``cursor`` (the instant up to
    which occurrences have been considered), whether it is paused, and whether its code
    still exists. A dynamic schedule's row is its whole definition: the ``job`` it runs
    (a ``@jobs.job``), its ``payload``, and the same when and options.
    """

    Source = CronScheduleSource

    name = models.CharField(max_length=MAX_NAME_LENGTH, unique=True)
    source = models.CharField(
        max_length=8,
        choices=CronScheduleSource.choices,
        default=CronScheduleSource.CODE,
        db_default=CronScheduleSource.CODE,
        editable=False,
    )
    job = ExactCharField(
        max_length=MAX_NAME_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="The @jobs.job a dynamic schedule runs; empty for a code schedule.",
    )
    payload = models.JSONField(
        default=dict, blank=True, help_text="A dynamic schedule's keyword arguments."
    )
    expression = models.CharField(max_length=MAX_EXPRESSION_LENGTH)
    tz = models.CharField("time zone", max_length=MAX_ZONE_NAME_LENGTH)
    options = models.JSONField(default=dict, blank=True)
    cursor = models.DateTimeField(
        null=True, blank=True, help_text="Occurrences up to this instant have been considered."
    )
    last_occurrence = models.DateTimeField(null=True, blank=True)
    next_run = models.DateTimeField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    active = models.BooleanField(default=True, help_text="False when no code defines it.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = CronScheduleManager()

    class Meta:
        app_label = "django_cronqueue"
        ordering = ["name"]
        verbose_name = "cron schedule"
        indexes = [
            # Every tick: WHERE active AND NOT paused AND next_run <= now.
            models.Index(fields=["active", "paused", "next_run"], name="cronqueue_schedule_due"),
            # Syncing with the code reads the code rows only, whatever the dynamic ones.
            models.Index(fields=["source", "name"], name="cronqueue_schedule_source"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.expression} {self.tz})"

    @property
    def is_dynamic(self) -> bool:
        return self.source == CronScheduleSource.DYNAMIC

    def run_now(self) -> Job:
        """Enqueue one manual run at once; the schedule itself is not disturbed."""
        return verbs().run_schedule_now(self)

    def backfill(self, start: dt.datetime, end: dt.datetime) -> int:
        """Create the occurrences in ``[start, end)`` that have no row yet (at most 1,000)."""
        return verbs().backfill_schedule(self, start, end)

    def pause(self) -> bool:
        """Stop materializing occurrences. False if it was already paused."""
        return verbs().set_schedule_paused(self, True)

    def resume(self) -> bool:
        """Materialize again, by the catch-up policy. False if it was not paused."""
        return verbs().set_schedule_paused(self, False)

    def edit(self, **changes: Any) -> None:
        """Change a dynamic schedule (its job, payload, expression, tz or options); an
        edit of the expression or the zone re-arms it now. Refused for code schedules."""
        verbs().edit_schedule(self, changes)

    def delete(self, using: Any = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete a dynamic schedule: no occurrence after this; its rows stay. Refused
        for code schedules (their rows follow the code)."""
        return verbs().delete_schedule(self)


class ModelVerbs(Protocol):
    """What the models' verbs do, implemented by
    ``django_cronqueue.operations.model_methods.Verbs``."""

    def retry_job(self, job: Job, *, now: dt.datetime | None) -> bool: ...
    def cancel_job(self, job: Job, *, reason: str, by: str, now: dt.datetime | None) -> bool: ...
    def run_job_now(self, job: Job, *, now: dt.datetime | None) -> bool: ...
    def run_schedule_now(self, schedule: CronSchedule) -> Job: ...
    def backfill_schedule(
        self, schedule: CronSchedule, start: dt.datetime, end: dt.datetime
    ) -> int: ...
    def set_schedule_paused(self, schedule: CronSchedule, paused: bool) -> bool: ...
    def create_dynamic_schedule(self, **definition: Any) -> CronSchedule: ...
    def edit_schedule(self, schedule: CronSchedule, changes: dict[str, Any]) -> None: ...
    def delete_schedule(self, schedule: CronSchedule) -> tuple[int, dict[str, int]]: ...


def verbs() -> ModelVerbs:
    """The implementation that ``AppConfig.ready()`` attached to this app's config."""
    return cast(ModelVerbs, apps.get_app_config("django_cronqueue").verbs)  # type: ignore[attr-defined]
