"""The read model of cron schedules: next runs, overviews, statuses, descriptions."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)

from .. import cron
from ..definitions.registry import JobDefinition, registry
from ..models import CronSchedule, CronScheduleSource, Job
from .base import DEFAULT_SCHEDULE_GRACE, cron_definitions, cron_spec, schedules

#: The dashboard shows the code schedules and this many dynamic ones: those that run next.
SOONEST_SHOWN = 20
#: ``schedule_statuses`` lists at most this many dynamic schedules of each kind: overdue,
#: paused (or inactive), and the others that run next; a site with fewer sees them all.
STATUSES_SHOWN = 100
#: Rows read per round trip when every schedule is listed (``cronqueue_schedules``).
CHUNK_SIZE = 2_000

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
    (name, scheduled_for, schedule) index, no query per row. A code schedule's rows
    carry its name and no schedule; a dynamic one's its job's name and its own."""
    queryset = queryset.annotate(
        occurrence_job=Case(
            When(job="", then=F("name")), default=F("job"), output_field=CharField()
        ),
        occurrence_schedule=Case(
            When(source=CronScheduleSource.DYNAMIC, then=F("name")),
            default=Value(""),
            output_field=CharField(),
        ),
    )
    occurrence = Job.objects.filter(
        name=OuterRef("occurrence_job"),
        schedule=OuterRef("occurrence_schedule"),
        scheduled_for=OuterRef("last_occurrence"),
    ).order_by()
    return queryset.annotate(
        last_job_id=Subquery(occurrence.values("pk")[:1]),
        last_job_status=Subquery(occurrence.values("status")[:1]),
    )


def describe_expression(expression: str) -> str:
    """``"30 2 * * 1-5"`` -> ``"At 02:30, Monday through Friday"``; '' if it cannot.

    When both day fields are restricted it says a day runs if *either* matches
    (``"0 0 13 * FRI"``: "on day 13 of the month, or on Friday"); when one starts with
    ``*`` a day must match both ("every 10 days, but only on Monday").
    """
    from cron_descriptor import ExpressionDescriptor, Options

    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        text = cron.validate_expression(expression)
        either = cron.days_match_either(text)
    except cron.InvalidCronExpression:
        text, either = cron.ALIASES.get(expression.strip().lower(), expression), False
    try:
        descriptor = ExpressionDescriptor(_sunday_steps_named(text), options)
        days = descriptor.get_day_of_month_description()
        weekdays = _weekdays(descriptor.get_day_of_week_description())
        if not days or not weekdays:
            return str(descriptor.get_description())
        joined = ", or " if either else ", but only "
        described = (
            f"{descriptor.get_time_of_day_description()}{days}{joined}{weekdays}"
            f"{descriptor.get_month_description()}{descriptor.get_year_description()}"
        )
        return described[:1].upper() + described[1:]
    except Exception:  # any expression cron-descriptor cannot read: show the raw one
        return ""


def _sunday_steps_named(text: str) -> str:
    """A day-of-week step of 7 or more (``*/7``, ``*/8``) fires on Sunday only (0, and 7
    where the step reaches it): named so, where cron-descriptor would say "every 8 days of
    the week"."""
    fields = text.split()
    step = re.fullmatch(r"\*/(\d+)", fields[4]) if len(fields) == 5 else None
    if step is None or int(step.group(1)) < 7:
        return text
    fields[4] = "0"
    return " ".join(fields)


def _weekdays(phrase: str) -> str:
    """cron-descriptor's day-of-week phrase without its joining words (", or on Friday"
    -> "on Friday"): the day rule decides those."""
    phrase = phrase.removeprefix(", ")
    for prefix in ("or ", "only "):
        phrase = phrase.removeprefix(prefix)
    return phrase


@dataclass
class ScheduleRow:
    schedule: CronSchedule
    description: str
    next_runs: list[dt.datetime]


@dataclass
class ScheduleCounts:
    """Schedule rows: all of them, the dynamic ones, the paused ones, the inactive ones."""

    total: int = 0
    dynamic: int = 0
    paused: int = 0
    inactive: int = 0


@dataclass
class ScheduleOverview:
    """What the dashboard shows of the schedules: every code schedule (by name), then the
    dynamic schedules that run next (by next run, at most ``SOONEST_SHOWN``), and the
    counts of all of them."""

    rows: list[ScheduleRow]
    counts: ScheduleCounts


def schedule_counts() -> ScheduleCounts:
    """The schedule rows counted: one aggregate query."""
    counted = schedules().aggregate(
        total=Count("pk"),
        dynamic=Count("pk", filter=Q(source=CronScheduleSource.DYNAMIC)),
        paused=Count("pk", filter=Q(paused=True)),
        inactive=Count("pk", filter=Q(active=False)),
    )
    return ScheduleCounts(**counted)


def code_rows() -> QuerySet[CronSchedule]:
    """The rows of the code schedules (few, whatever the number of dynamic ones)."""
    return schedules().filter(source=CronScheduleSource.CODE).order_by("name")


def soonest_dynamic(limit: int, after: dt.datetime | None = None) -> QuerySet[CronSchedule]:
    """The ``limit`` active, unpaused dynamic schedules that run next (from ``after``,
    when given): a range of the (active, paused, next_run) index, ties in its order."""
    rows = schedules().filter(
        source=CronScheduleSource.DYNAMIC, active=True, paused=False, next_run__isnull=False
    )
    if after is not None:
        rows = rows.filter(next_run__gte=after)
    return rows.order_by("next_run")[:limit]


def schedule_overview(
    now: dt.datetime, count: int = 3, soonest: int = SOONEST_SHOWN
) -> ScheduleOverview:
    """The code schedules and the ``soonest`` dynamic ones that run next, each with its
    description, its next ``count`` runs after ``now`` and its last occurrence, and the
    counts of all schedules: three queries, the cron maths for the rows shown only."""
    upcoming = sorted(
        with_last_occurrence(soonest_dynamic(soonest)), key=lambda row: (row.next_run, row.name)
    )
    return ScheduleOverview(
        rows=[
            _overview_row(row, now, count)
            for row in [*with_last_occurrence(code_rows()), *upcoming]
        ],
        counts=schedule_counts(),
    )


def _overview_row(row: CronSchedule, now: dt.datetime, count: int) -> ScheduleRow:
    return ScheduleRow(
        schedule=row,
        description=describe_expression(row.expression),
        next_runs=next_runs(row.expression, row.tz, now, count) if row.active else [],
    )


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
    source: str = CronScheduleSource.CODE
    job: str = ""  # the job a dynamic schedule runs


@dataclass
class ScheduleStatuses:
    """``schedule_statuses``' answer: the schedules listed, by name, and the counts of all."""

    listed: list[ScheduleStatus]
    counts: ScheduleCounts
    overdue: int  # every overdue schedule, listed or not
    not_listed: int  # schedule rows left out: dynamic ones, neither overdue nor paused


def schedule_statuses(
    now: dt.datetime, grace: float = DEFAULT_SCHEDULE_GRACE, *, every: bool = False
) -> ScheduleStatuses:
    """The schedules with their next occurrence after the scheduler's cursor and whether
    they are overdue: that occurrence came more than ``grace`` seconds ago and was never
    created. Paused and inactive ones are never overdue.

    Listed: every code schedule (those that no scheduler has armed yet, with no row, with
    their next run after ``now``), and of the dynamic ones the overdue, the paused (or
    inactive) and the next to run, at most ``STATUSES_SHOWN`` of each; with ``every``,
    every one. A dynamic schedule's ``next_run`` is its row's, so the overdue ones are
    one range of the (active, paused, next_run) index: no cron maths for them."""
    counts = schedule_counts()
    code, unarmed = _code_statuses(now, grace)
    dynamic, dynamic_overdue = (
        _every_dynamic_status(now, grace) if every else _notable_dynamic_status(now, grace)
    )
    listed = sorted([*code, *unarmed, *dynamic], key=lambda status: status.name)
    return ScheduleStatuses(
        listed=listed,
        counts=counts,
        overdue=dynamic_overdue + sum(status.overdue for status in code),
        not_listed=max(counts.total - len(code) - len(dynamic), 0),  # read apart: a race
    )


def code_schedule_statuses(
    now: dt.datetime, grace: float = DEFAULT_SCHEDULE_GRACE
) -> list[ScheduleStatus]:
    """Every code schedule, by name: those with a row (one query), and those that no
    scheduler has armed yet."""
    code, unarmed = _code_statuses(now, grace)
    return sorted([*code, *unarmed], key=lambda status: status.name)


def _code_statuses(
    now: dt.datetime, grace: float
) -> tuple[list[ScheduleStatus], list[ScheduleStatus]]:
    """The code schedules with a row, and those without one yet (not armed)."""
    definitions = cron_definitions()
    code = [_schedule_status(row, definitions.get(row.name), now, grace) for row in code_rows()]
    armed = {status.name for status in code}
    unarmed = [
        _unarmed_status(name, d, now) for name, d in definitions.items() if name not in armed
    ]
    return code, unarmed


def dynamic_lag(now: dt.datetime, grace: float = DEFAULT_SCHEDULE_GRACE) -> tuple[float, int]:
    """How late the most overdue active dynamic schedule is, in seconds (0: none is), and how
    many are later than ``grace``: two ranges of the (active, paused, next_run) index,
    whatever the number of schedules."""
    running = schedules().filter(
        source=CronScheduleSource.DYNAMIC, active=True, paused=False, next_run__isnull=False
    )
    earliest = running.order_by("next_run").values_list("next_run", flat=True).first()
    if earliest is None or earliest >= now:
        return 0.0, 0
    overdue = running.filter(next_run__lt=now - dt.timedelta(seconds=grace)).count()
    return (now - earliest).total_seconds(), overdue


def _unarmed_status(name: str, definition: JobDefinition, now: dt.datetime) -> ScheduleStatus:
    spec = cron_spec(definition)
    upcoming = next_runs(spec.expression, spec.tz, now, 1)
    return ScheduleStatus(
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


def _every_dynamic_status(now: dt.datetime, grace: float) -> tuple[list[ScheduleStatus], int]:
    """Every dynamic schedule, streamed, and how many are overdue."""
    rows = schedules().filter(source=CronScheduleSource.DYNAMIC).order_by("name")
    listed = [_schedule_status(row, None, now, grace) for row in rows.iterator(CHUNK_SIZE)]
    return listed, sum(status.overdue for status in listed)


def _notable_dynamic_status(now: dt.datetime, grace: float) -> tuple[list[ScheduleStatus], int]:
    """The overdue dynamic schedules (those overdue longest), the paused or inactive ones (by
    name) and those that run next, at most ``STATUSES_SHOWN`` of each (four queries at
    most); and how many are overdue in all."""
    dynamic = schedules().filter(source=CronScheduleSource.DYNAMIC)
    late = dynamic.filter(active=True, paused=False, next_run__lt=now - dt.timedelta(seconds=grace))
    overdue = list(late.order_by("next_run")[:STATUSES_SHOWN])
    stopped = dynamic.filter(Q(paused=True) | Q(active=False)).order_by("name")
    rows = [
        *overdue,
        *stopped[:STATUSES_SHOWN],
        *soonest_dynamic(STATUSES_SHOWN, after=now - dt.timedelta(seconds=grace)),
    ]
    overdue_count = late.count() if len(overdue) == STATUSES_SHOWN else len(overdue)
    return [_schedule_status(row, None, now, grace) for row in rows], overdue_count


def _schedule_status(
    row: CronSchedule, definition: JobDefinition | None, now: dt.datetime, grace: float
) -> ScheduleStatus:
    next_run = row.next_run
    if row.is_dynamic:  # the row is the truth; "defined": this process knows its job
        definition = registry.get(row.job)
    elif definition is not None and row.cursor is not None:  # the code is the truth
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
        source=row.source,
        job=row.job,
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
        "source": CronScheduleSource.CODE.value,
        "job": definition.name,
        "payload": {},
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
        "source": CronScheduleSource.CODE.value,
        "job": row.name,
        "payload": {},
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


def describe_dynamic_schedule(
    row: CronSchedule, now: dt.datetime, count: int = 5
) -> dict[str, Any]:
    """``describe_schedule``'s document for a dynamic schedule: its row is its definition."""
    options = row.options
    try:
        zone = cron.load_zone(row.tz)
    except cron.InvalidTimeZone:  # a row written by hand: listed, with no next runs
        zone = None
    return {
        "name": row.name,
        "source": CronScheduleSource.DYNAMIC.value,
        "job": row.job,
        "payload": row.payload,
        "expression": row.expression,
        "tz": row.tz,
        "interval": _is_interval(row.expression),
        "catch_up": options.get("catch_up"),
        "catch_up_window": options.get("catch_up_window"),
        "max_catch_up": options.get("max_catch_up"),
        "overlap": options.get("overlap"),
        "retries": options.get("retries"),
        "queue": options.get("queue"),
        "priority": options.get("priority"),
        "paused": row.paused,
        "active": row.active,
        "last_occurrence": row.last_occurrence.isoformat() if row.last_occurrence else None,
        "next_runs": [
            {"utc": instant.isoformat(), "local": instant.astimezone(zone).isoformat()}
            for instant in (_rule_next_runs(row.expression, row.tz, now, count) if zone else [])
        ],
    }


def describe_schedules(now: dt.datetime, count: int = 5) -> tuple[Iterator[dict[str, Any]], bool]:
    """Every schedule, those defined in code first (by name), then the code rows no code
    defines, then the dynamic schedules (by name, streamed: ``CHUNK_SIZE`` rows a round
    trip, no query per row); and whether the rows could be read (without them, paused
    and last occurrence are not known, and no dynamic schedule is listed)."""
    try:
        rows = {row.name: row for row in code_rows()}
        readable = True
    except DatabaseError:
        rows, readable = {}, False
    return _described(rows, now, count, readable), readable


def _described(
    rows: dict[str, CronSchedule], now: dt.datetime, count: int, with_dynamic: bool
) -> Iterator[dict[str, Any]]:
    definitions = cron_definitions()
    for name, definition in sorted(definitions.items()):
        yield describe_schedule(definition, rows.get(name), now, count)
    for name, row in rows.items():  # by name
        if name not in definitions:
            yield describe_inactive_schedule(row)
    if with_dynamic:
        dynamic = schedules().filter(source=CronScheduleSource.DYNAMIC).order_by("name")
        for row in dynamic.iterator(CHUNK_SIZE):
            yield describe_dynamic_schedule(row, now, count)


@functools.lru_cache(maxsize=1_024)
def _rule_next_runs(
    expression: str, tz: str, after: dt.datetime, count: int
) -> tuple[dt.datetime, ...]:
    """``next_runs``, computed once per rule (expression and zone) and instant: dynamic
    schedules made per tenant share a few rules, so listing them all costs the cron
    maths of those few."""
    return tuple(next_runs(expression, tz, after, count))


def _is_interval(expression: str) -> bool | None:
    try:
        return cron.is_interval(expression)
    except cron.InvalidCronExpression:
        return None
