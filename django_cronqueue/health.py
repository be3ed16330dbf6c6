"""The state of the queue at a glance, and whether it is healthy: what ``manage.py
cronqueue_status`` prints and what its ``--check`` probes.

``collect(now)`` gathers the facts of the read model (``observe``) into a ``StatusReport``:
job counts per status and name, the oldest due pending job, the cron schedules with their
next run and whether they are overdue (every code schedule; of the dynamic ones the
overdue, the paused and the next to run, a bounded number, unless ``every_schedule``; and
the counts of all of them), the workers with their heartbeats, the running jobs
with their progress and cancel requests, and the pauses of queues and job names; on
PostgreSQL, the job table's dead rows and the oldest transaction open on its database.
``problems(report, ...)`` turns it into the reasons a health probe should fail; jobs
that a pause holds back wait on purpose, so they do not count as waiting too long.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import DatabaseError, connections
from django.utils import timezone

from . import observe
from .conf import database_alias, get_settings, max_clock_skew
from .db.clock import beyond, describe_offset
from .exceptions import NotMigrated
from .observe import (
    DEFAULT_SCHEDULE_GRACE,
    LIVE_WORKER_LEASES,
    OldestPending,
    PauseState,
    RunningJob,
    ScheduleCounts,
    ScheduleStatus,
    StrandedName,
    WorkerStatus,
)
from .observe.storage import StorageHealth, storage_health
from .worker.startup import describe_database, require_tables

DEFAULT_MAX_PENDING_AGE = 300.0

__all__ = [
    "DEFAULT_MAX_PENDING_AGE",
    "DEFAULT_SCHEDULE_GRACE",
    "OldestPending",
    "PauseState",
    "RunningJob",
    "ScheduleCounts",
    "ScheduleStatus",
    "StatusReport",
    "StrandedName",
    "WorkerStatus",
    "collect",
    "explain_failure",
    "problems",
]


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
    max_clock_skew: float  # a worker's clock further off the database's claims nothing
    running: list[RunningJob] = field(default_factory=list)  # the longest running first
    pauses: list[PauseState] = field(default_factory=list)
    # the due pending row waiting longest that no pause holds back (what --check judges)
    oldest_unpaused_pending: OldestPending | None = None
    problems: list[str] = field(default_factory=list)
    # the schedule rows counted (total, dynamic, paused, inactive), listed in schedules or not
    schedule_counts: ScheduleCounts = field(default_factory=ScheduleCounts)
    overdue_count: int = 0  # every overdue schedule, listed in schedules or not
    schedules_not_listed: int = 0  # dynamic ones, neither overdue nor paused, not listed
    # names of due pending jobs that no live worker defines, the longest waiting first
    stranded: list[StrandedName] = field(default_factory=list)
    # PostgreSQL only (None elsewhere): the job table's dead rows, the oldest transaction
    storage: StorageHealth | None = None

    @property
    def pauses_in_force(self) -> list[PauseState]:
        return [pause for pause in self.pauses if pause.in_force]

    @property
    def live_workers(self) -> list[WorkerStatus]:
        return [worker for worker in self.workers if worker.alive]

    @property
    def clock_skewed_workers(self) -> list[WorkerStatus]:
        """Live workers whose clock is beyond MAX_CLOCK_SKEW: they refuse to claim."""
        return [w for w in self.live_workers if beyond(w.clock_offset, self.max_clock_skew)]

    @property
    def overdue_schedules(self) -> list[ScheduleStatus]:
        return [schedule for schedule in self.schedules if schedule.overdue]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (datetimes as ISO 8601 strings)."""
        return {key: _jsonable(value) for key, value in asdict(self).items()}


def collect(
    now: dt.datetime | None = None,
    *,
    schedule_grace: float = DEFAULT_SCHEDULE_GRACE,
    every_schedule: bool = False,
) -> StatusReport:
    """Read the state of the queue as of ``now`` (aware; default: the current time): a
    fixed number of queries, whatever the number of schedules, unless ``every_schedule``
    (then every schedule is listed, read in chunks)."""
    if now is None:
        now = timezone.now()
    elif timezone.is_naive(now):
        raise ValueError("collect(now=...) needs an aware datetime.")
    lease = float(get_settings().LEASE)
    counts, by_name = observe.counts_per_status_and_name()
    statuses = observe.schedule_statuses(now, schedule_grace, every=every_schedule)
    return StatusReport(
        now=now,
        counts=counts,
        counts_by_name=by_name,
        oldest_pending=observe.oldest_pending(now),
        oldest_pending_by_queue=observe.oldest_pending_by_queue(now),
        schedules=statuses.listed,
        workers=observe.workers(now, lease),
        lease=lease,
        schedule_grace=schedule_grace,
        max_clock_skew=max_clock_skew(),
        running=observe.running_jobs(),
        pauses=observe.pauses(now),
        oldest_unpaused_pending=observe.oldest_pending(now, skip_paused=True),
        schedule_counts=statuses.counts,
        overdue_count=statuses.overdue,
        schedules_not_listed=statuses.not_listed,
        stranded=observe.stranded_names(now, lease),
        storage=storage_health(),
    )


def explain_failure(exc: DatabaseError) -> str:
    """What failed when ``collect`` raised ``exc``, in one sentence: the database cannot
    be reached, or it lacks the package's tables (run migrate), or a query failed (the
    database itself answered: it is reachable, so a probe must not say otherwise)."""
    alias = database_alias()
    connection = connections[alias]
    try:
        connection.close()  # a connection the server cut is not tried again: a new one is
        connection.ensure_connection()
    except DatabaseError as unreachable:
        return f"the database {describe_database(alias)} is not reachable: {_error(unreachable)}"
    try:
        require_tables(alias)
    except NotMigrated as missing:
        return str(missing)
    except DatabaseError:
        pass  # the query failed below: say so
    return f"a query on the database {describe_database(alias)} failed: {_error(exc)}"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}".strip()


def problems(
    report: StatusReport,
    *,
    max_pending_age: float | None = DEFAULT_MAX_PENDING_AGE,
    min_workers: int = 1,
) -> list[str]:
    """Why a health check should fail, one sentence each; empty when healthy.

    - fewer than ``min_workers`` live workers (0 turns this off);
    - a live worker's clock is off the database's by more than ``MAX_CLOCK_SKEW`` (it
      refuses to claim);
    - a schedule is overdue (one sentence per listed one, one for those not listed);
    - due pending jobs of a name that no live worker defines have waited more than
      ``LEASE`` (one sentence per name);
    - the oldest due pending job that no pause holds back has waited more than
      ``max_pending_age`` seconds (None turns this off).
    """
    found = []
    alive = len(report.live_workers)
    if alive < min_workers:
        window = observe.live_window(report.lease)
        found.append(
            f"{alive} live worker(s), expected at least {min_workers}: no runjobs process "
            f"has sent a heartbeat in the last {window:g}s ({LIVE_WORKER_LEASES} x LEASE)."
        )
    for worker in report.clock_skewed_workers:
        found.append(
            f"worker {worker.id}: its host's clock is "
            f"{describe_offset(worker.clock_offset or 0.0)} the database's, more than "
            f"MAX_CLOCK_SKEW ({report.max_clock_skew:g}s), so it claims no jobs; fix the "
            "time synchronisation (NTP) of its host or of the database server."
        )
    for schedule in report.overdue_schedules:
        found.append(
            f"cron schedule {schedule.name} is overdue: its occurrence at "
            f"{schedule.next_run.isoformat() if schedule.next_run else '?'} was not created "
            f"({schedule.overdue_seconds:.0f}s ago, grace {report.schedule_grace:g}s); "
            "is a runjobs process with the scheduler running?"
        )
    if (unlisted := report.overdue_count - len(report.overdue_schedules)) > 0:
        found.append(
            f"{unlisted} more cron schedule(s) are overdue (grace {report.schedule_grace:g}s); "
            "cronqueue_status --all-schedules lists them."
        )
    for stranded in report.stranded:
        if stranded.waited_seconds > report.lease:
            found.append(
                f"{stranded.count} due pending job(s) named {stranded.name} have waited up to "
                f"{stranded.waited_seconds:.0f}s (over LEASE, {report.lease:g}s), and no live "
                "worker defines that name: is it defined in a module the workers import "
                "(CRONQUEUE['DISCOVER'])?"
            )
    oldest = report.oldest_unpaused_pending
    if max_pending_age is not None and oldest is not None and oldest.age_seconds > max_pending_age:
        found.append(
            f"the oldest due pending job ({oldest.name} #{oldest.id}, queue {oldest.queue}) "
            f"has waited {oldest.age_seconds:.0f}s, over --max-pending-age {max_pending_age:g}s"
            f"{' (jobs held back by a pause are not counted)' if report.pauses_in_force else ''}."
        )
    return found


def _jsonable(value: object) -> object:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value
