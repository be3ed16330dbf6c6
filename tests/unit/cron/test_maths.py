"""Tests for django_cronqueue.cron: exact DST cases plus a brute-force minute-walk oracle.

Pure pytest: no database, no Django settings.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_cronqueue import cron
from django_cronqueue.cron import fields as cronfields
from django_cronqueue.cron import maths

UTC = timezone.utc
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
NEW_YORK = "America/New_York"
LONDON = "Europe/London"
LORD_HOWE = "Australia/Lord_Howe"
HOW_TO_FIX = "use five fields: minute hour day-of-month month day-of-week, or an alias like @daily"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def hourly(first: datetime, count: int) -> list[datetime]:
    return [first + n * HOUR for n in range(count)]


def local_day(zone: str, day: date) -> tuple[datetime, datetime]:
    """(after, until) covering one local calendar day, from its 00:00 to the next."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day, time(), tz)
    end = datetime.combine(day + timedelta(days=1), time(), tz)
    return start - SECOND, end - SECOND


def on_day(expression: str, zone: str, day: date) -> list[datetime]:
    return cron.occurrences(expression, zone, *local_day(zone, day))


# --- The reference: walk every UTC minute and apply the DST rules literally. ------------


@dataclass(frozen=True)
class Spec:
    """A five-field expression plus the values each field allows (the oracle's own view)."""

    fields: tuple[str, ...]
    values: tuple[frozenset[int], ...]  # minute, hour, day, month, weekday (0 = Sunday)
    alias: str = ""  # written as this alias instead of the fields

    @property
    def expression(self) -> str:
        return self.alias or " ".join(self.fields)

    @property
    def both_days(self) -> bool:
        """Debian cron: a day field is unrestricted exactly when its text starts with "*";
        unless both are restricted, a day must match both fields."""
        return self.fields[2].startswith("*") or self.fields[4].startswith("*")

    @property
    def never_runs(self) -> bool:
        """No listed month has any listed day, and the weekday cannot stand in."""
        longest = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
        _, _, days, months, _ = self.values
        possible = any(day <= longest[month - 1] for day in days for month in months)
        return self.both_days and not possible

    @property
    def interval(self) -> bool:
        return self.fields[0].startswith("*") or self.fields[1].startswith("*")

    def matches(self, wall: datetime) -> bool:
        minutes, hours, days, months, weekdays = self.values
        if wall.minute not in minutes or wall.hour not in hours or wall.month not in months:
            return False
        day_ok, weekday_ok = wall.day in days, wall.isoweekday() % 7 in weekdays
        if self.both_days:
            return day_ok and weekday_ok
        return day_ok or weekday_ok  # cron's rule when both day fields are restricted


def reference(spec: Spec, zone: ZoneInfo, after: datetime, until: datetime) -> list[datetime]:
    """Every run in (after, until] by brute force over whole UTC minutes."""
    found: set[datetime] = set()
    instant = after.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    previous = (instant - MINUTE).astimezone(zone)
    while instant <= until:
        local = instant.astimezone(zone)
        # Interval schedules run at every matching instant; fixed-time ones only at the
        # first instance of a repeated wall time (fold=1 marks the second).
        if spec.matches(local.replace(tzinfo=None)) and (spec.interval or local.fold == 0):
            found.add(instant)
        if not spec.interval and _skipped_match(spec, previous, local):
            found.add(instant)  # wall times skipped by a spring-forward run right after it
        previous = local
        instant += MINUTE
    return sorted(found)


def _skipped_match(spec: Spec, previous: datetime, local: datetime) -> bool:
    """Does a wall time skipped between two consecutive UTC minutes match?"""
    wall = previous.replace(tzinfo=None) + MINUTE
    end = local.replace(tzinfo=None)
    while wall < end:
        if spec.matches(wall):
            return True
        wall += MINUTE
    return False


# --- Strategies --------------------------------------------------------------------------

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")  # 7 is always spelled "7"
FIELD_RANGES: tuple[tuple[int, int, tuple[str, ...] | None], ...] = (
    (0, 59, None),
    (0, 23, None),
    (1, 31, None),
    (1, 12, MONTHS),
    (0, 7, WEEKDAYS),  # 7 is Sunday too
)
KEY_ZONES = (
    NEW_YORK,
    LONDON,
    LORD_HOWE,
    "Asia/Kolkata",
    "UTC",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "Europe/Dublin",
    "Asia/Tehran",
    "America/Santiago",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Asia/Kathmandu",
)
OTHER_ZONES = sorted(zoneinfo.available_timezones() - {"localtime", "posixrules"})


ALIASES = {  # the documented aliases, spelled out here rather than read from the module
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _values(field: int, low: int, high: int, step: int = 1) -> frozenset[int]:
    numbers = range(low, high + 1, step)
    return frozenset(n % 7 for n in numbers) if field == 4 else frozenset(numbers)


def _spell(value: int, field: int, names: tuple[str, ...] | None, draw: st.DrawFn) -> str:
    """A value as a number (zero-padded sometimes) or a name in any case; Sunday as 0,
    7 or SUN."""
    index = value - FIELD_RANGES[field][0]
    spellings = [str(value), f"{value:02d}"]
    if names is not None and index < len(names):
        spellings += [names[index], names[index].lower(), names[index].title()]
    return draw(st.sampled_from(spellings))


@st.composite
def list_items(draw: st.DrawFn, field: int) -> tuple[str, frozenset[int]]:
    """One item of a field list: a, a-b, a-b/n, */n or a/n, names or numbers for each
    bound (so a range may be written SEP-9 or mon-1)."""
    low, high, names = FIELD_RANGES[field]
    first = draw(st.integers(low, high))
    last = draw(st.integers(first, high))
    # Up to a step as long as the field as written (*/60 minutes, */8 days of the week).
    step = draw(st.one_of(st.integers(1, high - low + 1), st.just(high - low + 1)))
    a, b = _spell(first, field, names, draw), _spell(last, field, names, draw)
    kind = draw(st.sampled_from(("value", "range", "stepped", "star-step", "start-step")))
    if kind == "value":
        return a, _values(field, first, first)
    if kind == "range":
        return f"{a}-{b}", _values(field, first, last)
    if kind == "stepped":
        return f"{a}-{b}/{step}", _values(field, first, last, step)
    if kind == "start-step":
        return f"{a}/{step}", _values(field, first, high, step)
    return f"*/{step}", _values(field, low, high, step)


@st.composite
def fields(draw: st.DrawFn, field: int) -> tuple[str, frozenset[int]]:
    low, high, _ = FIELD_RANGES[field]
    if draw(st.integers(0, 3)) == 0:
        return "*", _values(field, low, high)
    items = draw(st.lists(list_items(field), min_size=1, max_size=3))
    text = ",".join(item for item, _ in items)
    return text, frozenset().union(*(v for _, v in items))


@st.composite
def any_specs(draw: st.DrawFn) -> Spec:
    if draw(st.integers(0, 9)) == 0:
        alias = draw(st.sampled_from(sorted(ALIASES)))
        spec = Spec(tuple(ALIASES[alias].split()), (), alias)
        values = tuple(
            _values(i, FIELD_RANGES[i][0], FIELD_RANGES[i][1])
            if text == "*"
            else _values(i, int(text), int(text))
            for i, text in enumerate(spec.fields)
        )
        return Spec(spec.fields, values, draw(st.sampled_from((alias, alias.upper()))))
    drawn = [draw(fields(index)) for index in range(5)]
    texts = tuple(text for text, _ in drawn)
    return Spec(texts, tuple(values for _, values in drawn))


def specs() -> st.SearchStrategy[Spec]:
    """Expressions that can run (``test_never_running_expressions_are_refused`` checks
    the others)."""
    return any_specs().filter(lambda spec: not spec.never_runs)


@functools.cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """UTC instants in 2026 at which the zone's offset changes."""
    zone = ZoneInfo(zone_name)
    found = []
    instant = utc(2026, 1, 1)
    while instant < utc(2027, 1, 1):
        if instant.astimezone(zone).utcoffset() != (instant + HOUR).astimezone(zone).utcoffset():
            low, high = instant, instant + HOUR  # narrow down to the minute
            while high - low > MINUTE:
                middle = low + (high - low) / 2
                middle = middle.replace(second=0, microsecond=0)
                same = middle.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset()
                low, high = (middle, high) if same else (low, middle)
            found.append(high)
        instant += HOUR
    return tuple(found)


@dataclass(frozen=True)
class Window:
    zone: ZoneInfo
    after: datetime
    until: datetime


@st.composite
def windows(draw: st.DrawFn, max_minutes: int = 48 * 60) -> Window:
    """A window of a few hours to two days, usually around one of the zone's transitions."""
    name = draw(st.one_of(st.sampled_from(KEY_ZONES), st.sampled_from(OTHER_ZONES)))
    zone = ZoneInfo(name)
    length = timedelta(minutes=draw(st.integers(3 * 60, max_minutes)))
    marks = transitions(name)
    if marks and draw(st.integers(0, 3)) > 0:
        mark = draw(st.sampled_from(marks))
        lead = draw(st.one_of(st.integers(0, 120), st.integers(0, length // MINUTE)))
        after = mark - lead * MINUTE
    else:
        after = utc(2026, 1, 1) + draw(st.integers(0, 364 * 24 * 60)) * MINUTE
    after += draw(st.sampled_from((0, 0, 1, 30, 59))) * SECOND
    until = after + length - draw(st.sampled_from((0, 0, 1, 45))) * SECOND
    shown_in = draw(st.sampled_from((UTC, zone, timezone(timedelta(hours=-3, minutes=-30)))))
    return Window(zone, after.astimezone(shown_in), until.astimezone(shown_in))


PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- Property tests ----------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(specs(), windows())
def test_occurrences_match_the_minute_by_minute_reference(spec: Spec, window: Window) -> None:
    got = cron.occurrences(spec.expression, window.zone, window.after, window.until)
    assert got == reference(spec, window.zone, window.after, window.until)
    assert all(t.tzinfo is UTC for t in got)
    assert cron.is_interval(spec.expression) == spec.interval


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(any_specs())
def test_never_running_expressions_are_refused(spec: Spec) -> None:
    if spec.never_runs:
        with pytest.raises(cron.InvalidCronExpression, match="it can never run"):
            cron.validate_expression(spec.expression)
    else:
        assert cron.validate_expression(spec.expression)
        assert cron.days_match_either(spec.expression) is not spec.both_days


def _equal_stepped_range(text: str) -> bool:
    def number(bound: str) -> int:
        names = MONTHS if bound.upper() in MONTHS else WEEKDAYS
        return int(bound) if bound.isdigit() else names.index(bound.upper())

    ranges = (item.split("/")[0].split("-") for item in text.split(",") if "/" in item)
    return any(len(bounds) == 2 and number(bounds[0]) == number(bounds[1]) for bounds in ranges)


@settings(PROPERTY_SETTINGS, max_examples=40)
@given(specs(), st.integers(0, 10 * 365 * 24 * 60))
def test_cronsim_agrees_in_utc(spec: Spec, minutes: int) -> None:
    """cronsim (written to match Debian cron) as a second, independent oracle. It reads
    an equal range with a step (``7-7/2``) as running to the field's end; cron, the docs
    and the reference above read one value."""
    assume(not any(_equal_stepped_range(text) for text in spec.fields))
    start = datetime(2020, 1, 1) + minutes * MINUTE
    expected = list(itertools.islice(CronSim(" ".join(spec.fields), start), 20))
    got = cron.next_occurrences(spec.expression, "UTC", start.replace(tzinfo=UTC), 20)
    assert [t.replace(tzinfo=None) for t in got] == expected


@settings(PROPERTY_SETTINGS, max_examples=75)
@given(specs(), windows(), st.floats(0, 1))
def test_adjacent_windows_add_up(spec: Spec, window: Window, split: float) -> None:
    after, until = window.after.astimezone(UTC), window.until.astimezone(UTC)
    middle = after + (until - after) * split  # in UTC: aware arithmetic ignores fold
    whole = cron.occurrences(spec.expression, window.zone, window.after, window.until)
    first = cron.occurrences(spec.expression, window.zone, window.after, middle)
    second = cron.occurrences(spec.expression, window.zone, middle, window.until)
    assert first + second == whole


@settings(PROPERTY_SETTINGS, max_examples=75)
@given(specs(), windows(), st.integers(1, 30))
def test_next_occurrences_agree_with_occurrences(spec: Spec, window: Window, count: int) -> None:
    upcoming = cron.next_occurrences(spec.expression, window.zone, window.after, count)
    known = cron.occurrences(spec.expression, window.zone, window.after, window.until)
    assert upcoming == sorted(set(upcoming))
    if len(known) >= count:
        assert upcoming == known[:count]
    else:
        assert upcoming[: len(known)] == known
        assert all(t > window.until for t in upcoming[len(known) :])


@settings(PROPERTY_SETTINGS, max_examples=75)
@given(specs(), windows(), st.sampled_from((1, 2, 7, 256)))
def test_iter_occurrences_yields_the_occurrences_window_by_window(
    spec: Spec, window: Window, per_window: int
) -> None:
    with mock.patch.object(maths, "ITEMS_PER_WINDOW", per_window):
        lazy = list(cron.iter_occurrences(spec.expression, window.zone, window.after, window.until))
    assert lazy == cron.occurrences(spec.expression, window.zone, window.after, window.until)


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK, LORD_HOWE])
def test_iter_occurrences_computes_about_what_is_taken(
    bounded_enumeration: list[datetime], zone: str
) -> None:
    """Taking 1,001 occurrences of a century of minutes computes at most one window more
    than that, never the century (52 million)."""
    century = cron.iter_occurrences("* * * * *", zone, utc(2026, 1, 1), utc(2126, 1, 1))
    taken = list(itertools.islice(century, 1001))
    assert taken == [utc(2026, 1, 1) + n * MINUTE for n in range(1, 1002)]
    assert len(bounded_enumeration) <= 1001 + 2 * maths.ITEMS_PER_WINDOW + 120


def test_iter_occurrences_of_an_empty_range_yields_nothing() -> None:
    assert list(cron.iter_occurrences("* * * * *", "UTC", utc(2026, 1, 2), utc(2026, 1, 1))) == []


def test_the_last_occurrences_before_year_10000() -> None:
    """croniter (through dateutil) raises ValueError past year 9999: the occurrences just
    end there."""
    end = datetime.max.replace(tzinfo=UTC)
    last = [utc(year, 1, 1) for year in range(9991, 10000)]
    assert list(cron.iter_occurrences("@yearly", "UTC", utc(9990, 1, 1), end)) == last
    assert cron.occurrences("@yearly", "UTC", utc(9990, 1, 1), end) == last
    assert cron.next_occurrences("@yearly", "UTC", utc(9998, 6, 1), 5) == [utc(9999, 1, 1)]


# --- Exact DST cases ---------------------------------------------------------------------


def test_new_york_spring_forward() -> None:
    day = date(2026, 3, 8)  # 02:00 EST -> 03:00 EDT at 07:00 UTC
    assert on_day("30 2 * * *", NEW_YORK, day) == [utc(2026, 3, 8, 7)]  # 03:00 EDT
    assert on_day("0 * * * *", NEW_YORK, day) == hourly(utc(2026, 3, 8, 5), 23)
    assert on_day("*/15 2 * * *", NEW_YORK, day) == []  # interval: nothing in the gap


def test_new_york_fall_back() -> None:
    day = date(2026, 11, 1)  # 02:00 EDT -> 01:00 EST at 06:00 UTC
    assert on_day("30 1 * * *", NEW_YORK, day) == [utc(2026, 11, 1, 5, 30)]  # EDT only
    assert on_day("0 * * * *", NEW_YORK, day) == hourly(utc(2026, 11, 1, 4), 25)


def test_new_york_brief_examples_count() -> None:
    assert len(on_day("0 * * * *", NEW_YORK, date(2026, 11, 1))) == 25
    assert len(on_day("0 * * * *", NEW_YORK, date(2026, 3, 8))) == 23


def test_london_spring_forward() -> None:
    day = date(2026, 3, 29)  # 01:00 GMT -> 02:00 BST at 01:00 UTC
    assert on_day("30 1 * * *", LONDON, day) == [utc(2026, 3, 29, 1)]  # 02:00 BST
    assert on_day("0 * * * *", LONDON, day) == hourly(utc(2026, 3, 29, 0), 23)


def test_london_fall_back() -> None:
    day = date(2026, 10, 25)  # 02:00 BST -> 01:00 GMT at 01:00 UTC
    assert on_day("30 1 * * *", LONDON, day) == [utc(2026, 10, 25, 0, 30)]  # 01:30 BST
    assert on_day("0 * * * *", LONDON, day) == hourly(utc(2026, 10, 24, 23), 25)


# Lord Howe shifts by 30 minutes, not an hour. The repeated half hour (01:30-01:59) holds a
# :30 but no :00, and the skipped one (02:00-02:29) holds a :00 but no :30. So `0 * * * *`
# runs 24 times on the fall-back day (not 25) and 23 on the spring-forward day, while
# `30 * * * *` runs 25 and 24 times.


def test_lord_howe_fall_back() -> None:
    day = date(2026, 4, 5)  # 02:00 +11:00 -> 01:30 +10:30 at 2026-04-04 15:00 UTC
    assert on_day("0 * * * *", LORD_HOWE, day) == [
        utc(2026, 4, 4, 13),  # 00:00 +11
        utc(2026, 4, 4, 14),  # 01:00 +11
        *hourly(utc(2026, 4, 4, 15, 30), 22),  # 02:00 +10:30 ... 23:00 +10:30
    ]
    assert on_day("30 * * * *", LORD_HOWE, day) == [
        utc(2026, 4, 4, 13, 30),  # 00:30 +11
        utc(2026, 4, 4, 14, 30),  # 01:30 +11
        *hourly(utc(2026, 4, 4, 15), 23),  # 01:30 +10:30 again, 02:30 ... 23:30 +10:30
    ]
    assert on_day("45 1 * * *", LORD_HOWE, day) == [utc(2026, 4, 4, 14, 45)]  # first, +11


def test_lord_howe_spring_forward() -> None:
    day = date(2026, 10, 4)  # 02:00 +10:30 -> 02:30 +11:00 at 2026-10-03 15:30 UTC
    assert on_day("0 * * * *", LORD_HOWE, day) == [
        utc(2026, 10, 3, 13, 30),  # 00:00 +10:30
        utc(2026, 10, 3, 14, 30),  # 01:00 +10:30
        *hourly(utc(2026, 10, 3, 16), 21),  # 03:00 +11 ... 23:00 +11 (02:00 skipped)
    ]
    assert on_day("30 * * * *", LORD_HOWE, day) == [
        utc(2026, 10, 3, 14),  # 00:30 +10:30
        utc(2026, 10, 3, 15),  # 01:30 +10:30
        *hourly(utc(2026, 10, 3, 15, 30), 22),  # 02:30 +11 ... 23:30 +11
    ]
    assert on_day("0 2 * * *", LORD_HOWE, day) == [utc(2026, 10, 3, 15, 30)]  # 02:30 +11
    assert on_day("15 2 * * *", LORD_HOWE, day) == [utc(2026, 10, 3, 15, 30)]


def test_skipped_times_sharing_one_instant_run_once() -> None:
    day = date(2026, 3, 8)
    assert on_day("0,15,30,45 2 * * *", NEW_YORK, day) == [utc(2026, 3, 8, 7)]
    assert on_day("0,30 2-3 * * *", NEW_YORK, day) == [utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 30)]


def test_fixed_time_every_minute_of_a_repeated_hour_runs_once_each() -> None:
    got = on_day("0-59 1 * * *", NEW_YORK, date(2026, 11, 1))
    assert got == [utc(2026, 11, 1, 5) + n * MINUTE for n in range(60)]  # all EDT


def test_interval_runs_in_both_copies_of_a_repeated_hour() -> None:
    got = on_day("*/30 1 * * *", NEW_YORK, date(2026, 11, 1))
    assert got == [
        utc(2026, 11, 1, 5),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6),
        utc(2026, 11, 1, 6, 30),
    ]


def test_window_edge_just_before_a_fall_back_keeps_the_second_copy() -> None:
    # after = 01:59 EDT; the next runs are the EST copies of 01:00 and 01:30.
    got = cron.occurrences("*/30 1 * * *", NEW_YORK, utc(2026, 11, 1, 5, 59), utc(2026, 11, 1, 7))
    assert got == [utc(2026, 11, 1, 6), utc(2026, 11, 1, 6, 30)]


def test_after_given_with_fold_is_read_as_its_real_instant() -> None:
    tz = ZoneInfo(NEW_YORK)
    after = datetime(2026, 11, 1, 1, 0, fold=1, tzinfo=tz)  # 01:00 EST = 06:00 UTC
    got = cron.occurrences("*/30 1 * * *", tz, after, datetime(2026, 11, 1, 4, tzinfo=tz))
    assert got == [utc(2026, 11, 1, 6, 30)]


def test_second_copy_of_a_fixed_time_is_never_run() -> None:
    # The cursor sits between the two copies of 01:30: the EDT one already ran.
    got = cron.occurrences("30 1 * * *", NEW_YORK, utc(2026, 11, 1, 5, 45), utc(2026, 11, 1, 8))
    assert got == []


def test_non_hour_offsets() -> None:
    assert cron.occurrences("0 9 * * *", "Asia/Kolkata", utc(2026, 6, 1), utc(2026, 6, 2)) == [
        utc(2026, 6, 1, 3, 30)
    ]
    assert cron.occurrences("0 9 * * *", "Asia/Kathmandu", utc(2026, 6, 1), utc(2026, 6, 2)) == [
        utc(2026, 6, 1, 3, 15)
    ]


# --- Rare dates, aliases, validation, zones ----------------------------------------------


def test_feb_29() -> None:
    after = utc(2026, 1, 1)
    assert cron.occurrences("0 12 29 2 *", "UTC", after, utc(2029, 1, 1)) == [utc(2028, 2, 29, 12)]
    assert cron.next_occurrences("0 12 29 2 *", "UTC", after, 3) == [
        utc(2028, 2, 29, 12),
        utc(2032, 2, 29, 12),
        utc(2036, 2, 29, 12),
    ]


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("0 0 30 2 *", "it can never run: February never has a day 30"),
        ("0 0 31 2 *", "it can never run: February never has a day 31"),
        ("0 0 30,31 FEB */2", "February never has a day 30 or 31"),
        ("0 0 31 4,6,9,11 *", "April, June, September, November never have a day 31"),
        ("0 0 31 APR-JUN/2 *", "April, June never have a day 31"),
    ],
)
def test_expressions_that_can_never_run_are_refused(expression: str, problem: str) -> None:
    with pytest.raises(cron.InvalidCronExpression, match=problem):
        cron.validate_expression(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 29 2 *",  # leap years
        "0 0 30 2 MON",  # both day fields restricted: every Monday of February
        "0 0 31 2,3 *",  # March has a 31st
        "0 0 L 2 *",
    ],
)
def test_rare_expressions_are_accepted(expression: str) -> None:
    assert cron.next_occurrences(expression, "UTC", utc(2026, 1, 1), 1)


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        (
            "*/90 * * * *",
            "field 'minute' value '*/90' has a step of 90, more than the field's "
            "range 0-59 allows: it selects only minute 0 (once an hour)",
        ),
        ("*/61 * * * *", "step of 61"),
        ("10-50/61 * * * *", "it selects only minute 10"),
        ("0 */25 * * *", "field 'hour' value '*/25' has a step of 25"),
        ("0 0 */32 * *", "it selects only day 1 (once a month)"),
        ("0 0 1 */13 *", "it selects only January (once a year)"),
        (
            "0 0 * * */9",
            "field 'day-of-week' value '*/9' has a step of 9, more than the "
            "field's range 0-7 allows: it selects only SUN (once a week)",
        ),
        ("0 0 * * 2/9", "it selects only TUE (once a week)"),
    ],
)
def test_steps_beyond_the_field_are_refused(expression: str, problem: str) -> None:
    with pytest.raises(cron.InvalidCronExpression) as caught:
        cron.validate_expression(expression)
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "expression",
    [
        "*/59 * * * *",
        "*/60 * * * *",
        "0 */24 * * *",
        "0 0 */31 * *",
        "0 0 1 */12 *",
        "0 0 * * */7",
        "0 0 * * */8",
        "0 0 * * 1-7/8",
        "10-50/60 * * * *",
    ],
)
def test_the_largest_steps_are_accepted(expression: str) -> None:
    assert cron.validate_expression(expression) == expression


def test_a_step_of_eight_days_of_the_week_is_sunday_as_in_debian_cron() -> None:
    # Debian's day-of-week field is 0-7: */8 selects 0 (Sunday), as */7 selects 0 and 7.
    sundays = cron.next_occurrences("0 0 * * 0", "UTC", utc(2026, 1, 1), 5)
    assert cron.next_occurrences("0 0 * * */8", "UTC", utc(2026, 1, 1), 5) == sundays
    assert cron.next_occurrences("0 0 * * */7", "UTC", utc(2026, 1, 1), 5) == sundays
    assert {t.weekday() for t in sundays} == {6}


# Edges of the fields as Debian's cron reads them, with cronsim (written to match it) as
# the oracle: steps as long as their field, 7 as Sunday, the OR of two restricted day
# fields and the AND when one starts with '*', names in ranges and steps, the rare days,
# and croniter's extensions. In UTC and, for daylight saving time, in New York.
CRONSIM_EDGES = [
    "*/60 * * * *",
    "10-50/60 * * * *",
    "5/20 * * * *",
    "0 */24 * * *",
    "0 22/3 * * *",
    "0 0 */31 * *",
    "0 0 1 */12 *",
    "0 0 1 jan-dec/5 *",
    "0 0 * * */7",
    "0 0 * * */8",
    "0 0 * * 7",
    "0 0 * * 0,7",
    "0 0 * * 5-7",
    "0 0 * * 1/7",
    "0 0 * * 7/1",
    "0 0 * * 0-7/2",
    "0 0 * * 1-7/3",
    "0 0 * * sat-7",
    "0 0 * * mon-fri/2",
    "0 0 */2 * 1",
    "0 0 1-7 * 1",
    "0 0 13 * 5",
    "0 0 13 * */8",
    "0 0 31 * *",
    "0 0 29 2 *",
    "0 0 30 2 1",
    "0 0 L * *",
    "0 0 L * 5",
    "0 0 * * mon#2",
    "0 0 */2 * mon#2",
    "0 0 1 * mon#2",
    "0 0 1,15 * fri#3",
    "0 0 L * mon#2",
    "30 2 * * *",
    "30 1 * * *",
    "*/20 1-3 * * *",
    "0 * * * *",
]


def test_a_nearest_weekday_or_a_day_of_the_week_runs_on_either() -> None:
    # cronsim has no W: the union of the two fields' own schedules is the oracle.
    start = utc(2026, 1, 1)
    either = cron.next_occurrences("0 0 15W * 1", "UTC", start, 30)
    apart = cron.next_occurrences("0 0 15W * *", "UTC", start, 30)
    apart += cron.next_occurrences("0 0 * * 1", "UTC", start, 30)
    assert either == sorted(set(apart))[:30]
    assert utc(2026, 1, 15) in either and utc(2026, 1, 5) in either  # a Thursday, a Monday


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK])
@pytest.mark.parametrize("expression", CRONSIM_EDGES)
def test_the_fields_edges_agree_with_cronsim(expression: str, zone: str) -> None:
    tz = ZoneInfo(zone)
    try:
        CronSim(expression, utc(2026, 1, 1))
    except CronSimError:
        # cronsim before 2.8 (the last for Python 3.10 is 2.7) refuses a day of the month
        # that February never has even when a day of the week makes it fire.
        pytest.skip(f"this cronsim refuses {expression!r}: no oracle")
    for start in (utc(2026, 1, 1), utc(2026, 3, 7, 12), utc(2026, 10, 31, 12)):
        expected = [
            t.astimezone(UTC)
            for t in itertools.islice(CronSim(expression, start.astimezone(tz)), 40)
        ]
        assert cron.next_occurrences(expression, zone, start, 40) == expected, start


@pytest.mark.parametrize("count", [0, -1])
def test_no_items_requested(count: int) -> None:
    assert cron.next_occurrences("0 0 * * *", "UTC", utc(2026, 1, 1), count) == []


@pytest.mark.parametrize(
    ("alias", "expanded"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("  @Daily ", "0 0 * * *"),
    ],
)
def test_aliases(alias: str, expanded: str) -> None:
    assert cron.validate_expression(alias) == expanded


def test_validate_normalises() -> None:
    assert cron.validate_expression("  */5   9-17 * *  MON-FRI ") == "*/5 9-17 * * MON-FRI"
    assert cron.validate_expression("5-5 1-1/3 * JAN-jan SUN-SUN") == "5 1 * JAN SUN"


def test_equal_range_means_one_value() -> None:
    # croniter alone reads "9-9" as every hour; cron reads it as 09:00.
    got = cron.occurrences("0 9-9 * * *", "UTC", utc(2026, 1, 1), utc(2026, 1, 2))
    assert got == [utc(2026, 1, 1, 9)]


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("61 * * * *", "field 'minute' value 61 is out of range 0-59"),
        ("0 24 * * *", "field 'hour' value 24 is out of range 0-23"),
        ("0 0 32 * *", "field 'day-of-month' value 32 is out of range 1-31"),
        ("0 0 * 13 *", "field 'month' value 13 is out of range 1-12"),
        ("0 0 * * 8", "field 'day-of-week' value 8 is out of range 0-7"),
        ("*/0 * * * *", "field 'minute' value '*/0' is not valid"),
        ("0 0 * * MON-FOO", "field 'day-of-week' value 'MON-FOO' is not valid"),
        ("* * * *", "it has 4 field(s), not 5"),
        ("* * * * * *", "seconds and year fields are not supported"),
        ("0 0 1 1 * 2030", "seconds and year fields are not supported"),
        ("garbage", "it has 1 field(s), not 5"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown alias '@fortnightly'"),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("H * * * *", "hashed/random syntax"),
        ("R 2 * * *", "hashed/random syntax"),
    ],
)
def test_invalid_expressions_say_how_to_fix(expression: str, problem: str) -> None:
    with pytest.raises(cron.InvalidCronExpression) as caught:
        cron.validate_expression(expression)
    message = str(caught.value)
    assert problem in message
    assert message.endswith(HOW_TO_FIX)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(cron.InvalidCronExpression):
        cron.occurrences(expression, "UTC", utc(2026, 1, 1), utc(2026, 1, 2))


def test_non_string_expression() -> None:
    with pytest.raises(cron.InvalidCronExpression, match="must be a string"):
        cron.validate_expression(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("expression", ["0 0 L * *", "0 9 * * MON#2", "0 0 ? * *", "0 0 15W * *"])
def test_croniter_extensions_are_accepted(expression: str) -> None:
    assert cron.validate_expression(expression) == expression


def test_last_day_of_month() -> None:
    got = cron.occurrences("0 0 L * *", "UTC", utc(2026, 1, 1), utc(2026, 4, 1))
    assert got == [utc(2026, 1, 31), utc(2026, 2, 28), utc(2026, 3, 31)]


def days(expression: str, after: datetime, until: datetime) -> list[int]:
    return [t.day for t in cron.occurrences(expression, "UTC", after, until)]


def test_day_of_month_or_day_of_week() -> None:
    # Debian cron: a day field is unrestricted exactly when its text starts with "*".
    # Both restricted: a day matches if either matches.
    feb, june = (utc(2026, 2, 1), utc(2026, 3, 1)), (utc(2026, 5, 31), utc(2026, 6, 30))
    assert days("0 0 13 * FRI", *feb) == [6, 13, 20, 27]
    assert cron.days_match_either("0 0 13 * FRI")
    assert days("0 0 1-31 * MON", *feb) == [*range(2, 29), 1]
    assert days("0 0 15 * 0-6", *feb) == [*range(2, 29), 1]
    assert days("0 0 5,10 * SUN-7", *feb) == [*range(2, 29), 1]  # 0-7: every day
    # One starts with "*": both must match ("*" matches every day).
    assert days("0 0 */10 * MON", *june) == [1]  # days 1, 11, 21 that are Mondays
    assert not cron.days_match_either("0 0 */10 * MON")
    assert days("0 0 */1 * MON", *june) == [1, 8, 15, 22, 29]
    assert days("0 0 * * MON", *june) == [1, 8, 15, 22, 29]
    assert days("0 0 9 * */1", *june) == [9]
    assert days("0 0 9 * */2", *june) == [9]  # June 9th 2026 is a Tuesday (2)
    assert days("0 0 10 * */2", *june) == []  # a Wednesday
    assert days("0 0 ? * MON", *june) == [1, 8, 15, 22, 29]
    assert days("0 0 5 * ?", *june) == [5]
    assert not cron.days_match_either("@weekly")


@pytest.mark.parametrize(
    ("expression", "same_as"),
    [
        ("0 0 1 SEP-9 *", "0 0 1 9 *"),
        ("0 0 1 9-SEP *", "0 0 1 9 *"),
        ("0 0 * * mon-1", "0 0 * * 1"),
        ("0 0 * * SUN-0", "0 0 * * 0"),
        ("0 0 * * 7-SUN", "0 0 * * 0"),
        ("0 0 * * 0-7", "0 0 * * *"),
        ("0 0 * * FRI-5", "0 0 * * 5"),
        ("0 0 * * 5-7", "0 0 * * 0,5,6"),
        ("0 0 * * FRI-MON", "0 0 * * 0,1,5,6"),
        ("0 22-1 * * *", "0 0,1,22,23 * * *"),
        ("0 22-2/2 * * *", "0 0,2,22 * * *"),
        ("5/20 * * * *", "5,25,45 * * * *"),
        ("0 0 * * 1/2", "0 0 * * 0,1,3,5"),  # 1-7/2: Sunday is 7
        ("0 0 * * 05", "0 0 * * 5"),
    ],
)
def test_values_not_spelling(expression: str, same_as: str) -> None:
    after = utc(2026, 1, 1)
    assert cron.next_occurrences(expression, "UTC", after, 60) == cron.next_occurrences(
        same_as, "UTC", after, 60
    )


def test_equal_ranges_are_written_as_one_value() -> None:
    assert cron.validate_expression("0 0 1 SEP-9 *") == "0 0 1 SEP *"
    assert cron.validate_expression("0 0 * * mon-1,SUN-7,0-SUN") == "0 0 * * mon,SUN-7,0"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("*/15 * * * *", True),
        ("0 * * * *", True),
        ("5 */2 * * *", True),
        ("@hourly", True),
        ("* 3 * * *", True),
        ("30 2 * * *", False),
        ("0 0 * * *", False),
        ("0-59/5 1 * * *", False),
        ("@daily", False),
        ("0,30 9-17 * * MON-FRI", False),
    ],
)
def test_is_interval(expression: str, expected: bool) -> None:
    assert cron.is_interval(expression) is expected


def test_load_zone() -> None:
    assert cron.load_zone("America/Bogota") == ZoneInfo("America/Bogota")
    with pytest.raises(cron.InvalidTimeZone, match="did you mean 'America/Bogota'") as caught:
        cron.load_zone("Bogota")
    assert isinstance(caught.value, ValueError)
    with pytest.raises(cron.InvalidTimeZone, match="'America/New_York'"):
        cron.load_zone("new york")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("America/NewYork", "America/New_York"),
        ("Europe/Pari", "Europe/Paris"),
        ("Amerca/Chicago", "America/Chicago"),
        ("Asia/Tokio", "Asia/Tokyo"),
        ("Europ/London", "Europe/London"),
    ],
)
def test_a_zone_typo_gets_the_closest_name(typo: str, meant: str) -> None:
    with pytest.raises(cron.InvalidTimeZone) as caught:
        cron.load_zone(typo)
    assert str(caught.value) == (f"{typo!r} is not an IANA time zone name; did you mean {meant!r}?")


@pytest.mark.parametrize("name", ["Nowhere/Atlantis", "Foo/Bar", "America"])
def test_a_name_like_no_zone_gets_no_suggestion(name: str) -> None:
    with pytest.raises(cron.InvalidTimeZone) as caught:
        cron.load_zone(name)
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize("name", ["Nowhere/Atlantis", "", "America", "../etc/passwd", "localtime"])
def test_load_zone_rejects(name: str) -> None:
    with pytest.raises(cron.InvalidTimeZone, match="not an IANA time zone name"):
        cron.load_zone(name)


def test_zone_given_by_name_is_validated() -> None:
    with pytest.raises(cron.InvalidTimeZone):
        cron.occurrences("0 0 * * *", "Bogota", utc(2026, 1, 1), utc(2026, 1, 2))


# --- Window edges and arguments ------------------------------------------------------------


def test_half_open_window() -> None:
    day1, day2 = utc(2026, 1, 1, 12), utc(2026, 1, 2, 12)
    assert cron.occurrences("0 12 * * *", "UTC", day1, day2) == [day2]
    assert cron.occurrences("0 12 * * *", "UTC", day1 - SECOND, day2 - SECOND) == [day1]
    assert cron.next_occurrences("0 12 * * *", "UTC", day1, 1) == [day2]


def test_half_open_window_on_a_gap_instant() -> None:
    gap_run = utc(2026, 3, 8, 7)  # "30 2 * * *" runs at 03:00 EDT
    assert cron.occurrences("30 2 * * *", NEW_YORK, gap_run - HOUR, gap_run) == [gap_run]
    assert cron.occurrences("30 2 * * *", NEW_YORK, gap_run, gap_run + HOUR) == []


def test_arguments_in_other_zones_and_results_in_utc() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    got = cron.occurrences(
        "0 9 * * *",
        ZoneInfo(NEW_YORK),
        datetime(2026, 7, 1, tzinfo=tokyo),
        datetime(2026, 7, 3, tzinfo=tokyo),
    )
    assert got == [utc(2026, 7, 1, 13), utc(2026, 7, 2, 13)]
    assert got[0].tzinfo is UTC


def test_empty_or_reversed_window() -> None:
    now = utc(2026, 1, 1)
    assert cron.occurrences("* * * * *", "UTC", now, now) == []
    assert cron.occurrences("* * * * *", "UTC", now, now - HOUR) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: cron.occurrences("* * * * *", "UTC", datetime(2026, 1, 1), utc(2026, 1, 2)),
        lambda: cron.occurrences("* * * * *", "UTC", utc(2026, 1, 1), datetime(2026, 1, 2)),
        lambda: cron.next_occurrences("* * * * *", "UTC", datetime(2026, 1, 1), 1),
    ],
)
def test_naive_datetimes_are_rejected(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        call()


def test_extreme_dates_do_not_overflow() -> None:
    late = datetime.max.replace(tzinfo=UTC)
    assert cron.next_occurrences("0 0 * * *", "Pacific/Kiritimati", late - timedelta(days=5), 10)
    assert cron.occurrences(
        "0 0 * * *", "Pacific/Kiritimati", datetime.min.replace(tzinfo=UTC), utc(1, 1, 10)
    )


def test_module_is_pure() -> None:
    tree = ast.parse(inspect.getsource(maths))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imported <= {
        "",  # from . import fields as cronfields
        "__future__",
        "collections",
        "copy",
        "croniter",
        "difflib",
        "dataclasses",
        "datetime",
        "functools",
        "heapq",
        "itertools",
        "re",
        "typing",  # TYPE_CHECKING: croniter loads with the first schedule
        "zoneinfo",
    }
    relative = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level
        for alias in node.names
    }
    assert relative == {"fields"}
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not called & {"now", "utcnow", "today", "time", "monotonic"}
    fields_tree = ast.parse(inspect.getsource(cronfields))
    assert {
        alias.name
        for node in ast.walk(fields_tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    } <= {"__future__", "dataclasses", "re"}
