"""django_cronqueue.cron.spec: @jobs.cron's options checked into a CronSpec, and the
CronRun a cron handler receives for a row."""

import datetime as dt
import math
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_cronqueue.cron.spec import MISSED_AFTER, CronRun, CronSpec, checked_spec

UTC = dt.timezone.utc
PARIS = ZoneInfo("Europe/Paris")
DEFAULTS = {
    "tz": "UTC",
    "catch_up": "latest",
    "catch_up_window": None,
    "max_catch_up": 10,
    "overlap": "allow",
}


def spec(expression="30 2 * * *", **options):
    return checked_spec("reports.nightly", expression, **{**DEFAULTS, **options})


# --- checked_spec -------------------------------------------------------------------


def test_a_valid_spec_keeps_every_option():
    made = spec(
        "@daily",
        tz="Europe/Paris",
        catch_up="all",
        catch_up_window=dt.timedelta(hours=2),
        max_catch_up=3,
        overlap="skip",
    )
    assert made == CronSpec(
        expression="0 0 * * *",  # the alias, normalised
        tz="Europe/Paris",
        catch_up="all",
        catch_up_window=dt.timedelta(hours=2),
        max_catch_up=3,
        overlap="skip",
    )
    assert made.zone == PARIS
    assert made.options() == {
        "catch_up": "all",
        "catch_up_window": 7200.0,
        "max_catch_up": 3,
        "overlap": "skip",
    }


@override_settings(TIME_ZONE="America/New_York")
def test_tz_none_is_the_settings_time_zone():
    assert spec(tz=None).tz == "America/New_York"


def test_catch_up_window_in_seconds_or_from_the_setting():
    assert spec(catch_up_window=90).catch_up_window == dt.timedelta(seconds=90)
    assert spec(catch_up_window=0.5).window == dt.timedelta(seconds=0.5)
    default = spec()
    assert default.catch_up_window is None
    assert default.window == dt.timedelta(hours=1)
    with override_settings(CRONQUEUE={"CATCH_UP_WINDOW": 60}):
        assert default.window == dt.timedelta(minutes=1)
        assert default.options()["catch_up_window"] == 60.0


@pytest.mark.parametrize(
    ("expression", "options", "expected"),
    [
        ("61 * * * *", {}, "61"),
        ("* * * *", {}, "five fields"),
        ("* * * * *", {"tz": "Bogota"}, "option tz= "),
        ("* * * * *", {"tz": ""}, "option tz= "),
        ("* * * * *", {"catch_up": "some"}, "option catch_up= must be one of"),
        ("* * * * *", {"overlap": "queue"}, "option overlap= must be 'allow' or 'skip'"),
        ("* * * * *", {"max_catch_up": 0}, "option max_catch_up= must be an integer >= 1"),
        ("* * * * *", {"max_catch_up": 2.0}, "option max_catch_up="),
        ("* * * * *", {"max_catch_up": True}, "option max_catch_up="),
        ("* * * * *", {"catch_up_window": 0}, "catch_up_window= must be a positive timedelta"),
        ("* * * * *", {"catch_up_window": -5}, "option catch_up_window="),
        ("* * * * *", {"catch_up_window": math.nan}, "option catch_up_window="),
        ("* * * * *", {"catch_up_window": "1h"}, "option catch_up_window="),
        ("* * * * *", {"catch_up_window": True}, "option catch_up_window="),
        ("* * * * *", {"catch_up_window": dt.timedelta(0)}, "option catch_up_window="),
    ],
    ids=repr,
)
def test_a_bad_option_is_refused_naming_the_schedule_and_the_option(expression, options, expected):
    with pytest.raises(ImproperlyConfigured) as caught:
        spec(expression, **options)
    message = str(caught.value)
    assert message.startswith("Cron schedule 'reports.nightly': ")
    assert expected in message


def test_a_misspelt_zone_suggests_the_right_one():
    with pytest.raises(ImproperlyConfigured, match="America/Bogota"):
        spec(tz="Bogota")


# --- run_for ------------------------------------------------------------------------


def test_a_manual_run_is_scheduled_for_its_request_time_in_the_schedules_zone():
    created = dt.datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    run = spec(tz="Europe/Paris").run_for(job_id=7, scheduled_for=None, created_at=created)
    assert run == CronRun(scheduled_for=created, catch_up=False, job_id=7)
    assert run.scheduled_for.tzinfo == PARIS
    assert run.scheduled_for.hour == 13


def test_an_occurrence_materialized_on_time_is_not_a_catch_up():
    occurrence = dt.datetime(2026, 3, 1, 2, 30, tzinfo=UTC)
    paris = spec(tz="Europe/Paris")
    for delay in (dt.timedelta(0), dt.timedelta(seconds=5), MISSED_AFTER):
        run = paris.run_for(job_id=1, scheduled_for=occurrence, created_at=occurrence + delay)
        assert (run.scheduled_for, run.catch_up, run.job_id) == (occurrence, False, 1)
        assert run.scheduled_for.tzinfo == PARIS


def test_an_occurrence_materialized_more_than_a_minute_late_is_a_catch_up():
    assert dt.timedelta(minutes=1) == MISSED_AFTER
    occurrence = dt.datetime(2026, 3, 1, 2, 30, tzinfo=UTC)
    late = occurrence + MISSED_AFTER + dt.timedelta(microseconds=1)
    run = spec().run_for(job_id=2, scheduled_for=occurrence, created_at=late)
    assert (run.scheduled_for, run.catch_up) == (occurrence, True)
    hours_late = spec().run_for(
        job_id=2, scheduled_for=occurrence, created_at=occurrence + dt.timedelta(hours=3)
    )
    assert hours_late.catch_up is True


def test_a_cron_run_is_immutable():
    run = CronRun(scheduled_for=dt.datetime(2026, 1, 1, tzinfo=UTC))
    assert (run.catch_up, run.job_id) == (False, None)
    with pytest.raises(AttributeError):
        run.catch_up = True


# --- occurrences --------------------------------------------------------------------


def test_occurrences_and_next_runs_follow_the_zone():
    paris = spec("0 9 * * *", tz="Europe/Paris")
    after = dt.datetime(2026, 3, 27, 0, 0, tzinfo=UTC)  # the clocks go forward on the 29th
    runs = paris.next_runs(after, 3)
    assert [run.astimezone(PARIS).hour for run in runs] == [9, 9, 9]
    assert [run.astimezone(UTC).hour for run in runs] == [8, 8, 7]
    assert paris.occurrences(after, after + dt.timedelta(days=3)) == runs
    assert spec("*/15 * * * *").is_interval and not paris.is_interval
