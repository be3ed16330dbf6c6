"""The state of the queue at a glance: what ``manage.py cronqueue_status`` prints.

``collect(now)`` reads the database once per section and returns a ``StatusReport``:
job counts per status and name, the oldest due pending job, every cron schedule with
its next run and whether it is overdue, and the workers with their heartbeats.
``problems(report, ...)`` turns it into the reasons a health probe should fail.

A worker is *alive* when its ``Worker`` row was touched within ``3 x LEASE`` seconds:
a running ``runjobs`` renews it every ``LEASE / 3`` seconds (its heartbeat) and deletes
it when it stops; rows of crashed workers stay until pruned a day later.

A schedule is *overdue* when its next occurrence after the scheduler's cursor came
more than ``schedule_grace`` seconds ago: no scheduler has considered it since, so that
occurrence was never created (no ``runjobs`` with the scheduler is running, or it is
stuck). Paused and inactive schedules are never overdue.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from .conf import database_alias, get_settings
from .models import CronSchedule, Job, JobStatus, Worker

DEFAULT_MAX_PENDING_AGE = 300.0
DEFAULT_SCHEDULE_GRACE = 120.0
LIVE_WORKER_LEASES = 3


@dataclass
class OldestPending:
    id: int
    name: str
    queue: str
    run_at: dt.datetime
    age_seconds: float


@dataclass
class ScheduleStatus:
    name: str
    expression: str
    tz: str
    paused: bool
    active: bool
    defined: bool  # this process's code defines it
    cursor: dt.datetime | None
    last_occurrence: dt.datetime | None
    next_run: dt.datetime | None
    overdue: bool = False
    overdue_seconds: float = 0.0


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


@dataclass
class StatusReport:
    now: dt.datetime
    counts: dict[str, int]  # status -> rows
    counts_by_name: dict[str, dict[str, int]]  # name -> status -> rows
    oldest_pending: OldestPending | None  # the due pending row waiting longest
    oldest_pending_by_queue: dict[str, float]  # queue -> age in seconds
    schedules: list[ScheduleStatus]
    workers: list[WorkerStatus]
    lease: float
    schedule_grace: float
    problems: list[str] = field(default_factory=list)

    @property
    def live_workers(self) -> list[WorkerStatus]:
        return [worker for worker in self.workers if worker.alive]

    @property
    def overdue_schedules(self) -> list[ScheduleStatus]:
        return [schedule for schedule in self.schedules if schedule.overdue]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (datetimes as ISO 8601 strings)."""
        return _jsonable(asdict(self))


def collect(
    now: dt.datetime | None = None, *, schedule_grace: float = DEFAULT_SCHEDULE_GRACE
) -> StatusReport:
    """Read the state of the queue as of ``now`` (aware; default: the current time)."""
    if now is None:
        now = timezone.now()
    elif timezone.is_naive(now):
        raise ValueError("collect(now=...) needs an aware datetime.")
    lease = float(get_settings().LEASE)
    counts, by_name = _counts()
    oldest, by_queue = _oldest_pending(now)
    return StatusReport(
        now=now,
        counts=counts,
        counts_by_name=by_name,
        oldest_pending=oldest,
        oldest_pending_by_queue=by_queue,
        schedules=_schedules(now, schedule_grace),
        workers=_workers(now, lease),
        lease=lease,
        schedule_grace=schedule_grace,
    )


def problems(
    report: StatusReport,
    *,
    max_pending_age: float | None = DEFAULT_MAX_PENDING_AGE,
    min_workers: int = 1,
) -> list[str]:
    """Why a health check should fail, one sentence each; empty when healthy.

    - fewer than ``min_workers`` live workers (0 turns this off);
    - a schedule is overdue;
    - the oldest due pending job has waited more than ``max_pending_age`` seconds
      (None turns this off).
    """
    found = []
    alive = len(report.live_workers)
    if alive < min_workers:
        window = LIVE_WORKER_LEASES * report.lease
        found.append(
            f"{alive} live worker(s), expected at least {min_workers}: no runjobs process "
            f"has sent a heartbeat in the last {window:g}s ({LIVE_WORKER_LEASES} x LEASE)."
        )
    for schedule in report.overdue_schedules:
        found.append(
            f"cron schedule {schedule.name} is overdue: its occurrence at "
            f"{schedule.next_run.isoformat() if schedule.next_run else '?'} was not created "
            f"({schedule.overdue_seconds:.0f}s ago, grace {report.schedule_grace:g}s); "
            "is a runjobs process with the scheduler running?"
        )
    oldest = report.oldest_pending
    if max_pending_age is not None and oldest is not None and oldest.age_seconds > max_pending_age:
        found.append(
            f"the oldest due pending job ({oldest.name} #{oldest.id}, queue {oldest.queue}) "
            f"has waited {oldest.age_seconds:.0f}s, over --max-pending-age {max_pending_age:g}s."
        )
    return found


# --- sections -----------------------------------------------------------------------


def _jobs() -> Any:
    return Job.objects.using(database_alias())


def _counts() -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    counts: dict[str, int] = dict.fromkeys(JobStatus.values, 0)
    by_name: dict[str, dict[str, int]] = {}
    rows = _jobs().order_by().values("name", "status").annotate(rows=Count("id"))
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + row["rows"]
        by_name.setdefault(row["name"], {})[row["status"]] = row["rows"]
    return counts, dict(sorted(by_name.items()))


def _oldest_pending(now: dt.datetime) -> tuple[OldestPending | None, dict[str, float]]:
    due = _jobs().filter(status=JobStatus.PENDING, run_at__lte=now)
    row = due.order_by("run_at", "id").values("id", "name", "queue", "run_at").first()
    if row is None:
        return None, {}
    oldest = OldestPending(
        id=row["id"],
        name=row["name"],
        queue=row["queue"],
        run_at=row["run_at"],
        age_seconds=(now - row["run_at"]).total_seconds(),
    )
    by_queue = {
        item["queue"]: (now - item["oldest"]).total_seconds()
        for item in due.order_by().values("queue").annotate(oldest=Min("run_at"))
    }
    return oldest, dict(sorted(by_queue.items()))


def _schedules(now: dt.datetime, grace: float) -> list[ScheduleStatus]:
    from .registry import registry

    definitions = registry.cron_definitions()
    result = []
    for row in CronSchedule.objects.using(database_alias()).order_by("name"):
        definition = definitions.get(row.name)
        next_run = row.next_run
        if definition is not None and row.cursor is not None:
            upcoming = definition.cron.next_runs(row.cursor, 1)  # the code is the truth
            next_run = upcoming[0] if upcoming else None
        status = ScheduleStatus(
            name=row.name,
            expression=row.expression,
            tz=row.tz,
            paused=row.paused,
            active=row.active,
            defined=definition is not None,
            cursor=row.cursor,
            last_occurrence=row.last_occurrence,
            next_run=next_run,
        )
        if row.active and not row.paused and next_run is not None:
            late = (now - next_run).total_seconds()
            if late > grace:
                status.overdue, status.overdue_seconds = True, late
        result.append(status)
    # Schedules defined in code that no scheduler has armed yet (no row).
    armed = {status.name for status in result}
    for name, definition in sorted(definitions.items()):
        if name in armed:
            continue
        upcoming = definition.cron.next_runs(now, 1)
        result.append(
            ScheduleStatus(
                name=name,
                expression=definition.cron.expression,
                tz=definition.cron.tz,
                paused=False,
                active=True,
                defined=True,
                cursor=None,
                last_occurrence=None,
                next_run=upcoming[0] if upcoming else None,
            )
        )
    return sorted(result, key=lambda status: status.name)


def _workers(now: dt.datetime, lease: float) -> list[WorkerStatus]:
    window = LIVE_WORKER_LEASES * lease
    result = []
    for row in Worker.objects.using(database_alias()).order_by("-last_seen", "id"):
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
            )
        )
    return result


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value
