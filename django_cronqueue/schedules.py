"""``@jobs.cron``: cron schedule definitions, checked at import.

A schedule is a job definition with a ``CronSpec``; ``django_cronqueue.scheduler``
turns its occurrences into ``Job`` rows.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from . import cron
from .backoff import BackoffFunction
from .conf import get_settings
from .registry import JobDefinition, OnFailed, default_name, define
from .runs import CronRun

if TYPE_CHECKING:
    from .claiming import ClaimedJob

CATCH_UP_MODES = ("latest", "all", "none")
OVERLAP_MODES = ("allow", "skip")
DEFAULT_MAX_CATCH_UP = 10
MISSED_AFTER = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class CronSpec:
    """The when of a schedule: expression, zone, catch-up and overlap policy."""

    expression: str
    tz: str
    catch_up: str = "latest"
    catch_up_window: dt.timedelta | None = None  # None: CRONQUEUE["CATCH_UP_WINDOW"]
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    overlap: str = "allow"

    @property
    def zone(self) -> ZoneInfo:
        return cron.load_zone(self.tz)

    @property
    def is_interval(self) -> bool:
        return cron.is_interval(self.expression)

    @property
    def window(self) -> dt.timedelta:
        if self.catch_up_window is not None:
            return self.catch_up_window
        return dt.timedelta(seconds=get_settings().CATCH_UP_WINDOW)

    def occurrences(self, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
        return cron.occurrences(self.expression, self.tz, after, until)

    def next_runs(self, after: dt.datetime, count: int) -> list[dt.datetime]:
        return cron.next_occurrences(self.expression, self.tz, after, count)

    def run_for(self, job: ClaimedJob, now: dt.datetime) -> CronRun:
        """The CronRun a handler receives for a claimed row of this schedule."""
        if job.scheduled_for is None:  # a manual run: the request time stands in
            return CronRun(scheduled_for=job.created_at.astimezone(self.zone), job_id=job.id)
        late = job.created_at - job.scheduled_for > MISSED_AFTER
        return CronRun(
            scheduled_for=job.scheduled_for.astimezone(self.zone), catch_up=late, job_id=job.id
        )

    def options(self) -> dict[str, Any]:
        return {
            "catch_up": self.catch_up,
            "catch_up_window": self.window.total_seconds(),
            "max_catch_up": self.max_catch_up,
            "overlap": self.overlap,
        }


def cron_schedule(
    expression: str,
    *,
    tz: str | None = None,
    name: str | None = None,
    catch_up: str = "latest",
    catch_up_window: dt.timedelta | float | None = None,
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    overlap: str = "allow",
    retries: int | None = None,
    backoff: BackoffFunction | None = None,
    timeout: float | None = None,
    queue: str | None = None,
    priority: int = 0,
    on_failed: OnFailed | None = None,
    **unsupported: Any,
) -> Callable[[Callable[..., Any]], JobDefinition]:
    """Register a function as a cron schedule: ``@jobs.cron("30 2 * * *", tz=...)``."""

    def decorate(function: Callable[..., Any]) -> JobDefinition:
        schedule = name if name is not None else default_name(function)

        def fail(problem: str) -> ImproperlyConfigured:
            return ImproperlyConfigured(f"Cron schedule {schedule!r}: {problem}")

        if "concurrency" in unsupported:
            raise fail(
                "option concurrency= is not accepted: each occurrence is already unique. "
                "To keep runs from overlapping use overlap='skip'."
            )
        if unsupported:
            raise fail(f"unknown option(s) {', '.join(sorted(unsupported))}.")
        try:
            normalized = cron.validate_expression(expression)
        except cron.InvalidCronExpression as exc:
            raise fail(str(exc)) from None
        zone_name = settings.TIME_ZONE if tz is None else tz
        try:
            cron.load_zone(zone_name)
        except cron.InvalidTimeZone as exc:
            raise fail(f"option tz= {exc}") from None
        if catch_up not in CATCH_UP_MODES:
            raise fail(
                f"option catch_up= must be one of {', '.join(map(repr, CATCH_UP_MODES))}, "
                f"got {catch_up!r}."
            )
        if overlap not in OVERLAP_MODES:
            raise fail(f"option overlap= must be 'allow' or 'skip', got {overlap!r}.")
        window = _window(catch_up_window, fail)
        if not isinstance(max_catch_up, int) or isinstance(max_catch_up, bool) or max_catch_up < 1:
            raise fail(f"option max_catch_up= must be an integer >= 1, got {max_catch_up!r}.")
        _check_handler(function, fail)
        spec = CronSpec(
            expression=normalized,
            tz=zone_name,
            catch_up=catch_up,
            catch_up_window=window,
            max_catch_up=max_catch_up,
            overlap=overlap,
        )
        return define(
            schedule,
            function,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            queue=queue,
            priority=priority,
            on_failed=on_failed,
            cron=spec,
        )

    return decorate


def _window(
    value: dt.timedelta | float | None, fail: Callable[[str], ImproperlyConfigured]
) -> dt.timedelta | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = dt.timedelta(seconds=value)
    if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
        raise fail(
            f"option catch_up_window= must be a positive timedelta (or seconds), got {value!r}."
        )
    return value


def _check_handler(
    function: Callable[..., Any], fail: Callable[[str], ImproperlyConfigured]
) -> None:
    if not callable(function):
        raise fail(f"@jobs.cron decorates a function, got {function!r}.")
    try:
        inspect.signature(function).bind(None)
    except TypeError:
        raise fail(
            "the handler must take exactly one argument, the CronRun: "
            "def handler(run: jobs.CronRun) -> None."
        ) from None
