"""The *when* of a cron schedule: ``CronSpec``, checked when ``@jobs.cron`` is applied,
and ``CronRun``, what a cron handler receives.

``django_cronqueue.cron`` does the occurrence maths (``maths``, loaded when a spec is first
read or checked); ``django_cronqueue.schedules.scheduler`` turns occurrences into ``Job`` rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..conf import get_settings
from ..values.validation import is_finite_number, is_int

CATCH_UP_MODES = ("latest", "all", "none")
OVERLAP_MODES = ("allow", "skip")
DEFAULT_MAX_CATCH_UP = 10
# An occurrence materialized more than this after its instant is "missed" (run late).
MISSED_AFTER = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class CronRun:
    """What a cron handler receives.

    ``scheduled_for`` is the occurrence being run, aware, in the schedule's zone: use it
    rather than the wall clock. ``catch_up`` is True when the occurrence runs late,
    after downtime. ``job_id`` is the row's id.
    """

    scheduled_for: dt.datetime
    catch_up: bool = False
    job_id: int | None = None


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
        from . import maths

        return maths.load_zone(self.tz)

    @property
    def is_interval(self) -> bool:
        from . import maths

        return maths.is_interval(self.expression)

    @property
    def window(self) -> dt.timedelta:
        if self.catch_up_window is not None:
            return self.catch_up_window
        return dt.timedelta(seconds=get_settings().CATCH_UP_WINDOW)

    def occurrences(self, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
        from . import maths

        return maths.occurrences(self.expression, self.tz, after, until)

    def iter_occurrences(self, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """``occurrences``, computed lazily: for ranges that may hold millions."""
        from . import maths

        return maths.iter_occurrences(self.expression, self.tz, after, until)

    def next_runs(self, after: dt.datetime, count: int) -> list[dt.datetime]:
        from . import maths

        return maths.next_occurrences(self.expression, self.tz, after, count)

    def run_for(
        self, *, job_id: int, scheduled_for: dt.datetime | None, created_at: dt.datetime
    ) -> CronRun:
        """The CronRun a handler receives for a row of this schedule."""
        if scheduled_for is None:  # a manual run: the request time stands in
            return CronRun(scheduled_for=created_at.astimezone(self.zone), job_id=job_id)
        late = created_at - scheduled_for > MISSED_AFTER
        return CronRun(
            scheduled_for=scheduled_for.astimezone(self.zone), catch_up=late, job_id=job_id
        )

    def options(self) -> dict[str, Any]:
        return {
            "catch_up": self.catch_up,
            "catch_up_window": self.window.total_seconds(),
            "max_catch_up": self.max_catch_up,
            "overlap": self.overlap,
        }


def checked_spec(
    schedule: str,
    expression: str,
    *,
    tz: str | None,
    catch_up: str,
    catch_up_window: dt.timedelta | float | None,
    max_catch_up: int,
    overlap: str,
) -> CronSpec:
    """A CronSpec from ``@jobs.cron``'s options; raises ImproperlyConfigured naming the
    schedule and the option."""
    from . import maths

    def fail(problem: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"Cron schedule {schedule!r}: {problem}")

    try:
        normalized = maths.validate_expression(expression)
    except maths.InvalidCronExpression as exc:
        raise fail(str(exc)) from None
    zone_name = settings.TIME_ZONE if tz is None else tz
    try:
        maths.load_zone(zone_name)
    except maths.InvalidTimeZone as exc:
        raise fail(f"option tz= {exc}") from None
    if catch_up not in CATCH_UP_MODES:
        raise fail(
            f"option catch_up= must be one of {', '.join(map(repr, CATCH_UP_MODES))}, "
            f"got {catch_up!r}."
        )
    if overlap not in OVERLAP_MODES:
        raise fail(f"option overlap= must be 'allow' or 'skip', got {overlap!r}.")
    if not is_int(max_catch_up) or max_catch_up < 1:
        raise fail(f"option max_catch_up= must be an integer >= 1, got {max_catch_up!r}.")
    return CronSpec(
        expression=normalized,
        tz=zone_name,
        catch_up=catch_up,
        catch_up_window=_window(catch_up_window, fail),
        max_catch_up=max_catch_up,
        overlap=overlap,
    )


def _window(
    value: dt.timedelta | float | None, fail: Callable[[str], ImproperlyConfigured]
) -> dt.timedelta | None:
    if value is None:
        return None
    if is_finite_number(value):
        value = dt.timedelta(seconds=value)  # type: ignore[arg-type]
    if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
        raise fail(
            f"option catch_up_window= must be a positive timedelta (or seconds), got {value!r}."
        )
    return value
