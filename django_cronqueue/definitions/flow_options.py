"""Flow-control options of a job, parsed and checked: ``rate_limit`` and the limit key.

Pure: no Django models, no database. ``registry`` parses ``rate_limit=`` at import,
``arguments`` turns a payload value into a limit key at enqueue; each raises the error
type that fits its caller with the problem text these functions return.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

from ..values.validation import is_int, text_problem

#: The longest limit key a row stores (``Job.limit_key``).
MAX_LIMIT_KEY_LENGTH = 200
#: The most runs a rate limit may allow per window (a database integer).
MAX_RATE_COUNT = 2**31 - 1
RATE_UNITS = {
    "s": dt.timedelta(seconds=1),
    "m": dt.timedelta(minutes=1),
    "h": dt.timedelta(hours=1),
}
_RATE_TEXT = re.compile(r"\s*([0-9]+)\s*/\s*([smh])\s*")


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` runs start in any window of ``window``."""

    count: int
    window: dt.timedelta

    @property
    def seconds(self) -> float:
        return self.window.total_seconds()

    def __str__(self) -> str:
        for unit, length in RATE_UNITS.items():
            if self.window == length:
                return f"{self.count}/{unit}"
        return f"{self.count} per {self.window}"


def parse_rate_limit(value: Any) -> RateLimit:
    """``"N/s"``, ``"N/m"``, ``"N/h"`` or ``(N, timedelta)``; raises ValueError whose
    text says what is wrong with ``value`` (the caller names the job)."""
    if isinstance(value, str):
        match = _RATE_TEXT.fullmatch(value)
        if match is None:
            raise ValueError(
                f'must be "N/s", "N/m" or "N/h" (N a whole number >= 1) or a tuple '
                f"(N, timedelta), got {value!r}"
            )
        count, window = int(match.group(1)), RATE_UNITS[match.group(2)]
    elif isinstance(value, tuple) and len(value) == 2:
        count, window = value
        if not isinstance(window, dt.timedelta):
            raise ValueError(
                f"(N, window) needs a datetime.timedelta as its window, got {window!r} in {value!r}"
            )
        if window <= dt.timedelta(0):
            raise ValueError(f"has a window of {window!r}; it must be longer than zero")
        if not is_int(count):
            raise ValueError(f"(N, window) needs a whole number N, got {count!r} in {value!r}")
    else:
        raise ValueError(f'must be "N/s", "N/m" or "N/h" or a tuple (N, timedelta), got {value!r}')
    if not 1 <= count <= MAX_RATE_COUNT:
        raise ValueError(
            f"allows {count} run(s) per window in {value!r}; N must be from 1 to {MAX_RATE_COUNT}"
        )
    return RateLimit(count, window)


def key_from_value(value: Any) -> str:
    """The limit key of a payload value: a string as it is, any other JSON value as its
    compact JSON text (``42`` and ``"42"`` are one key; ``true``, ``null``, ``[1,2]``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def key_problem(key: Any) -> str | None:
    """Why ``key`` cannot be a limit key, or None: it must be a non-empty string that fits
    the column and that databases store."""
    if not isinstance(key, str):
        return f"is of type {type(key).__name__}, not a string"
    if not key:
        return "is empty"
    if len(key) > MAX_LIMIT_KEY_LENGTH:
        return f"is {len(key)} characters long; the limit is {MAX_LIMIT_KEY_LENGTH}"
    problem = text_problem(key, "@")  # "@ contains ...": what follows "the key"
    return problem[2:] if problem else None
