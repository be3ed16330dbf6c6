"""``manage.py cronqueue_pause``: a thin command over jobs.pause() and jobs.resume()."""

import datetime as dt
import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import Pause
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

UTC = dt.timezone.utc
YEAR = timezone.now().year + 4  # a future year, far enough for every test


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("cronqueue_pause", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_pause_a_queue_until_resumed():
    JobFactory(queue="emails")
    out, err = run("--queue", "emails", "--reason", "SMTP provider down")
    assert out == "Paused queue emails until resumed: no worker claims its pending jobs.\n"
    assert err == ""
    pause = Pause.objects.get()
    assert (pause.queue, pause.name, pause.until) == ("emails", "", None)
    assert pause.reason == "SMTP provider down"
    assert pause.created_by.endswith("(cronqueue_pause)")
    assert jobs.tick().claimed == 0


def test_pause_a_job_name_until_an_instant_with_an_offset():
    out, _ = run("--name", "testapp.noop", "--until", f"{YEAR}-06-01T14:00:00+02:00")
    until = dt.datetime(YEAR, 6, 1, 12, tzinfo=UTC)
    assert Pause.objects.get().until == until
    assert out == (
        f"Paused job testapp.noop until {YEAR}-06-01T14:00:00+02:00: no worker claims its "
        "pending jobs.\n"
    )


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        (f"{YEAR}-06-01T12:00Z", dt.datetime(YEAR, 6, 1, 12, tzinfo=UTC)),
        (f"{YEAR}-06-01T14:00", dt.datetime(YEAR, 6, 1, 18, tzinfo=UTC)),  # EDT
        (f"{YEAR}-12-01 14:00:30", dt.datetime(YEAR, 12, 1, 19, 0, 30, tzinfo=UTC)),  # EST
        (f"{YEAR}-12-01", dt.datetime(YEAR, 12, 1, 5, tzinfo=UTC)),  # midnight, local
    ],
)
def test_an_instant_without_an_offset_is_read_in_the_time_zone_setting(settings, text, utc):
    settings.TIME_ZONE = "America/New_York"
    run("--queue", "emails", "--until", text)
    assert Pause.objects.get().until == utc


def second_sunday_of_march(year):
    first = dt.date(year, 3, 1)
    return first + dt.timedelta(days=(6 - first.weekday()) % 7 + 7)


def first_sunday_of_november(year):
    first = dt.date(year, 11, 1)
    return first + dt.timedelta(days=(6 - first.weekday()) % 7)


@pytest.mark.parametrize(
    ("day", "problem"),
    [
        (second_sunday_of_march, "does not exist (the clocks skip it)"),
        (first_sunday_of_november, "happens twice"),
    ],
)
def test_a_local_time_that_daylight_saving_skips_or_repeats_is_refused(settings, day, problem):
    settings.TIME_ZONE = "America/New_York"
    text = f"{day(YEAR).isoformat()}T01:30" if "twice" in problem else f"{day(YEAR)}T02:30"
    with pytest.raises(CommandError, match=re.escape(problem)) as refused:
        run("--queue", "emails", "--until", text)
    assert "America/New_York (settings.TIME_ZONE): give an offset" in str(refused.value)
    assert not Pause.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --queue --name is required"),
        (["--queue", "a", "--name", "b"], "argument --name: not allowed with argument --queue"),
        (["--queue", "a", "--until", "tomorrow"], "'tomorrow' is not an ISO 8601 date and time"),
        (["--queue", "a", "--until", f"{YEAR}-02-30T10:00"], "is not an ISO 8601 date and time"),
        (["--queue", "a", "--until", "2001-01-01T00:00Z"], "has passed: the pause would end"),
        (["--queue", ""], "queue='': a queue is a non-empty string"),
        (["--name", "x" * 300], "a job name is a non-empty string of at most"),
        (["--queue", "a", "--resume", "--reason", "r"], "--resume ends a pause: it takes no"),
        (["--queue", "a", "--resume", "--until", f"{YEAR}-01-01T00:00Z"], "takes no --until"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(args, message):
    jobs.pause(queue="kept")
    with pytest.raises(CommandError, match=re.escape(message)):
        run(*args)
    assert list(Pause.objects.values_list("queue", "name", "reason")) == [("kept", "", "")]


def test_resume():
    jobs.pause(queue="emails")
    out, _ = run("--queue", "emails", "--resume")
    assert out == "Resumed queue emails.\n"
    assert not Pause.objects.exists()
    out, _ = run("--queue", "emails", "--resume")
    assert out == "Queue emails was not paused.\n"


def test_a_job_name_no_code_defines_is_paused_with_a_note():
    out, err = run("--name", "shop.typo")
    assert out.startswith("Paused job shop.typo until resumed")
    assert err == (
        "Note: no code in this process defines a job named shop.typo; "
        "the pause holds all the same.\n"
    )
    assert Pause.objects.get().name == "shop.typo"


def test_a_queue_no_job_uses_is_paused_with_a_note():
    JobFactory(queue="emails")
    out, err = run("--queue", "emial")
    assert out.startswith("Paused queue emial until resumed")
    note, in_use = err.rstrip(".\n").split(" Queues in use: ")
    assert note == (
        "Note: no job that code in this process defines uses queue emial, and no job row is "
        "in it; the pause holds all the same."
    )
    assert {"default", "emails"} <= set(in_use.split(", "))
    assert Pause.objects.get().queue == "emial"


def test_a_queue_that_only_a_definition_or_only_a_row_uses_gets_no_note():
    _, err = run("--queue", "default")  # the queue of every test job, no row yet
    assert err == ""
    JobFactory(queue="legacy")  # a row of a job no code defines any more
    _, err = run("--queue", "legacy")
    assert err == ""


def test_pausing_again_replaces_the_end_and_the_reason():
    run("--queue", "emails", "--reason", "first", "--until", f"{YEAR}-01-01T00:00Z")
    run("--queue", "emails", "--reason", "second")
    pause = Pause.objects.get()
    assert (pause.reason, pause.until) == ("second", None)


def test_the_help_says_how_until_is_read():
    from django.core.management import load_command_class

    command = load_command_class("django_cronqueue", "cronqueue_pause")
    text = command.create_parser("manage.py", "cronqueue_pause").format_help()
    assert "settings.TIME_ZONE" in " ".join(text.split())
    assert "--queue Q | --name N" in text
