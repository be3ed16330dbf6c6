"""Dynamic schedules: cron schedules created, edited and deleted at run time.

A dynamic schedule is a ``CronSchedule`` row (``source`` "dynamic") naming a
``@jobs.job``, its payload, an expression, a zone and the options of ``@jobs.cron``
that a row can hold. The scheduler materializes it like a code schedule, through the
same path: ``Target`` says what a schedule's occurrences are, whichever kind it is.

Every check runs before anything is written, with the errors of an enqueue call:
``UnknownJob`` for a job this process does not define, ``InvalidPayload`` for a payload
that is not JSON or does not bind to the handler, ``ValueError`` for the rest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, NamedTuple

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from .. import cron
from ..conf import database_alias
from ..cron.spec import DEFAULT_MAX_CATCH_UP, CronSpec, checked_spec
from ..definitions.registry import JobDefinition, registry
from ..enqueueing.arguments import (
    StoredPayload,
    check_payload,
    check_priority,
    check_queue,
    check_stored_payload,
)
from ..exceptions import UnknownJob
from ..models import CronSchedule, CronScheduleSource
from ..values.validation import MAX_EXPRESSION_LENGTH, MAX_NAME_LENGTH, is_int, text_problem

#: The options a row stores, beside job, payload, expression and tz. ``timeout``,
#: ``backoff`` and ``on_failed`` are the job's (a callable cannot be stored).
STORED_OPTIONS = (
    "catch_up",
    "catch_up_window",
    "max_catch_up",
    "overlap",
    "retries",
    "queue",
    "priority",
)
EDITABLE = ("job", "payload", "expression", "tz", *STORED_OPTIONS)
DEFAULTS: dict[str, Any] = {
    "catch_up": "latest",
    "catch_up_window": None,
    "max_catch_up": DEFAULT_MAX_CATCH_UP,
    "overlap": "allow",
    "retries": None,
    "queue": None,
    "priority": None,
}


class Target(NamedTuple):
    """What the occurrences of a schedule are: rows of ``definition`` with ``payload``,
    by ``spec``. ``schedule`` goes into ``Job.schedule``: "" for a code schedule, the
    schedule's name for a dynamic one. None options are the job's."""

    definition: JobDefinition
    spec: CronSpec
    payload: dict[str, Any]
    schedule: str = ""
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    payload_checked: bool = False  # checked when the target was made


def code_target(definition: JobDefinition) -> Target:
    """The target of a ``@jobs.cron`` schedule: its own job, no payload."""
    assert definition.cron is not None, f"{definition.name} is not a cron schedule"
    return Target(definition=definition, spec=definition.cron, payload={})


def dynamic_target(row: CronSchedule) -> Target:
    """The target of a dynamic schedule's row; raises UnknownJob when this process does
    not define its job (or defines it as a cron schedule), InvalidPayload when the stored
    payload no longer binds to the job's handler (its code changed), and ValueError when
    its expression or zone is refused (stored by an older version, or by hand)."""
    definition = _job_definition(row.name, row.job)
    check_stored_payload(definition, row.payload)
    cron.validate_expression(row.expression)
    cron.load_zone(row.tz)
    options = {**DEFAULTS, **row.options}
    window = options["catch_up_window"]
    retries = options["retries"]
    return Target(
        definition=definition,
        spec=CronSpec(
            expression=row.expression,
            tz=row.tz,
            catch_up=options["catch_up"],
            catch_up_window=None if window is None else dt.timedelta(seconds=window),
            max_catch_up=options["max_catch_up"],
            overlap=options["overlap"],
        ),
        payload=dict(row.payload),
        schedule=row.name,
        queue=options["queue"],
        priority=options["priority"],
        max_attempts=None if retries is None else retries + 1,
        payload_checked=True,
    )


# --- create, edit, delete ---------------------------------------------------------


def create(now: dt.datetime | None = None, **definition: Any) -> CronSchedule:
    """A new dynamic schedule, armed at ``now`` (default: the current time): its first
    occurrence is the first one after that instant."""
    now = timezone.now() if now is None else now
    name = _checked_name(definition.pop("name", None))
    fields = _checked_fields(name, {"payload": None, "tz": None, **DEFAULTS, **definition})
    next_runs = fields.spec.next_runs(now, 1)
    try:
        with transaction.atomic(using=database_alias()):
            return _schedules().create(
                name=name,
                source=CronScheduleSource.DYNAMIC,
                cursor=now,
                next_run=next_runs[0] if next_runs else None,
                created_at=now,
                updated_at=now,
                **fields.columns(),
            )
    except IntegrityError:
        raise ValueError(
            f"Cron schedule {name!r} exists already; edit it (schedule.edit(...)) or choose "
            "another name."
        ) from None


def edit(
    schedule: CronSchedule, changes: Mapping[str, Any], now: dt.datetime | None = None
) -> None:
    """Apply ``changes`` to a dynamic schedule, checked as a whole first. A new expression
    or zone re-arms it at ``now``: no occurrence before the edit is fired by the new rule."""
    _refuse_code(schedule, "edit")
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise TypeError(
            f"Cron schedule {schedule.name!r}: edit() got unknown option(s) "
            f"{', '.join(unknown)}; it takes {', '.join(EDITABLE)}."
        )
    now = timezone.now() if now is None else now
    current = {
        "job": schedule.job,
        # As the row stores it: checked again, not encoded a second time.
        "payload": StoredPayload(schedule.payload)
        if isinstance(schedule.payload, dict)
        else schedule.payload,
        "expression": schedule.expression,
        "tz": schedule.tz,
        **{option: schedule.options.get(option, DEFAULTS[option]) for option in STORED_OPTIONS},
    }
    fields = _checked_fields(schedule.name, {**current, **changes})
    update = fields.columns()
    if (fields.spec.expression, fields.spec.tz) != (schedule.expression, schedule.tz):
        next_runs = fields.spec.next_runs(now, 1)
        update.update(cursor=now, next_run=next_runs[0] if next_runs else None)
    update["updated_at"] = now
    if not _schedules().filter(pk=schedule.pk).update(**update):
        raise CronSchedule.DoesNotExist(f"Cron schedule {schedule.name!r} was deleted.")
    for field, value in update.items():
        setattr(schedule, field, value)


def delete(schedule: CronSchedule) -> tuple[int, dict[str, int]]:
    """Delete a dynamic schedule's row: no occurrence comes after it; the job rows it
    created stay (they name it in ``Job.schedule``)."""
    _refuse_code(schedule, "delete")
    deleted = _schedules().filter(pk=schedule.pk).delete()
    schedule.pk = None
    return deleted


def check(name: str, definition: Mapping[str, Any], *, new: bool) -> None:
    """Run the checks of ``create`` (``new``) or of an edit on a whole definition, writing
    nothing: what a form validates before it saves through ``create`` or ``edit``."""
    if new:
        _checked_name(name)
    _checked_fields(name, {"payload": None, "tz": None, **DEFAULTS, **definition})


def check_name(name: Any) -> str:
    """The name of a new dynamic schedule, checked; raises ValueError."""
    return _checked_name(name)


def job_definition(job: Any, schedule: str = "") -> JobDefinition:
    """The ``@jobs.job`` a dynamic schedule can run; raises UnknownJob (also for a
    ``@jobs.cron`` handler)."""
    return _job_definition(schedule, job)


# --- checks -----------------------------------------------------------------------


class _Fields(NamedTuple):
    definition: JobDefinition
    spec: CronSpec
    payload: dict[str, Any]
    options: dict[str, Any]

    def columns(self) -> dict[str, Any]:
        return {
            "job": self.definition.name,
            "payload": self.payload,
            "expression": self.spec.expression,
            "tz": self.spec.tz,
            "options": self.options,
        }


def _checked_fields(name: str, values: dict[str, Any]) -> _Fields:
    unknown = sorted(set(values) - set(EDITABLE))
    if unknown:
        raise TypeError(
            f"Cron schedule {name!r}: unknown option(s) {', '.join(unknown)}; "
            f"a dynamic schedule takes {', '.join(EDITABLE)}."
        )
    definition = _job_definition(name, values["job"])
    payload = check_payload(definition, values["payload"])
    check_expression_length(name, values["expression"])
    try:
        spec = checked_spec(
            name,
            values["expression"],
            tz=values["tz"],
            catch_up=values["catch_up"],
            catch_up_window=values["catch_up_window"],
            max_catch_up=values["max_catch_up"],
            overlap=values["overlap"],
        )
    except ImproperlyConfigured as exc:
        raise ValueError(str(exc)) from None
    check_expression_length(name, spec.expression)  # as stored: aliases expanded
    return _Fields(
        definition=definition,
        spec=spec,
        payload=payload,
        options=_stored_options(definition, spec, values),
    )


def check_expression_length(name: str, expression: object) -> None:
    """Refuse an expression longer than the column holds (a DataError on PostgreSQL and
    MariaDB, stored whole on SQLite), before anything is written."""
    if isinstance(expression, str) and len(expression) > MAX_EXPRESSION_LENGTH:
        raise ValueError(
            f"Cron schedule {name!r}: the expression is {len(expression)} characters long; "
            f"at most {MAX_EXPRESSION_LENGTH} are stored."
        )


def _stored_options(
    definition: JobDefinition, spec: CronSpec, values: dict[str, Any]
) -> dict[str, Any]:
    retries, queue, priority = values["retries"], values["queue"], values["priority"]
    if retries is not None and (not is_int(retries) or retries < 0):
        raise ValueError(
            f"Job {definition.name!r}: retries= must be an integer >= 0 (0 means a single "
            f"attempt), got {retries!r}."
        )
    if queue is not None:
        check_queue(definition, queue)
    if priority is not None:
        check_priority(definition, priority)
    window = spec.catch_up_window
    return {
        "catch_up": spec.catch_up,
        "catch_up_window": None if window is None else window.total_seconds(),
        "max_catch_up": spec.max_catch_up,
        "overlap": spec.overlap,
        "retries": retries,
        "queue": queue,
        "priority": priority,
    }


def _checked_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A cron schedule's name must be a non-empty string, got {name!r}.")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"Cron schedule {name[:40]!r}...: the name is {len(name)} characters long; "
            f"the limit is {MAX_NAME_LENGTH}."
        )
    problem = text_problem(name, "the name")
    if problem:
        raise ValueError(f"Cron schedule {name!r}: {problem}")
    if name in registry.cron_definitions():
        raise ValueError(
            f"Cron schedule {name!r} is defined in code (@jobs.cron); a dynamic schedule "
            "needs a name of its own."
        )
    return name


def _job_definition(schedule: str, job: Any) -> JobDefinition:
    definition = registry.resolve(job)
    if definition.cron is not None:
        raise UnknownJob(
            f"Cron schedule {schedule!r}: {definition.name!r} is a @jobs.cron schedule, not a "
            "@jobs.job; a dynamic schedule runs a @jobs.job, whose handler takes the payload "
            "as keyword arguments and reads the occurrence from jobs.current().scheduled_for."
        )
    return definition


def _refuse_code(schedule: CronSchedule, verb: str) -> None:
    if not schedule.is_dynamic:
        raise ValueError(
            f"Cron schedule {schedule.name!r} is defined in code (@jobs.cron) and cannot be "
            f"changed at run time: to {verb} it, change or remove its @jobs.cron decorator."
        )


def _schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(database_alias())
