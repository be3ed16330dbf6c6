"""The five fields of a cron expression, read as Debian cron reads them.

Pure: no croniter, no Django. ``django_cronqueue.cron`` turns what this module reads into
the plain value lists croniter enumerates, so croniter's own readings of names, equal
ranges (``9-9``, ``SEP-9``) and steps (``*/1``) never decide what an expression means.

* Every standard field becomes a set of values: ``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n``,
  ``a/n`` (``a`` to the field's last value), lists of those, month and weekday names.
  Day-of-week 7 is Sunday (0). A range whose first value is above its last wraps around
  (``22-2``, ``FRI-MON``).
* A day field is *unrestricted* exactly when its text starts with ``*`` (or is ``?``).
  When both day fields are restricted a day matches if either matches; otherwise both must
  (and an unrestricted ``*`` matches every day), as in Debian cron.
* croniter's extensions (``L``, ``W``, ``#``) are kept as text for croniter to read.
* Steps larger than their field's range, and expressions that can never fire (a day of the
  month that none of the listed months has), are refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FieldProblem", "Fields", "parse_fields"]

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_TITLES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
# The most days each month can have (February: in a leap year).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int  # the highest value written (7 for day-of-week)
    names: dict[str, int]
    last: int  # the highest distinct value (6 for day-of-week: 7 is Sunday again)


_FIELDS = (
    _Field("minute", 0, 59, {}, 59),
    _Field("hour", 0, 23, {}, 23),
    _Field("day-of-month", 1, 31, {}, 31),
    _Field("month", 1, 12, {name: i + 1 for i, name in enumerate(MONTH_NAMES)}, 12),
    _Field("day-of-week", 0, 7, {name: i for i, name in enumerate(DAY_NAMES)}, 6),
)
DAY_OF_MONTH, MONTH, DAY_OF_WEEK = 2, 3, 4

_ITEM = re.compile(
    r"^(?:(?P<star>[*?])|(?P<start>[a-z0-9]+)(?:-(?P<end>[a-z0-9]+))?)(?:/(?P<step>[0-9]+))?$",
    re.IGNORECASE | re.ASCII,
)
_NAME_TOKEN = re.compile(r"[a-z]{3}", re.IGNORECASE | re.ASCII)


class FieldProblem(ValueError):
    """What is wrong with an expression's fields, in words (no expression, no advice)."""


@dataclass(frozen=True)
class Fields:
    """An expression's fields as written (equal ranges collapsed) and as values.

    ``values[i]`` is None for a field that uses croniter's ``L``/``W``/``#`` extensions:
    croniter reads its text.
    """

    texts: tuple[str, ...]
    values: tuple[frozenset[int] | None, ...]

    @property
    def day_of_month_restricted(self) -> bool:
        return not _unrestricted(self.texts[DAY_OF_MONTH])

    @property
    def day_of_week_restricted(self) -> bool:
        return not _unrestricted(self.texts[DAY_OF_WEEK])

    @property
    def either_day(self) -> bool:
        """True when a day matches if either day field matches (both are restricted)."""
        return self.day_of_month_restricted and self.day_of_week_restricted


def parse_fields(texts: list[str]) -> Fields:
    """Read five field texts; raise :class:`FieldProblem` saying what is wrong."""
    collapsed: list[str] = []
    values: list[frozenset[int] | None] = []
    for field, text in zip(_FIELDS, texts, strict=True):
        if _uses_extension(text):
            collapsed.append(text)
            values.append(None)
            continue
        items = [_parse_item(field, text, item) for item in text.split(",")]
        collapsed.append(",".join(item_text for item_text, _ in items))
        values.append(frozenset().union(*(item_values for _, item_values in items)))
    fields = Fields(tuple(collapsed), tuple(values))
    _check_can_fire(fields)
    return fields


def _unrestricted(text: str) -> bool:
    return text.startswith("*") or text == "?"


def _uses_extension(text: str) -> bool:
    """croniter's ``L``, ``W`` and ``#`` (anything left after the names are taken out)."""
    rest = _NAME_TOKEN.sub(
        lambda token: "" if token[0].upper() in MONTH_NAMES + DAY_NAMES else token[0], text
    )
    return any(mark in rest.upper() for mark in "LW#")


def _parse_item(field: _Field, text: str, item: str) -> tuple[str, frozenset[int]]:
    """One comma-separated item: its text (``5-5`` collapsed to ``5``) and its values."""
    match = _ITEM.match(item)
    if match is None:
        raise _not_valid(field, text)
    step = int(match["step"]) if match["step"] is not None else None
    if step == 0:
        raise _not_valid(field, text)
    if match["star"]:
        start, end = field.low, field.high
    else:
        start = _value(field, text, match["start"])
        if match["end"] is None:
            end = start if step is None else field.high  # "a/n": a to the last value
        else:
            end = _value(field, text, match["end"])
        if (
            match["end"] is not None and start == end
        ):  # 9-SEP, mon-1: one value (croniter would read the whole field)
            return match["start"], frozenset({_canonical(field, start)})
    # A step as long as the field (*/60 minutes: every 60 minutes, at minute 0) still means
    # what it says; a longer one (*/90) cannot run every 90 minutes and selects the first value.
    # Day-of-week is 0-7 as written (8 values, 7 is Sunday again), so */8 is Sunday, as */7.
    if step is not None and step > field.high - field.low + 1:
        raise FieldProblem(
            f"field {field.name!r} value {item!r} has a step of {step}, more than the "
            f"field's range {field.low}-{field.high} allows: it selects only "
            f"{_first_only(field, start)}"
        )
    return item, frozenset(_canonical(field, value) for value in _walk(field, start, end, step))


def _value(field: _Field, text: str, token: str) -> int:
    if token.isdigit():
        number = int(token)
        if not field.low <= number <= field.high:
            raise FieldProblem(
                f"field {field.name!r} value {number} is out of range {field.low}-{field.high}"
            )
        return number
    named = field.names.get(token.upper())
    if named is None:
        raise _not_valid(field, text)
    return named


def _canonical(field: _Field, value: int) -> int:
    return 0 if field.name == "day-of-week" and value == 7 else value


def _walk(field: _Field, start: int, end: int, step: int | None) -> list[int]:
    if start <= end:
        sequence = list(range(start, end + 1))
    else:  # wraps around: 22-2 is 22, 23, 0, 1, 2
        start, end = _canonical(field, start), _canonical(field, end)
        if start <= end:
            sequence = list(range(start, end + 1))
        else:
            sequence = list(range(start, field.last + 1)) + list(range(field.low, end + 1))
    return sequence[:: step or 1]


def _first_only(field: _Field, start: int) -> str:
    first = _canonical(field, start)
    if field.name == "minute":
        return f"minute {first} (once an hour)"
    if field.name == "hour":
        return f"hour {first} (once a day)"
    if field.name == "day-of-month":
        return f"day {first} (once a month)"
    if field.name == "month":
        return f"{_MONTH_TITLES[first - 1]} (once a year)"
    return f"{DAY_NAMES[first]} (once a week)"


def _not_valid(field: _Field, text: str) -> FieldProblem:
    return FieldProblem(
        f"field {field.name!r} value {text!r} is not valid "
        f"(allowed: {field.low}-{field.high}, *, a-b, */n, a,b)"
    )


def _check_can_fire(fields: Fields) -> None:
    """Refuse day-of-month values that none of the listed months has, when the day of the
    week cannot stand in for them (it can when both day fields are restricted)."""
    days, months = fields.values[DAY_OF_MONTH], fields.values[MONTH]
    if fields.either_day or days is None or months is None:
        return
    if any(day <= _MONTH_DAYS[month - 1] for day in days for month in months):
        return
    listed = [_MONTH_TITLES[month - 1] for month in sorted(months)]
    verb = "has" if len(listed) == 1 else "have"
    numbers = " or ".join(str(day) for day in sorted(days))
    raise FieldProblem(
        f"it can never run: {', '.join(listed)} never {verb} a day {numbers} "
        f"(day-of-month {fields.texts[DAY_OF_MONTH]!r}, month {fields.texts[MONTH]!r})"
    )
