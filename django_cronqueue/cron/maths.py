"""Cron occurrence maths: when does a five-field cron expression fire in a time zone?

Pure functions: no Django, no database, no clock (``after``/``until`` are always arguments).
This is the only module that imports croniter, so croniter can be swapped here alone.

croniter enumerates *naive local wall-clock* times; this module maps each one to real
instants with zoneinfo, following Debian/ISC cron's daylight-saving rules:

* An *interval* schedule (the minute or the hour field starts with ``*``) fires at every
  real instant whose local time matches: nothing inside a spring-forward gap, and both
  copies of a repeated fall-back time.
* Every other schedule is *fixed-time*: a local time skipped by a spring-forward fires
  once, at the first instant after the gap; a local time that happens twice fires once,
  at its first instance.

What the fields mean is read by ``cron.fields`` (Debian's rules: a day field is
unrestricted exactly when its text starts with ``*``; either-day only when both are
restricted); croniter is handed plain value lists and only enumerates them.
"""

from __future__ import annotations

import copy
import difflib
import functools
import heapq
import itertools
import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from . import fields as cronfields

if TYPE_CHECKING:  # croniter loads with the first schedule (a site without one: never)
    from croniter import croniter

__all__ = [
    "ALIASES",
    "ITEMS_PER_WINDOW",
    "SEARCH_SPAN_PER_ITEM",
    "InvalidCronExpression",
    "InvalidTimeZone",
    "days_match_either",
    "is_interval",
    "iter_occurrences",
    "load_zone",
    "next_occurrences",
    "occurrences",
    "validate_expression",
]

UTC = timezone.utc

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

#: ``next_occurrences`` looks at most this far past ``after`` per requested item.
SEARCH_SPAN_PER_ITEM = timedelta(days=3653)  # ~10 years
#: ``iter_occurrences`` computes about this many occurrences at a time.
ITEMS_PER_WINDOW = 256

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_DISTINCT_VALUES = (60, 24, 31, 12, 7)  # day-of-week 7 is Sunday again
_HOW_TO_FIX = "use five fields: minute hour day-of-month month day-of-week, or an alias like @daily"
_FIELD_SPLIT = re.compile(r"\S+", re.ASCII)  # the same split croniter uses
_HASH_OR_RANDOM = re.compile(r"^[hr](\(\d+-\d+\))?(/\d+)?$", re.IGNORECASE | re.ASCII)
_NOT_IANA = frozenset({"localtime", "posixrules"})
# difflib's similarity ratio a zone must reach to be suggested: a letter or two off
# ("America/NewYork", "Europe/Pari"), not just any zone of the same region.
_CLOSE_ENOUGH = 0.85
# Instants are clamped to this range so local wall times never overflow datetime.
_EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=3)
_LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=3)
_ANCHOR = datetime(2000, 1, 1)  # croniter needs a start; never read the clock
# Offsets are sampled this far into the window to widen the wall-clock range over a
# nearby transition (the 26 h probe covers date-line jumps).
_PROBES = tuple(timedelta(hours=h) for h in (0, 1, 2, 3, 26))


class InvalidCronExpression(ValueError):
    """A cron expression this package cannot run; the message says how to fix it."""


class InvalidTimeZone(ValueError):
    """A name that is not an IANA time zone; the message suggests one when it can."""


@dataclass(frozen=True)
class _Schedule:
    expression: str
    interval: bool
    either_day: bool
    # One croniter, or two whose times are merged (see _prototypes); each is copied before
    # every use: croniter objects are stateful.
    prototypes: tuple[croniter, ...]


def validate_expression(expression: str) -> str:
    """Return the normalised five-field form of ``expression`` (aliases expanded)."""
    return _compile(expression).expression


def days_match_either(expression: str) -> bool:
    """True when both day fields are restricted, so a day runs if either matches."""
    return _compile(expression).either_day


def is_interval(expression: str) -> bool:
    """True when the minute or hour field starts with ``*`` (an interval schedule)."""
    return _compile(expression).interval


def load_zone(name: str) -> ZoneInfo:
    """Return the IANA zone ``name``; raise :class:`InvalidTimeZone` otherwise."""
    if isinstance(name, str) and name and name not in _NOT_IANA:
        try:
            return ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise InvalidTimeZone(_zone_message(name))


def occurrences(
    expression: str, zone: ZoneInfo | str, after: datetime, until: datetime
) -> list[datetime]:
    """Every occurrence ``t`` with ``after < t <= until``, as sorted aware UTC datetimes."""
    schedule = _compile(expression)
    tz = _as_zone(zone)
    start, end = _as_utc(after, "after"), _as_utc(until, "until")
    if end <= start:
        return []
    return _collect(schedule, tz, start, end)


def iter_occurrences(
    expression: str, zone: ZoneInfo | str, after: datetime, until: datetime
) -> Iterator[datetime]:
    """The occurrences of :func:`occurrences`, yielded lazily in order.

    They are computed a window of about ``ITEMS_PER_WINDOW`` occurrences at a time, so a
    caller that stops early (after the first thousand of a century of minutes, say) has
    paid for at most one window more than it took.
    """
    schedule = _compile(expression)
    tz = _as_zone(zone)
    start, end = _as_utc(after, "after"), _as_utc(until, "until")
    while start < end:
        window_end = _window_end(schedule, tz, start, ITEMS_PER_WINDOW)
        if window_end is None:
            return
        stop = min(window_end, end)
        yield from _collect(schedule, tz, start, stop)
        start = stop


def next_occurrences(
    expression: str, zone: ZoneInfo | str, after: datetime, count: int
) -> list[datetime]:
    """The first ``count`` occurrences strictly after ``after``, as sorted aware UTC.

    The search stops ``count * SEARCH_SPAN_PER_ITEM`` (~10 years per item) past
    ``after``, so a rare schedule returns fewer items and an impossible one (``0 0 30 2
    *``) returns ``[]`` instead of hanging.
    """
    schedule = _compile(expression)
    tz = _as_zone(zone)
    start = _as_utc(after, "after")
    if count <= 0:
        return []
    horizon = _horizon(start, count)
    found: list[datetime] = []
    stretch = 1
    while len(found) < count and start < horizon:
        end = _window_end(schedule, tz, start, (count - len(found)) * stretch)
        if end is None:
            break
        found += _collect(schedule, tz, start, min(end, horizon))
        start, stretch = min(end, horizon), min(stretch * 2, 1024)
    return found[:count]


def _window_end(schedule: _Schedule, tz: tzinfo, start: datetime, items: int) -> datetime | None:
    """Where a window from ``start`` likely holds ``items`` occurrences; None if none left.

    It jumps over empty stretches to the next wall match and extrapolates the gap to the
    one after. Windows are contiguous, so this estimate affects speed, never results.
    """
    walls = _wall_times(schedule, _naive(start) + _offset(tz, start))
    first = next(walls, None)
    if first is None:
        return None
    second = next(walls, None)
    step = second - first if second is not None else timedelta(days=1)
    try:
        return max(_rough_instant(first, tz), start) + step * items
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _compile(expression: str) -> _Schedule:
    if not isinstance(expression, str):
        raise InvalidCronExpression(
            f"a cron expression must be a string, got {type(expression).__name__}; {_HOW_TO_FIX}"
        )
    return _compile_cached(expression)


@functools.lru_cache(maxsize=4096)
def _compile_cached(expression: str) -> _Schedule:
    texts = _split(expression)
    for index, text in enumerate(texts):
        _refuse_hash_or_random(expression, index, text)
    try:
        fields = cronfields.parse_fields(texts)
    except cronfields.FieldProblem as exc:
        raise _invalid(expression, str(exc)) from None
    for index, values in enumerate(fields.values):
        if values is None:
            _check_extension_field(expression, index, fields.texts[index])
    try:
        prototypes = _prototypes(fields)
    except (ValueError, TypeError) as exc:  # croniter's errors subclass these
        raise _invalid(expression, str(exc)) from exc
    interval = texts[0].startswith("*") or texts[1].startswith("*")
    return _Schedule(" ".join(fields.texts), interval, fields.either_day, prototypes)


def _prototypes(fields: cronfields.Fields) -> tuple[croniter, ...]:
    """The croniter(s) that enumerate the expression's wall times.

    When both day fields are restricted and one uses croniter's L, W or # syntax,
    croniter does not apply the "either day" rule (``1 * MON#2`` never matches, ``1,15 *
    FRI#3`` ignores the 1st and the 15th): the days of each field are then enumerated
    apart, the other field written ``*``, and merged.
    """
    from croniter import croniter

    text = _croniter_text(fields)
    extension = fields.values[2] is None or fields.values[4] is None
    if not (fields.either_day and extension):
        return (croniter(text, _ANCHOR, day_or=fields.either_day),)
    parts = text.split()
    by_day_of_month = " ".join([*parts[:4], "*"])
    by_day_of_week = " ".join([*parts[:2], "*", *parts[3:]])
    return tuple(
        croniter(each, _ANCHOR, day_or=False) for each in (by_day_of_month, by_day_of_week)
    )


def _croniter_text(fields: cronfields.Fields) -> str:
    """The expression as plain value lists, for croniter to enumerate.

    croniter's own day rule (either-day unless one field is ``*``, with ``*/1`` and
    full lists read as ``*`` only sometimes) is switched off by ``day_or``: a day field
    is written ``*`` here only when it matches every day and the rule is "both".
    """
    parts = []
    for index, (text, values) in enumerate(zip(fields.texts, fields.values, strict=True)):
        if values is None:
            parts.append(text)
        elif len(values) == _DISTINCT_VALUES[index] and not (index in (2, 4) and fields.either_day):
            parts.append("*")
        else:
            parts.append(",".join(str(value) for value in sorted(values)))
    return " ".join(parts)


def _split(expression: str) -> list[str]:
    stripped = expression.strip()
    if not stripped:
        raise _invalid(expression, "the expression is empty")
    if stripped.startswith("@"):
        return _alias(expression, stripped.lower()).split()
    fields = _FIELD_SPLIT.findall(stripped)
    if len(fields) in (6, 7):
        raise _invalid(
            expression,
            f"it has {len(fields)} fields; seconds and year fields are not supported",
        )
    if len(fields) != 5:
        raise _invalid(expression, f"it has {len(fields)} field(s), not 5")
    return fields


def _alias(expression: str, alias: str) -> str:
    if alias == "@reboot":
        raise _invalid(expression, "@reboot is not supported (a job queue has no boot time)")
    if alias not in ALIASES:
        known = ", ".join(ALIASES)
        raise _invalid(expression, f"unknown alias {alias!r} (known: {known})")
    return ALIASES[alias]


def _refuse_hash_or_random(expression: str, index: int, text: str) -> None:
    if _HASH_OR_RANDOM.match(text):
        raise _invalid(
            expression,
            f"field {_FIELDS[index][0]!r} value {text!r} uses croniter's hashed/random "
            "syntax, which is not supported (every process must compute the same times)",
        )


def _check_extension_field(expression: str, index: int, text: str) -> None:
    """A field with croniter's L, W or # syntax: croniter alone can say if it is valid."""
    from croniter import croniter

    name, low, high = _FIELDS[index]
    probe = ["*"] * 5
    probe[index] = text
    try:
        croniter.expand(" ".join(probe))
    except (ValueError, TypeError) as exc:
        raise _invalid(
            expression,
            f"field {name!r} value {text!r} is not valid (allowed: {low}-{high}, *, a-b, */n, a,b)",
        ) from exc


def _invalid(expression: str, problem: str) -> InvalidCronExpression:
    return InvalidCronExpression(
        f"invalid cron expression {expression!r}: {problem}; {_HOW_TO_FIX}"
    )


def _zone_message(name: object) -> str:
    hint = "use an IANA name like 'Europe/London', 'America/New_York' or 'UTC'"
    if not isinstance(name, str):
        return f"a time zone must be a string, got {type(name).__name__}; {hint}"
    matches = _zone_suggestions(name)
    if matches:
        hint = "did you mean " + " or ".join(repr(match) for match in matches) + "?"
    elif not _available_zones():
        hint += " (no zone database was found: install the tzdata package)"
    return f"{name!r} is not an IANA time zone name; {hint}"


def _zone_suggestions(name: str) -> list[str]:
    """Zones spelled like ``name``: the same name in another case or without its region
    (``bogota``), else the closest name within a small edit distance (``Europe/Pari``)."""
    wanted = name.strip().replace(" ", "_").casefold()
    if not wanted:
        return []
    exact = sorted(
        zone
        for zone in _available_zones()
        if wanted in (zone.casefold(), zone.rsplit("/", 1)[-1].casefold())
    )
    if exact:
        return exact
    folded = _folded_zones()
    close = difflib.get_close_matches(wanted, folded, n=1, cutoff=_CLOSE_ENOUGH)
    return [folded[close[0]]] if close else []


@functools.lru_cache(maxsize=1)
def _folded_zones() -> dict[str, str]:
    return {zone.casefold(): zone for zone in _available_zones()}


def zone_names() -> list[str]:
    """The IANA zone names this process can load, sorted."""
    return sorted(_available_zones())


@functools.lru_cache(maxsize=1)
def _available_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() - _NOT_IANA)


def _as_zone(zone: ZoneInfo | str) -> tzinfo:
    return load_zone(zone) if isinstance(zone, str) else zone


def _as_utc(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (e.g. tzinfo=timezone.utc)")
    try:
        return min(max(value.astimezone(UTC), _EARLIEST), _LATEST)
    except OverflowError:
        return _LATEST if value.year > 1 else _EARLIEST


def _collect(schedule: _Schedule, tz: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """Occurrences in ``(start, end]`` (both UTC) from one pass over wall-clock times."""
    wall_low, wall_high = _wall_bounds(tz, start, end)
    found: set[datetime] = set()
    for wall in _wall_times(schedule, wall_low):
        if wall > wall_high:
            break
        found.update(t for t in _instants(wall, tz, schedule.interval) if start < t <= end)
    return sorted(found)


def _wall_bounds(tz: tzinfo, start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Naive local range holding every wall time that maps into ``(start, end]``.

    A wall time maps to an instant ``t`` with an offset in force just before or at
    ``t``, so sampling offsets near each edge (inside the window) bounds them all.
    """
    lows = {min(start + probe, end) for probe in _PROBES}
    highs = {max(end - probe, start) for probe in _PROBES}
    offsets = {instant: _offset(tz, instant) for instant in lows | highs}
    low = min(offsets[instant] for instant in lows)
    high = max(offsets[instant] for instant in highs)
    return _naive(start) + low, _naive(end) + high


def _wall_times(schedule: _Schedule, after: datetime) -> Iterator[datetime]:
    """Matching naive wall-clock times strictly after the naive ``after``."""
    if len(schedule.prototypes) == 1:
        return _times_of(schedule.prototypes[0], after)
    merged = heapq.merge(*(_times_of(prototype, after) for prototype in schedule.prototypes))
    return (wall for wall, _ in itertools.groupby(merged))  # a day both fields match: once


def _times_of(prototype: croniter, after: datetime) -> Iterator[datetime]:
    from croniter import CroniterBadDateError

    iterator = copy.copy(prototype)
    try:
        wall = iterator.get_next(datetime, after)
        while True:
            yield wall
            wall = iterator.get_next(datetime)
    # No match for decades, or past year 9999 (an OverflowError, or dateutil's
    # "ValueError: year 10000 is out of range").
    except (CroniterBadDateError, OverflowError, ValueError):
        return


def _instants(wall: datetime, tz: tzinfo, interval: bool) -> tuple[datetime, ...]:
    """The UTC instants a naive local ``wall`` time fires at, per the DST rules."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first == second:  # an ordinary wall time
        return (first,)
    if first < second:  # repeated by a fall-back: fold=0 is the first instance
        return (first, second) if interval else (first,)
    # Skipped by a spring-forward (PEP 495 maps fold=1 before the gap).
    return () if interval else (_transition(tz, second, first),)


def _transition(tz: tzinfo, before: datetime, after: datetime) -> datetime:
    """The first instant in ``(before, after]`` whose offset differs from ``before``'s."""
    old = _offset(tz, before)
    low, high = 0, int((after - before).total_seconds())
    while high - low > 1:  # zone transitions fall on whole seconds
        middle = (low + high) // 2
        if _offset(tz, before + timedelta(seconds=middle)) == old:
            low = middle
        else:
            high = middle
    return before + timedelta(seconds=high)


def _offset(tz: tzinfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    return offset if offset is not None else timedelta(0)


def _naive(instant: datetime) -> datetime:
    return instant.replace(tzinfo=None)


def _rough_instant(wall: datetime, tz: tzinfo) -> datetime:
    return wall.replace(tzinfo=tz).astimezone(UTC)


def _horizon(start: datetime, count: int) -> datetime:
    try:
        return min(start + count * SEARCH_SPAN_PER_ITEM, _LATEST)
    except OverflowError:
        return _LATEST
