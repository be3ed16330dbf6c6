"""The limits a row's columns impose, and the predicates every check is built from.

Pure: no Django models, no database. ``registry`` (options at import), ``arguments``
(enqueue calls), ``backend`` (Django Tasks) and ``checks`` (settings) all test values
with these, each raising the error type that fits its caller.
"""

from __future__ import annotations

import math
from typing import Any

MAX_NAME_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_DEDUPE_KEY_LENGTH = 200
# Job.priority is an IntegerField: a 32-bit signed integer on every vendor.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or float (not a bool) that is neither infinite nor NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_priority(value: object) -> bool:
    return is_int(value) and MIN_PRIORITY <= value <= MAX_PRIORITY  # type: ignore[operator]


def is_queue_name(value: object) -> bool:
    """A non-empty string that fits the ``queue`` column."""
    return isinstance(value, str) and bool(value.strip()) and len(value) <= MAX_QUEUE_LENGTH


def text_problem(text: str, what: str) -> str | None:
    """Why a string (a value or a key) cannot be stored in the database, or None."""
    if "\x00" in text:
        return (
            f"{what} contains a NUL character (\\x00), which databases reject in text; "
            "remove it or encode the data (e.g. base64)."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} contains a lone surrogate, which is not valid UTF-8."
    return None


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
