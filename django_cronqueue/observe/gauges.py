"""The queue's state as gauges (what ``django_cronqueue.metrics.MetricsView`` exposes):
jobs per status, name and queue, the age of the oldest due pending job per queue, how
late the cron schedules are, the live workers and the pauses in force; on PostgreSQL, the
job table's dead rows and the age of the oldest open transaction (``observe.storage``).

A fixed number of queries whatever the size of the table (``bench/counts.py`` times
them beside 20,000,000 finished rows): the rows per status, name and queue come from
``observe.counts`` (pending and running rows counted, finished ones kept by
housekeeping); the other facts read index ranges of pending rows, schedules, workers
and pauses.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Min

from ..conf import database_alias
from ..models import CronScheduleSource, Worker
from .base import DEFAULT_SCHEDULE_GRACE, due_jobs, jobs, live_window, read_alias
from .control import pauses
from .counts import job_counts
from .cron_schedules import ScheduleStatus, code_schedule_statuses, dynamic_lag
from .storage import StorageHealth, storage_health

__all__ = ["QueueGauges", "job_counts", "oldest_due_age", "queue_gauges"]


@dataclass
class QueueGauges:
    """The gauges of ``queue_gauges``, as of ``now``."""

    now: dt.datetime
    #: (status, name, queue) -> rows; only the combinations that have rows
    jobs: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: queue -> seconds the oldest due, unblocked pending job of the queue has waited
    oldest_due_age: dict[str, float] = field(default_factory=dict)
    #: code schedule name -> seconds its next occurrence is late (0 when on time)
    code_schedule_lag: dict[str, float] = field(default_factory=dict)
    #: seconds the most overdue active dynamic schedule is late (0 when none is)
    dynamic_schedule_lag: float = 0.0
    #: source ("code", "dynamic") -> schedules later than the grace
    overdue_schedules: dict[str, int] = field(default_factory=dict)
    live_workers: int = 0
    paused_queues: list[str] = field(default_factory=list)
    paused_names: list[str] = field(default_factory=list)
    #: PostgreSQL only (None elsewhere): dead rows of the job table, oldest transaction
    storage: StorageHealth | None = None


def queue_gauges(now: dt.datetime, grace: float = DEFAULT_SCHEDULE_GRACE) -> QueueGauges:
    """Read the gauges as of ``now``: a fixed handful of queries."""
    gauges = QueueGauges(
        now=now,
        jobs=job_counts(),
        oldest_due_age=oldest_due_age(now),
        live_workers=live_worker_count(now),
        storage=primary_storage_health(),
    )
    _read_schedule_lag(gauges, now, grace)
    in_force = [pause for pause in pauses(now) if pause.in_force]
    gauges.paused_queues = sorted(pause.queue for pause in in_force if pause.queue)
    gauges.paused_names = sorted(pause.name for pause in in_force if not pause.queue)
    return gauges


def primary_storage_health() -> StorageHealth | None:
    """``observe.storage`` of the queue's database; None while reading a replica
    (``READ_DATABASE``): it keeps neither figure, and a scrape then leaves the primary alone."""
    return storage_health() if read_alias() == database_alias() else None


def oldest_due_age(now: dt.datetime) -> dict[str, float]:
    """Per queue, the seconds its oldest due pending job has waited. A workflow's blocked
    jobs wait for their upstream jobs, not for a worker: they are left out."""
    rows = due_jobs(now).order_by().values_list("queue").annotate(oldest=Min("run_at"))
    return {queue: max((now - oldest).total_seconds(), 0.0) for queue, oldest in rows}


def live_worker_count(now: dt.datetime) -> int:
    seen_since = now - dt.timedelta(seconds=live_window())
    return Worker.objects.using(jobs().db).filter(last_seen__gte=seen_since).count()


def _lag(status: ScheduleStatus, now: dt.datetime) -> float:
    if not status.active or status.paused or status.next_run is None:
        return 0.0
    return max((now - status.next_run).total_seconds(), 0.0)


def _read_schedule_lag(gauges: QueueGauges, now: dt.datetime, grace: float) -> None:
    """The lag of every code schedule (named in the code: few) and of the most overdue dynamic
    one (there may be 100,000 of them: one figure, and how many are overdue), as
    ``cronqueue_status`` sees them."""
    code = code_schedule_statuses(now, grace)
    gauges.code_schedule_lag = {status.name: _lag(status, now) for status in code}
    gauges.dynamic_schedule_lag, dynamic_overdue = dynamic_lag(now, grace)
    gauges.overdue_schedules = {
        CronScheduleSource.CODE.value: sum(status.overdue for status in code),
        CronScheduleSource.DYNAMIC.value: dynamic_overdue,
    }
