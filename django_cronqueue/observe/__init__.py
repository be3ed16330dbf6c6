"""The read model: every fact about the queue that a screen or a probe shows.

Counts per status and name (exact without counting the history: ``counts``; or capped
so that they stay cheap on millions of rows),
the oldest due pending job, the workers and which of them are live, the cron schedules
with their next runs and whether they are overdue (the code schedules and a bounded
choice of the dynamic ones, with the counts of all), queue depths, the outcomes of each
hour, and the control of running work (``control``: running jobs with their progress and
cancel requests, the pauses of queues and job names), and workflows (``workflows``: a
batch's members per status, the jobs a job waits for and those waiting for it). The
admin (its job list, schedule list, batch pages and dashboard), ``cronqueue_status`` and
``cronqueue_schedules`` all read these functions, so they cannot disagree.

Every function here reads; none changes a row. Each is one query (or a fixed handful),
whatever the number of rows. A ``now`` is always passed in, never read here, so callers
(and tests) decide the instant every fact is computed for.

May import ``history``, ``models``, ``definitions``, ``cron`` and ``conf``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from ..definitions.registry import registry
from ..models import Job, JobStatus, Worker
from .base import (
    COUNT_CAP,
    DEFAULT_SCHEDULE_GRACE,
    ESTIMATE_ABOVE,
    HOURS,
    LIVE_WORKER_LEASES,
    MAX_CHOICES,
    UTC,
    ZERO,
    cron_definitions,
    cron_spec,
    due_jobs,
    from_read_database,
    jobs,
    live_window,
    read_alias,
    schedules,
)

if TYPE_CHECKING:
    from .control import (
        RUNNING_SHOWN,
        PauseState,
        PauseTarget,
        PauseTargets,
        Progress,
        RunningJob,
        held_by_pause,
        number,
        pause_targets,
        pauses,
        pauses_holding,
        progress_of,
        running_jobs,
    )
    from .counts import job_counts, status_totals
    from .cron_schedules import (
        SOONEST_SHOWN,
        STATUSES_SHOWN,
        ScheduleCounts,
        ScheduleOverview,
        ScheduleRow,
        ScheduleStatus,
        ScheduleStatuses,
        describe_dynamic_schedule,
        describe_expression,
        describe_inactive_schedule,
        describe_schedule,
        describe_schedules,
        next_runs,
        schedule_counts,
        schedule_overview,
        schedule_statuses,
        soonest_dynamic,
        with_last_occurrence,
    )
    from .stranded import STRANDED_SHOWN, StrandedName, defined_names, mark_stranded, stranded_names
    from .workflows import (
        LINKS_SHOWN,
        BatchState,
        CallbackOf,
        JobRef,
        Linked,
        WorkflowLinks,
        batch_progress,
        batch_state,
        downstream_jobs,
        upstream_jobs,
        with_workflow_links,
        workflow_links,
    )

__all__ = [
    "COUNT_CAP",
    "DEFAULT_SCHEDULE_GRACE",
    "ESTIMATE_ABOVE",
    "HOURS",
    "LINKS_SHOWN",
    "LIVE_WORKER_LEASES",
    "MAX_CHOICES",
    "RUNNING_SHOWN",
    "SOONEST_SHOWN",
    "STATUSES_SHOWN",
    "STRANDED_SHOWN",
    "UTC",
    "ZERO",
    "BatchState",
    "CallbackOf",
    "HourOutcomes",
    "HourlyOutcomes",
    "JobRef",
    "Linked",
    "LiveWorker",
    "NameOutcomes",
    "OldestPending",
    "PauseState",
    "PauseTarget",
    "PauseTargets",
    "Progress",
    "QueueDepth",
    "RunningJob",
    "ScheduleCounts",
    "ScheduleOverview",
    "ScheduleRow",
    "ScheduleStatus",
    "ScheduleStatuses",
    "StrandedName",
    "WorkerStatus",
    "WorkflowLinks",
    "batch_progress",
    "batch_state",
    "capped_count",
    "capped_status_counts",
    "counts_per_status_and_name",
    "cron_definitions",
    "cron_spec",
    "defined_names",
    "describe_dynamic_schedule",
    "describe_expression",
    "describe_inactive_schedule",
    "describe_schedule",
    "describe_schedules",
    "distinct_values",
    "downstream_jobs",
    "estimated_count",
    "failed_since",
    "from_read_database",
    "held_by_pause",
    "hour_floor",
    "hourly_outcomes",
    "job_counts",
    "jobs",
    "live_window",
    "live_workers",
    "mark_stranded",
    "next_runs",
    "number",
    "oldest_pending",
    "oldest_pending_by_queue",
    "pause_targets",
    "pauses",
    "pauses_holding",
    "progress_of",
    "queue_depths",
    "read_alias",
    "running_jobs",
    "schedule_counts",
    "schedule_overview",
    "schedule_statuses",
    "schedules",
    "soonest_dynamic",
    "status_counts",
    "status_totals",
    "stranded_names",
    "upstream_jobs",
    "with_last_occurrence",
    "with_workflow_links",
    "workers",
    "workflow_links",
]

# Each topic loads when one of its names is first asked for (``observe.running_jobs``,
# ``from ..observe import StrandedName``): a process reading ``stranded`` alone (the
# scheduler) does not pay for the admin's topics.
_TOPICS = {
    "control": (
        "RUNNING_SHOWN PauseState PauseTarget PauseTargets Progress RunningJob "
        "held_by_pause number pause_targets pauses pauses_holding progress_of "
        "running_jobs"
    ),
    "counts": "finished_per_hour job_counts status_totals",
    "cron_schedules": (
        "SOONEST_SHOWN STATUSES_SHOWN ScheduleCounts ScheduleOverview ScheduleRow "
        "ScheduleStatus ScheduleStatuses describe_dynamic_schedule describe_expression "
        "describe_inactive_schedule describe_schedule describe_schedules next_runs "
        "schedule_counts schedule_overview schedule_statuses soonest_dynamic "
        "with_last_occurrence"
    ),
    "stranded": "STRANDED_SHOWN StrandedName defined_names mark_stranded stranded_names",
    "workflows": (
        "LINKS_SHOWN BatchState CallbackOf JobRef Linked WorkflowLinks batch_progress "
        "batch_state downstream_jobs upstream_jobs with_workflow_links workflow_links"
    ),
}
_LAZY = {name: topic for topic, names in _TOPICS.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    topic = _LAZY.get(name)
    if topic == "control":
        from . import control

        return getattr(control, name)
    if topic == "counts":
        from . import counts

        return getattr(counts, name)
    if topic == "cron_schedules":
        from . import cron_schedules

        return getattr(cron_schedules, name)
    if topic == "stranded":
        from . import stranded

        return getattr(stranded, name)
    if topic == "workflows":
        from . import workflows

        return getattr(workflows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- counts -------------------------------------------------------------------------


def status_counts(queryset: QuerySet[Job] | None = None) -> dict[str, int]:
    """Rows per status, exactly, every status present (0 when none): one GROUP BY query."""
    queryset = jobs() if queryset is None else queryset
    counts = dict.fromkeys(JobStatus.values, 0)
    for status, n in queryset.order_by().values_list("status").annotate(n=Count("*")):
        counts[status] = n
    return counts


def counts_per_status_and_name() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Rows per status (every status present) and per name and status (only the statuses
    a name has), exactly, without counting the history (``observe.counts``)."""
    from .counts import job_counts, status_totals

    counts = job_counts()
    by_name: dict[str, dict[str, int]] = {}
    for (status, name, _), n in counts.items():
        statuses = by_name.setdefault(name, {})
        statuses[status] = statuses.get(status, 0) + n
    return status_totals(counts), dict(sorted(by_name.items()))


def capped_status_counts(
    queryset: QuerySet[Job] | None = None, cap: int | None = None
) -> tuple[dict[str, int], set[str]]:
    """Rows per status, counting at most ``cap`` rows of each: one query of one
    ``SELECT COUNT(*) FROM (... WHERE status = %s LIMIT cap + 1)`` per status, joined by
    UNION ALL, so the cost is bounded whatever the size of the table. Returns the counts
    and the statuses that have more than ``cap`` rows (their count is then ``cap``)."""
    cap = COUNT_CAP if cap is None else cap
    queryset = (jobs() if queryset is None else queryset).order_by()
    connection = connections[queryset.db]
    parts, params = [], []
    for index, status in enumerate(JobStatus.values):
        inner = queryset.filter(status=status).values("pk")[: cap + 1]
        try:
            sql, inner_params = inner.query.get_compiler(using=queryset.db).as_sql()
        except EmptyResultSet:  # a filter no row can match (queryset.none(), pk__in=[])
            continue
        alias = connection.ops.quote_name(f"capped_{index}")
        parts.append(f"SELECT %s, COUNT(*) FROM ({sql}) {alias}")
        params += [status, *inner_params]
    rows = []
    if parts:
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), params)
            rows = cursor.fetchall()
    counts = dict.fromkeys(JobStatus.values, 0)
    capped = set()
    for status, n in rows:
        if n > cap:
            capped.add(status)
            n = cap
        counts[status] = n
    return counts, capped


def capped_count(queryset: QuerySet[Any], cap: int | None = None) -> tuple[int, bool]:
    """``min(count, cap)`` and whether there are more: reads at most ``cap + 1`` rows."""
    cap = COUNT_CAP if cap is None else cap
    n = queryset.order_by().values("pk")[: cap + 1].count()
    return (cap, True) if n > cap else (n, False)


def estimated_count(queryset: QuerySet[Any]) -> int | None:
    """The database's own estimate of the rows of an *unfiltered* queryset's table:
    ``pg_class.reltuples`` on PostgreSQL, ``information_schema.TABLES.TABLE_ROWS`` on
    MariaDB/MySQL. None when the queryset is filtered, on SQLite, or when the table
    has no statistics yet."""
    if queryset.query.where or queryset.query.is_sliced or queryset.query.distinct:
        return None
    connection = connections[queryset.db]
    table = queryset.model._meta.db_table
    if connection.vendor == "postgresql":
        sql = "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)"
        params: list[str] = [connection.ops.quote_name(table)]
    elif connection.vendor == "mysql":
        sql = (
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
        )
        params = [table]
    else:
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:  # -1: never analysed (PostgreSQL >= 14)
        return None
    return int(row[0])


def distinct_values(column: str, queryset: QuerySet[Job] | None = None) -> list[str]:
    """The distinct values of an indexed column of the job table, sorted, at most
    ``MAX_CHOICES``.

    On PostgreSQL a recursive query walks the index one value at a time (a "loose index
    scan"), so the cost grows with the number of distinct values, not of rows; MariaDB
    and MySQL do that by themselves for ``SELECT DISTINCT`` on an index prefix.
    """
    queryset = jobs() if queryset is None else queryset
    if column not in ("name", "queue"):
        raise ValueError(f"distinct_values() supports name and queue, not {column!r}")
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return list(
            queryset.order_by(column).values_list(column, flat=True).distinct()[:MAX_CHOICES]
        )
    quote = connection.ops.quote_name
    # name and queue are concrete columns, never a relation (checked above)
    table, col = quote(Job._meta.db_table), quote(Job._meta.get_field(column).column)  # type: ignore[union-attr,arg-type]
    sql = f"""
        WITH RECURSIVE walk(value, n) AS (
            (SELECT {col}, 1 FROM {table} ORDER BY {col} LIMIT 1)
            UNION ALL
            SELECT (SELECT {col} FROM {table} WHERE {col} > walk.value ORDER BY {col} LIMIT 1),
                   walk.n + 1
            FROM walk WHERE walk.value IS NOT NULL AND walk.n < %s
        )
        SELECT value FROM walk WHERE value IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [MAX_CHOICES])
        return [row[0] for row in cursor.fetchall()]


def failed_since(now: dt.datetime, hours: int = HOURS) -> int:
    """Jobs that failed in the last ``hours`` hours (the "failed recently" filter)."""
    since = now - dt.timedelta(hours=hours)
    return jobs().filter(status=JobStatus.FAILED, finished_at__gte=since).count()


# --- waiting work -------------------------------------------------------------------


@dataclass
class OldestPending:
    id: int
    name: str
    queue: str
    run_at: dt.datetime
    age_seconds: float

    @property
    def age(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.age_seconds)


def oldest_pending(now: dt.datetime, *, skip_paused: bool = False) -> OldestPending | None:
    """The due pending job that has waited the longest (None when nothing is due); with
    ``skip_paused``, among those no pause in force holds back (what workers may claim)."""
    from .control import held_by_pause

    due = due_jobs(now).exclude(held_by_pause(now)) if skip_paused else due_jobs(now)
    row = due.order_by("run_at", "pk").values_list("pk", "name", "queue", "run_at").first()
    if row is None:
        return None
    pk, name, queue, run_at = row
    return OldestPending(pk, name, queue, run_at, (now - run_at).total_seconds())


def oldest_pending_by_queue(now: dt.datetime) -> dict[str, float]:
    """Per queue, the age in seconds of its oldest due pending job: one GROUP BY query."""
    rows = due_jobs(now).order_by().values_list("queue").annotate(oldest=Min("run_at"))
    return {queue: (now - oldest).total_seconds() for queue, oldest in sorted(rows)}


@dataclass
class QueueDepth:
    queue: str
    due: int = 0
    later: int = 0
    running: int = 0

    @property
    def pending(self) -> int:
        return self.due + self.later


def queue_depths(now: dt.datetime) -> list[QueueDepth]:
    """Pending (due now / later: blocked ones wait) and running rows per queue: one
    GROUP BY query."""
    rows = (
        jobs()
        .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .order_by()
        .values_list("queue", "status")
        .annotate(n=Count("pk"), due=Count("pk", filter=Q(run_at__lte=now, blocked=False)))
    )
    depths: dict[str, QueueDepth] = {}
    for queue, status, n, due in rows:
        depth = depths.setdefault(queue, QueueDepth(queue))
        if status == JobStatus.RUNNING:
            depth.running += n
        else:
            depth.due += due
            depth.later += n - due
    return sorted(depths.values(), key=lambda depth: depth.queue)


# --- workers ------------------------------------------------------------------------


@dataclass
class WorkerStatus:
    id: str
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: dt.datetime
    last_seen: dt.datetime
    seen_seconds_ago: float
    alive: bool
    clock_offset: float | None = None  # seconds its clock runs ahead of the database's


def workers(now: dt.datetime, lease: float | None = None) -> list[WorkerStatus]:
    """Every worker row, the most recently seen first, each saying whether it is live."""
    window = live_window(lease)
    result = []
    for row in Worker.objects.using(read_alias()).order_by("-last_seen", "id"):
        ago = (now - row.last_seen).total_seconds()
        result.append(
            WorkerStatus(
                id=row.id,
                hostname=row.hostname,
                pid=row.pid,
                queues=list(row.queues or []),
                concurrency=row.concurrency,
                started_at=row.started_at,
                last_seen=row.last_seen,
                seen_seconds_ago=ago,
                alive=ago <= window,
                clock_offset=row.clock_offset,
            )
        )
    return result


@dataclass
class LiveWorker:
    worker: WorkerStatus
    running: int
    seen_ago: dt.timedelta


def live_workers(now: dt.datetime) -> tuple[list[LiveWorker], int]:
    """The live workers (by host and pid) with the jobs each is running, and how many
    worker rows have gone silent: two queries."""
    every = workers(now)
    live = sorted((w for w in every if w.alive), key=lambda w: (w.hostname, w.pid, w.id))
    running = dict(
        jobs()
        .filter(status=JobStatus.RUNNING, worker_id__in=[worker.id for worker in live])
        .order_by()
        .values_list("worker_id")
        .annotate(n=Count("pk"))
    )
    return [
        LiveWorker(worker=w, running=running.get(w.id, 0), seen_ago=max(now - w.last_seen, ZERO))
        for w in live
    ], len(every) - len(live)


# --- hourly outcomes ----------------------------------------------------------------


@dataclass
class HourOutcomes:
    hour: dt.datetime
    succeeded: int = 0
    failed: int = 0


@dataclass
class NameOutcomes:
    """One job name's runs that succeeded and failed, hour by hour."""

    name: str
    hours: list[HourOutcomes]
    defined: bool

    @property
    def succeeded(self) -> int:
        return sum(hour.succeeded for hour in self.hours)

    @property
    def failed(self) -> int:
        return sum(hour.failed for hour in self.hours)

    @property
    def peak(self) -> int:
        return max((hour.succeeded + hour.failed for hour in self.hours), default=0)


@dataclass
class HourlyOutcomes:
    hours: list[dt.datetime]
    names: list[NameOutcomes]


def hour_floor(instant: dt.datetime) -> dt.datetime:
    return instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hourly_outcomes(now: dt.datetime, hours: int = HOURS, max_names: int = 50) -> HourlyOutcomes:
    """Per job name, runs that succeeded and failed in each of the last ``hours`` hours
    (the current hour included), by ``finished_at``: the hours housekeeping keeps plus
    the rows finished since (``counts.finished_per_hour``). The busiest ``max_names``
    names, busiest first."""
    first = hour_floor(now) - dt.timedelta(hours=hours - 1)
    slots = [first + dt.timedelta(hours=i) for i in range(hours)]
    from .counts import finished_per_hour

    rows = finished_per_hour(first, now, [JobStatus.SUCCEEDED, JobStatus.FAILED])
    by_name: dict[str, dict[dt.datetime, HourOutcomes]] = {}
    for name, status, hour, n in rows:
        hour = hour_floor(timezone.make_aware(hour, UTC) if timezone.is_naive(hour) else hour)
        cell = by_name.setdefault(name, {slot: HourOutcomes(slot) for slot in slots}).get(hour)
        if cell is None:
            continue
        if status == JobStatus.SUCCEEDED:
            cell.succeeded += n
        else:
            cell.failed += n
    names = [
        NameOutcomes(name=name, hours=list(cells.values()), defined=name in registry)
        for name, cells in by_name.items()
    ]
    names.sort(key=lambda line: (-(line.succeeded + line.failed), line.name))
    return HourlyOutcomes(hours=slots, names=names[:max_names])
