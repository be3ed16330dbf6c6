"""The read model of cron schedules: next runs, overviews, statuses, descriptions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.db.models import OuterRef, QuerySet, Subquery

from .. import cron
from ..models import CronSchedule, Job
from ..registry import JobDefinition
from .base import DEFAULT_SCHEDULE_GRACE, cron_definitions, cron_spec, schedules

# --- cron schedules -----------------------------------------------------------------


def next_runs(expression: str, tz: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    """The next ``count`` occurrences after ``after``, as UTC instants ([] when the
    expression or the zone cannot be read)."""
    try:
        return cron.next_occurrences(expression, cron.load_zone(tz), after, count)
    except (cron.InvalidCronExpression, cron.InvalidTimeZone):
        return []


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


@dataclass
class ScheduleRow:
    schedule: CronSchedule
    description: str
    next_runs: list[dt.datetime]


def schedule_overview(now: dt.datetime, count: int = 3) -> list[ScheduleRow]:
    """Every schedule row with its description and next runs after ``now`` (one query)."""
    return [
        ScheduleRow(
            schedule=row,
            description=describe_expression(row.expression),
            next_runs=next_runs(row.expression, row.tz, now, count) if row.active else [],
        )
        for row in with_last_occurrence(schedules().order_by("name"))
    ]


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


def schedule_statuses(
    now: dt.datetime, grace: float = DEFAULT_SCHEDULE_GRACE
) -> list[ScheduleStatus]:
    """Every schedule, by name, with its next occurrence after the scheduler's cursor and
    whether it is overdue: that occurrence came more than ``grace`` seconds ago and was
    never created. Schedules defined in code that no scheduler has armed yet (no row) are
    listed with their next run after ``now``. Paused and inactive ones are never overdue."""
    definitions = cron_definitions()
    result = [_schedule_status(row, definitions.get(row.name), now, grace) for row in schedules()]
    armed = {status.name for status in result}
    for name, definition in definitions.items():
        if name not in armed:
            spec = cron_spec(definition)
            upcoming = next_runs(spec.expression, spec.tz, now, 1)
            result.append(
                ScheduleStatus(
                    name=name,
                    expression=spec.expression,
                    tz=spec.tz,
                    paused=False,
                    active=True,
                    defined=True,
                    cursor=None,
                    last_occurrence=None,
                    next_run=upcoming[0] if upcoming else None,
                )
            )
    return sorted(result, key=lambda status: status.name)


def _schedule_status(
    row: CronSchedule, definition: JobDefinition | None, now: dt.datetime, grace: float
) -> ScheduleStatus:
    next_run = row.next_run
    if definition is not None and row.cursor is not None:  # the code is the truth
        spec = cron_spec(definition)
        upcoming = next_runs(spec.expression, spec.tz, row.cursor, 1)
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
    return status


def describe_schedule(
    definition: JobDefinition, row: CronSchedule | None, now: dt.datetime, count: int = 5
) -> dict[str, Any]:
    """A JSON-ready description of a schedule defined in code, as ``cronqueue_schedules
    --json`` prints it; ``row`` (None when not armed yet) tells paused and last occurrence."""
    spec = cron_spec(definition)
    return {
        "name": definition.name,
        "expression": spec.expression,
        "tz": spec.tz,
        "interval": spec.is_interval,
        "catch_up": spec.catch_up,
        "catch_up_window": spec.window.total_seconds(),
        "max_catch_up": spec.max_catch_up,
        "overlap": spec.overlap,
        "paused": row.paused if row else False,
        "active": True,
        "last_occurrence": row.last_occurrence.isoformat() if row and row.last_occurrence else None,
        "next_runs": [
            {"utc": instant.isoformat(), "local": instant.astimezone(spec.zone).isoformat()}
            for instant in next_runs(spec.expression, spec.tz, now, count)
        ],
    }


def describe_inactive_schedule(row: CronSchedule) -> dict[str, Any]:
    """``describe_schedule``'s document for a row that no code of this process defines."""
    options = row.options
    return {
        "name": row.name,
        "expression": row.expression,
        "tz": row.tz,
        "interval": None,
        "catch_up": options.get("catch_up"),
        "catch_up_window": options.get("catch_up_window"),
        "max_catch_up": options.get("max_catch_up"),
        "overlap": options.get("overlap"),
        "paused": row.paused,
        "active": False,
        "last_occurrence": row.last_occurrence.isoformat() if row.last_occurrence else None,
        "next_runs": [],
    }


def describe_schedules(now: dt.datetime, count: int = 5) -> tuple[list[dict[str, Any]], bool]:
    """Every schedule, those defined in code first (by name), then the rows no code
    defines; and whether the rows could be read (without them, paused and last
    occurrence are not known)."""
    try:
        rows = {row.name: row for row in schedules()}
        readable = True
    except DatabaseError:
        rows, readable = {}, False
    definitions = cron_definitions()
    described = [
        describe_schedule(definition, rows.get(name), now, count)
        for name, definition in sorted(definitions.items())
    ]
    described += [
        describe_inactive_schedule(row)
        for name, row in sorted(rows.items())
        if name not in definitions
    ]
    return described, readable
