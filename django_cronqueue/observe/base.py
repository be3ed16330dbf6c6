"""What every part of the read model shares: its limits and the querysets it reads."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet

from ..conf import database_alias, get_settings
from ..cronspec import CronSpec
from ..models import CronSchedule, Job
from ..registry import JobDefinition, registry

UTC = dt.timezone.utc

#: Above this many rows (by the database's own statistics) an unfiltered job list shows
#: an estimated count instead of running COUNT(*) over the whole table.
ESTIMATE_ABOVE = 100_000
#: Capped counts (per status, and of a filtered list) stop at this many rows.
COUNT_CAP = 100_000
#: At most this many distinct names or queues are offered as filter choices.
MAX_CHOICES = 200
#: A worker is live when its heartbeat was seen within this many leases: a running
#: ``runjobs`` renews its row every ``LEASE / 3`` seconds and deletes it when it stops.
LIVE_WORKER_LEASES = 3
#: A schedule is overdue when its next occurrence is this many seconds late, uncreated.
DEFAULT_SCHEDULE_GRACE = 120.0
HOURS = 24
ZERO = dt.timedelta(0)


def jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(database_alias())


def cron_definitions() -> dict[str, JobDefinition]:
    """The cron schedules this process's code defines, by name."""
    return registry.cron_definitions()


def cron_spec(definition: JobDefinition) -> CronSpec:
    """The CronSpec of a definition from ``cron_definitions()``."""
    assert definition.cron is not None, f"{definition.name} is not a cron schedule"
    return definition.cron


def live_window(lease: float | None = None) -> float:
    """Seconds within which a live worker has sent a heartbeat."""
    return LIVE_WORKER_LEASES * (float(get_settings().LEASE) if lease is None else lease)
