"""What every part of the read model shares: its limits, the database it reads and the
querysets it reads there."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connections
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from ..conf import database_alias, get_settings, read_database_alias
from ..cron.spec import CronSpec
from ..definitions.registry import JobDefinition, registry
from ..models import CronSchedule, Job, JobStatus
from ..models.statuses import STATUS_EXPRESSION

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


# Set by ``from_read_database()`` around the reads of a read-only screen.
_read_alias: ContextVar[str | None] = ContextVar("cronqueue_read_alias", default=None)


@contextmanager
def from_read_database() -> Iterator[None]:
    """Inside, the read model reads ``CRONQUEUE["READ_DATABASE"]`` (a replica, whose
    facts may lag) instead of the queue's database: for the screens that only show
    (the admin dashboard, ``MetricsView``), never for one whose reads lead to a change."""
    token = _read_alias.set(read_database_alias())
    try:
        yield
    finally:
        _read_alias.reset(token)


def read_alias() -> str:
    """The database the read model reads now (see ``from_read_database``)."""
    return _read_alias.get() or database_alias()


def jobs() -> QuerySet[Job]:
    return Job.objects.using(read_alias())


# The condition of PostgreSQL's claim index, as a literal (whatever the driver's binding):
# a query that states it may read the job table's pending rows from that index.
_PENDING_BY_CLAIM_INDEX = RawSQL(
    f"{STATUS_EXPRESSION} = '{JobStatus.PENDING}'", (), output_field=BooleanField()
)


def due_jobs(now: dt.datetime) -> QuerySet[Job]:
    """Pending jobs a worker may run now: a workflow's blocked jobs wait for their
    upstream jobs, not for a worker, however old their run_at. On PostgreSQL the job
    table's rows are read from the claim index (the pending rows only), not by a scan of
    the whole table, which a held transaction can leave ten times larger; the
    history tables read their indexes on status."""
    due = jobs().filter(status=JobStatus.PENDING, blocked=False, run_at__lte=now)
    if connections[read_alias()].vendor == "postgresql":
        due = due.filter(_PENDING_BY_CLAIM_INDEX)
    return due


def schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(read_alias())


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
