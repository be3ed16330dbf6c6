"""django_cronqueue.db.clock without a database: the offset read from a round trip, and the
corrected clock that a worker trusts, or not, by MAX_CLOCK_SKEW."""

import datetime as dt
import logging
from types import SimpleNamespace

import pytest
from django.utils import timezone

from django_cronqueue.db import clock as dbclock
from django_cronqueue.db.clock import CorrectedClock, Reading, beyond, read_offset

HOST_NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def host_clock(monkeypatch):
    """This host's clock stands still at HOST_NOW; the monotonic clock reads the given
    values in turn."""

    def set_monotonic(*values):
        ticks = iter(values)
        monkeypatch.setattr(dbclock, "time", SimpleNamespace(monotonic=lambda: next(ticks)))

    monkeypatch.setattr(timezone, "now", lambda: HOST_NOW)
    return set_monotonic


def seconds(value):
    return dt.timedelta(seconds=value)


# --- read_offset -----------------------------------------------------------------------


def test_the_database_answer_is_taken_for_the_midpoint_of_the_round_trip(host_clock):
    host_clock(100.0, 102.0)  # a round trip of 2 s: the answer is from HOST_NOW + 1 s

    reading = read_offset(lambda: HOST_NOW - seconds(5), samples=1)

    assert reading == Reading(offset=6.0, round_trip=2.0)


def test_the_reading_with_the_shortest_round_trip_is_kept(host_clock):
    host_clock(0.0, 3.0, 10.0, 10.2, 20.0, 21.0)
    answers = iter([HOST_NOW - seconds(40), HOST_NOW - seconds(30), HOST_NOW + seconds(9)])

    reading = read_offset(lambda: next(answers), samples=3)

    assert reading.offset == pytest.approx(30.1)
    assert reading.round_trip == pytest.approx(0.2)


def test_a_host_behind_the_database_has_a_negative_offset(host_clock):
    host_clock(0.0, 0.0)

    assert read_offset(lambda: HOST_NOW + seconds(12), samples=1).offset == -12.0


@pytest.mark.parametrize(
    ("offset", "expected"), [(None, False), (0.0, False), (10.0, False), (10.01, True), (-11, True)]
)
def test_beyond_the_limit_either_way(offset, expected):
    assert beyond(offset, 10.0) is expected


# --- CorrectedClock -------------------------------------------------------------------


def clock_records(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records if "clock" in r.getMessage()]


def test_an_unmeasured_clock_is_not_trusted_and_not_corrected(host_clock):
    clock = CorrectedClock("Worker w1", max_skew=10.0)

    assert not clock.trusted
    assert clock.now() == HOST_NOW


def test_the_clock_is_corrected_by_the_measured_offset_either_way(host_clock):
    clock = CorrectedClock("Worker w1", max_skew=10.0)

    clock.update(Reading(offset=95.5, round_trip=0.01))
    assert clock.now() == HOST_NOW - seconds(95.5)
    clock.update(Reading(offset=-3.0, round_trip=0.01))
    assert clock.now() == HOST_NOW + seconds(3)


def test_a_clock_within_the_limit_is_trusted_silently(host_clock, caplog):
    clock = CorrectedClock("Worker w1", max_skew=10.0)

    for offset in (0.002, 10.0, -10.0):
        clock.update(Reading(offset=offset, round_trip=0.01))
        assert clock.trusted

    assert clock_records(caplog) == []


def test_a_clock_beyond_the_limit_is_refused_with_one_error_until_it_is_back(host_clock, caplog):
    caplog.set_level(logging.INFO, logger="django_cronqueue")
    clock = CorrectedClock("Worker w1", max_skew=10.0)

    clock.update(Reading(offset=0.001, round_trip=0.01))
    for offset in (30.04, 31.0, 29.5):  # three heartbeats beyond the limit
        clock.update(Reading(offset=offset, round_trip=0.01))
        assert not clock.trusted
    clock.update(Reading(offset=0.3, round_trip=0.01))
    assert clock.trusted
    clock.update(Reading(offset=0.2, round_trip=0.01))

    assert clock_records(caplog) == [
        (
            "ERROR",
            "Worker w1: this host's clock is 30.0s ahead of the database's, more than "
            "MAX_CLOCK_SKEW (10s); claiming no jobs until it is back within. Fix the host's "
            "time synchronisation (NTP), or the database server's.",
        ),
        (
            "WARNING",
            "Worker w1: this host's clock is back within MAX_CLOCK_SKEW (10s) of the "
            "database's (0.3s ahead of it); claiming again.",
        ),
    ]


def test_a_first_reading_beyond_the_limit_is_an_error_naming_the_direction(host_clock, caplog):
    clock = CorrectedClock("Worker w1", max_skew=2.0)

    clock.update(Reading(offset=-12.0, round_trip=0.01))

    assert not clock.trusted
    [(level, message)] = clock_records(caplog)
    assert level == "ERROR"
    assert "clock is 12.0s behind the database's, more than MAX_CLOCK_SKEW (2s)" in message
