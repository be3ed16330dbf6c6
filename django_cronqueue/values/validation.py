"""The limits a row's columns impose, and the predicates every check is built from.

Pure: no Django models, no database. ``registry`` (options at import), ``arguments``
(enqueue calls), ``backend`` (Django Tasks) and ``checks`` (settings) all test values
with these, each raising the error type that fits its caller.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

MAX_NAME_LENGTH = 200
MAX_QUEUE_LENGTH = 100
MAX_DEDUPE_KEY_LENGTH = 200
MAX_EXPRESSION_LENGTH = 200  # CronSchedule.expression
MAX_ZONE_NAME_LENGTH = 64  # CronSchedule.tz
# Job.traceparent: a W3C traceparent is 55 characters; later versions may append fields.
MAX_TRACEPARENT_LENGTH = 128
# Job.priority is an IntegerField: a 32-bit signed integer on every vendor.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1
# The JSON every supported database stores (payload and result columns). The strictest
# limits win: MariaDB's JSON_VALID (the CHECK of a JSON column there) refuses a document
# with more than 31 levels of arrays and objects (MySQL 8 allows 100, SQLite 1,000);
# PostgreSQL's numeric, which jsonb numbers are, holds at most 131,072 digits.
MAX_JSON_DEPTH = 31
MAX_JSON_NUMBER_DIGITS = 131_072


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or float (not a bool) that is neither infinite nor NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_positive_timedelta(value: object) -> bool:
    """A timedelta longer than zero."""
    return isinstance(value, dt.timedelta) and value > dt.timedelta(0)


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


# What to pass instead of a value that is not JSON (JSON_ADVICE), or not one of the
# types a job's arguments may also have (TYPED_ADVICE: see typedjson).
JSON_ADVICE = (
    "Pass plain JSON values: an id instead of a model instance, an ISO 8601 string "
    "instead of a datetime, a list instead of a set."
)
TYPED_ADVICE = (
    "Pass JSON values, or datetime, date, time, timedelta, Decimal or UUID values: an id "
    "instead of a model instance, a list instead of a set."
)


def json_problem(
    value: Any,
    path: str,
    *,
    noun: str,
    depth: int = 1,
    inside: Sequence[Any] = (),
    advice: str = JSON_ADVICE,
) -> str | None:
    """Why ``value`` cannot be stored as JSON in every supported database, or None.

    ``path`` names where ``value`` is (``"key[1].sub"``) after ``noun`` (``"payload key"``);
    ``depth`` is the level ``value`` sits at in the stored document, 1 for the document
    itself, and ``inside`` the containers enclosing it there. Never raises RecursionError:
    the walk stops past ``MAX_JSON_DEPTH``, and a container inside itself is reported.
    """
    walk = _JsonWalk(noun, advice)
    walk.open.update(id(container) for container in inside)
    return walk.problem(value, path, depth)


class _JsonWalk:
    def __init__(self, noun: str, advice: str) -> None:
        self.noun = noun
        self.advice = advice
        self.open: set[int] = set()  # the containers enclosing the value being checked

    def problem(self, value: Any, path: str, depth: int) -> str | None:
        where = f"{self.noun} {path!r}"
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, int):
            return number_problem(value, where)
        if isinstance(value, float):
            return float_problem(value, where)
        if isinstance(value, str):
            return text_problem(value, f"{where} holds a string that")
        if isinstance(value, (list, tuple, dict)):
            return self.container_problem(value, path, depth)
        return (
            f"{where} holds a {type(value).__name__} ({short_repr(value)}), which is not JSON. "
            + self.advice
        )

    def container_problem(
        self, value: list[Any] | tuple[Any, ...] | dict[Any, Any], path: str, depth: int
    ) -> str | None:
        where = f"{self.noun} {path!r}"
        if id(value) in self.open:
            return f"{where} holds itself (a circular reference), which JSON cannot represent."
        if depth > MAX_JSON_DEPTH:
            return (
                f"{where} is nested {depth} levels deep, counting every list and dict from "
                f"the top of the stored JSON; databases accept at most {MAX_JSON_DEPTH} "
                "(MariaDB's limit). Flatten it, or store it elsewhere and pass its id."
            )
        self.open.add(id(value))
        try:
            if isinstance(value, dict):
                return self.items_problem(value, path, depth)
            for index, item in enumerate(value):
                problem = self.problem(item, f"{path}[{index}]", depth + 1)
                if problem:
                    return problem
            return None
        finally:
            self.open.discard(id(value))

    def items_problem(self, value: dict[Any, Any], path: str, depth: int) -> str | None:
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{self.noun} {path!r} holds a dict with a non-string key {key!r}."
            problem = text_problem(key, f"{self.noun} {path!r} holds a key that") or self.problem(
                item, f"{path}.{key}", depth + 1
            )
            if problem:
                return problem
        return None


def number_problem(value: int, where: str) -> str | None:
    """Why an int cannot be written as JSON text and stored, or None."""
    try:
        digits = len(int.__repr__(abs(value)))
    except ValueError:  # past sys.get_int_max_str_digits()
        return (
            f"{where} holds an integer too long to write as JSON text (over Python's limit "
            "of sys.get_int_max_str_digits() digits). Pass it as a string."
        )
    if digits > MAX_JSON_NUMBER_DIGITS:
        return (
            f"{where} holds an integer of {digits} digits; PostgreSQL stores at most "
            f"{MAX_JSON_NUMBER_DIGITS} in a JSON number. Pass it as a string."
        )
    return None


def float_problem(value: float, where: str) -> str | None:
    """Why a float cannot be stored as JSON and read back equal, or None. PostgreSQL's
    jsonb keeps numbers as decimals: one written with a positive exponent (``1e+23``,
    as Python writes every float from 1e16 on) comes back as an integer, a different
    number unless the float is exactly that integer."""
    if not math.isfinite(value):
        return f"{where} holds {value!r}, which JSON cannot represent."
    if abs(value) < 1e16:
        return None
    written = decimal.Decimal(repr(value))
    if written == decimal.Decimal(value):
        return None
    return (
        f"{where} holds the float {value!r}, which PostgreSQL would give back as a "
        f"different number (its JSON numbers are decimals: {value!r} is read as an integer "
        "that this float is not). Pass it as a string, or as a Decimal where the job takes one."
    )


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
