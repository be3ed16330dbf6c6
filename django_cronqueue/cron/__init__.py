"""Cron expressions and their occurrences: the time maths, pure (no Django models, no
database, no clock: ``now`` is always an argument).

- ``fields``: the five fields of an expression, read as Debian cron reads them;
- ``maths``: the instants an expression fires in a time zone (the only importer of
  croniter, so it can be swapped in one file);
- ``spec``: the *when* of a ``@jobs.cron`` schedule (``CronSpec``) and what its handler
  receives (``CronRun``).

May import: ``conf``, ``exceptions`` and ``values`` only. The functions below are the
documented ``django_cronqueue.cron`` API (docs/reference.md); they load ``maths`` when
first asked for (PEP 562), so that ``spec`` alone (``CronRun``, ``CronSpec``) does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .maths import (
        ALIASES,
        InvalidCronExpression,
        InvalidTimeZone,
        days_match_either,
        is_interval,
        iter_occurrences,
        load_zone,
        next_occurrences,
        occurrences,
        validate_expression,
        zone_names,
    )

__all__ = [
    "ALIASES",
    "InvalidCronExpression",
    "InvalidTimeZone",
    "days_match_either",
    "is_interval",
    "iter_occurrences",
    "load_zone",
    "next_occurrences",
    "occurrences",
    "validate_expression",
    "zone_names",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import maths

    return getattr(maths, name)
