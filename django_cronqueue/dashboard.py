"""Read-only queries behind the admin: status counts, filter choices, row estimates and
the dashboard (hourly outcomes, queue depth, oldest pending job, live workers, next runs).

Every function here reads; none changes a row. Each is one query (or a fixed handful),
whatever the number of rows, so the admin stays fast on a table of millions of jobs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import TruncHour
from django.utils import timezone

from . import cron
from .conf import database_alias, get_settings
from .models import CronSchedule, Job, JobStatus, Worker

UTC = dt.timezone.utc

#: Above this many rows (by the database's own statistics) an unfiltered job list shows
#: an estimated count instead of running COUNT(*) over the whole table.
ESTIMATE_ABOVE = 100_000
#: Counts (per status, and of a filtered list) stop at this many rows: "more than 100,000".
COUNT_CAP = 100_000
#: At most this many distinct names or queues are offered as filter choices.
MAX_CHOICES = 200
#: A worker is live when its heartbeat was seen within this many leases.
LIVE_WORKER_LEASES = 3
HOURS = 24
ZERO = dt.timedelta(0)
ONE_HOUR = dt.timedelta(hours=1)


def jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(database_alias())


# --- the job list -------------------------------------------------------------------


def status_counts(queryset: QuerySet[Job] | None = None) -> dict[str, int]:
    """Rows per status, exactly, every status present (0 when none): one GROUP BY query
    (COUNT(*), which PostgreSQL answers with an index-only scan of an index on status)."""
    queryset = jobs() if queryset is None else queryset
    counts = dict.fromkeys(JobStatus.values, 0)
    for status, n in queryset.order_by().values_list("status").annotate(n=Count("*")):
        counts[status] = n
    return counts


def capped_status_counts(
    queryset: QuerySet[Job] | None = None, cap: int | None = None
) -> tuple[dict[str, int], set[str]]:
    """Rows per status, counting at most ``cap`` rows of each: one query of one
    ``SELECT COUNT(*) FROM (... WHERE status = %s LIMIT cap + 1)`` per status, joined by
    UNION ALL. Each part reads at most ``cap + 1`` entries of an index on status, so
    the cost is bounded whatever the size of the table. Returns the counts and the
    statuses that have more than ``cap`` rows (their count is then ``cap``)."""
    cap = COUNT_CAP if cap is None else cap
    queryset = (jobs() if queryset is None else queryset).order_by()
    connection = connections[queryset.db]
    parts, params = [], []
    for index, status in enumerate(JobStatus.values):
        inner = queryset.filter(status=status).values("pk")[: cap + 1]
        sql, inner_params = inner.query.get_compiler(using=queryset.db).as_sql()
        alias = connection.ops.quote_name(f"capped_{index}")
        parts.append(f"SELECT %s, COUNT(*) FROM ({sql}) {alias}")
        params += [status, *inner_params]
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
        params: list[Any] = [connection.ops.quote_name(table)]
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


# --- cron schedules -----------------------------------------------------------------


def with_last_occurrence(queryset: QuerySet[CronSchedule]) -> QuerySet[CronSchedule]:
    """Annotate each schedule with the id and status of its last occurrence's job row
    (``last_job_id``, ``last_job_status``): two correlated subqueries on the unique
    (name, scheduled_for) index, no query per row."""
    occurrence = Job.objects.filter(
        name=OuterRef("name"), scheduled_for=OuterRef("last_occurrence")
    ).order_by()
    return queryset.annotate(
        last_job_id=Subquery(occurrence.values("pk")[:1]),
        last_job_status=Subquery(occurrence.values("status")[:1]),
    )


def describe_expression(expression: str) -> str:
    """``"30 2 * * 1-5"`` -> ``"At 02:30, Monday through Friday"``; '' if it cannot."""
    from cron_descriptor import Options, get_description

    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    text = cron.ALIASES.get(expression.strip().lower(), expression)
    try:
        return str(get_description(text, options))
    except Exception:  # any expression cron-descriptor cannot read: show the raw one
        return ""


def next_runs(schedule: CronSchedule, now: dt.datetime, count: int = 5) -> list[dt.datetime]:
    """The next ``count`` occurrences after ``now``, in the schedule's own zone."""
    try:
        zone = cron.load_zone(schedule.tz)
        instants = cron.next_occurrences(schedule.expression, zone, now, count)
    except (cron.InvalidCronExpression, cron.InvalidTimeZone):
        return []
    return [instant.astimezone(zone) for instant in instants]


@dataclass
class ScheduleRow:
    schedule: CronSchedule
    description: str
    next_runs: list[dt.datetime]


def schedule_overview(now: dt.datetime, count: int = 3) -> list[ScheduleRow]:
    """Every schedule with its description and next runs (one query)."""
    rows = with_last_occurrence(schedules().order_by("name"))
    return [
        ScheduleRow(
            schedule=row,
            description=describe_expression(row.expression),
            next_runs=next_runs(row, now, count) if row.active else [],
        )
        for row in rows
    ]


# --- the dashboard ------------------------------------------------------------------


@dataclass
class Bar:
    hour: dt.datetime
    succeeded: int
    failed: int
    x: float = 0
    succeeded_y: float = 0
    succeeded_height: float = 0
    failed_y: float = 0
    failed_height: float = 0
    width: float = 0
    slot_width: float = 0
    label: str = ""


@dataclass
class NameSeries:
    name: str
    bars: list[Bar]
    succeeded: int = 0
    failed: int = 0
    peak: int = 0
    defined: bool = True


@dataclass
class Chart:
    """Geometry for the server-rendered SVG bar charts (numbers only; the template
    escapes every text)."""

    width: int = 480
    height: int = 64
    bar_width: float = 0
    hours: list[dt.datetime] = field(default_factory=list)
    series: list[NameSeries] = field(default_factory=list)


def hour_floor(instant: dt.datetime) -> dt.datetime:
    return instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hourly_outcomes(now: dt.datetime, hours: int = HOURS, max_names: int = 50) -> Chart:
    """Per job name, runs that succeeded and failed in each of the last ``hours`` hours
    (the current hour included), by ``finished_at``: one GROUP BY query."""
    from .registry import registry

    first = hour_floor(now) - dt.timedelta(hours=hours - 1)
    slots = [first + dt.timedelta(hours=i) for i in range(hours)]
    rows = (
        jobs()
        .filter(
            status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED],
            finished_at__gte=first,
            finished_at__lte=now,
        )
        .order_by()
        .annotate(hour=TruncHour("finished_at", tzinfo=UTC))
        .values_list("name", "status", "hour")
        .annotate(n=Count("pk"))
    )
    by_name: dict[str, dict[dt.datetime, list[int]]] = {}
    for name, status, hour, n in rows:
        hour = hour_floor(timezone.make_aware(hour, UTC) if timezone.is_naive(hour) else hour)
        cell = by_name.setdefault(name, {}).setdefault(hour, [0, 0])
        cell[0 if status == JobStatus.SUCCEEDED else 1] += n
    chart = Chart(hours=slots)
    chart.bar_width = chart.width / hours
    series = []
    for name, cells in by_name.items():
        # each cell is exactly [succeeded, failed]
        bars = [Bar(slot, *cells.get(slot, [0, 0])) for slot in slots]  # type: ignore[arg-type]
        line = NameSeries(name=name, bars=bars, defined=name in registry)
        line.succeeded = sum(bar.succeeded for bar in bars)
        line.failed = sum(bar.failed for bar in bars)
        line.peak = max(bar.succeeded + bar.failed for bar in bars)
        series.append(line)
    # The busiest names first; the rest are summed up by the template's caller.
    series.sort(key=lambda line: (-(line.succeeded + line.failed), line.name))
    for line in series[:max_names]:
        _layout(chart, line)
    chart.series = series[:max_names]
    return chart


def _layout(chart: Chart, line: NameSeries) -> None:
    usable = chart.height - 2
    for index, bar in enumerate(line.bars):
        local = timezone.localtime(bar.hour)
        bar.label = f"{local:%a %H:%M}-{timezone.localtime(bar.hour + ONE_HOUR):%H:%M}"
        bar.x = round(index * chart.bar_width, 2)
        bar.slot_width = round(chart.bar_width, 2)
        bar.width = round(max(chart.bar_width - 2, 1), 2)
        scale = usable / line.peak if line.peak else 0
        bar.succeeded_height = round(bar.succeeded * scale, 2)
        bar.failed_height = round(bar.failed * scale, 2)
        if bar.succeeded and bar.succeeded_height < 1:
            bar.succeeded_height = 1
        if bar.failed and bar.failed_height < 1:
            bar.failed_height = 1
        bar.failed_y = round(chart.height - bar.failed_height, 2)
        bar.succeeded_y = round(bar.failed_y - bar.succeeded_height, 2)


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
    """Pending (due now / later) and running rows per queue: one GROUP BY query."""
    rows = (
        jobs()
        .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .order_by()
        .values_list("queue", "status")
        .annotate(n=Count("pk"), due=Count("pk", filter=Q(run_at__lte=now)))
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


@dataclass
class OldestPending:
    id: int
    name: str
    run_at: dt.datetime
    age: dt.timedelta


def oldest_pending(now: dt.datetime) -> OldestPending | None:
    """The pending job that has been due the longest (None when nothing is due)."""
    row = (
        jobs()
        .filter(status=JobStatus.PENDING, run_at__lte=now)
        .order_by("run_at", "pk")
        .values_list("pk", "name", "run_at")
        .first()
    )
    if row is None:
        return None
    return OldestPending(id=row[0], name=row[1], run_at=row[2], age=now - row[2])


@dataclass
class LiveWorker:
    worker: Worker
    running: int
    seen_ago: dt.timedelta


def live_workers(now: dt.datetime) -> tuple[list[LiveWorker], int]:
    """Workers whose heartbeat was seen within ``LIVE_WORKER_LEASES`` leases, with the
    jobs each is running, and how many worker rows have gone silent: three queries."""
    cutoff = now - dt.timedelta(seconds=LIVE_WORKER_LEASES * get_settings().LEASE)
    workers = Worker.objects.using(database_alias())
    live = list(workers.filter(last_seen__gte=cutoff).order_by("hostname", "pid", "id"))
    silent = workers.filter(last_seen__lt=cutoff).count()
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
    ], silent


def failed_since(now: dt.datetime, hours: int = HOURS) -> int:
    """Jobs that failed in the last ``hours`` hours (the "failed recently" filter)."""
    return (
        jobs()
        .filter(status=JobStatus.FAILED, finished_at__gte=now - dt.timedelta(hours=hours))
        .count()
    )


__all__ = [
    "ESTIMATE_ABOVE",
    "Bar",
    "Chart",
    "LiveWorker",
    "NameSeries",
    "OldestPending",
    "QueueDepth",
    "ScheduleRow",
    "capped_count",
    "capped_status_counts",
    "describe_expression",
    "distinct_values",
    "estimated_count",
    "failed_since",
    "hourly_outcomes",
    "live_workers",
    "next_runs",
    "oldest_pending",
    "queue_depths",
    "schedule_overview",
    "status_counts",
    "with_last_occurrence",
]
