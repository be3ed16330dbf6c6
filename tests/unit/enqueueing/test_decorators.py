"""django_cronqueue.enqueueing.decorators: what @jobs.job and @jobs.cron return, and the checks
they make at import time. Database-free (the registry's naming and option rules are in
test_registry.py; enqueueing through a handle is in tests/db/enqueueing/test_enqueue.py)."""

import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_cronqueue import jobs
from django_cronqueue.cron.spec import CronSpec
from django_cronqueue.definitions.registry import registry
from django_cronqueue.enqueueing.decorators import EnqueueOptions, JobHandle
from tests.cron_helpers import schedule
from tests.testapp import jobs as test_jobs


@pytest.fixture(autouse=True)
def _restore_registry():
    """Jobs defined by a test do not outlive it."""
    saved = dict(registry._definitions)
    yield
    registry._definitions.clear()
    registry._definitions.update(saved)


# --- @jobs.job ----------------------------------------------------------------------


def test_a_job_handle_is_registered_and_still_calls_the_function():
    assert isinstance(test_jobs.returns_value, JobHandle)
    assert registry.get("testapp.returns_value") is test_jobs.returns_value
    assert test_jobs.returns_value(value=4) == {"doubled": 8}
    assert test_jobs.returns_value.cron is None


def test_using_keeps_the_options_for_the_next_enqueue():
    when = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    options = test_jobs.record.using(run_at=when, dedupe_key="k", priority=3, queue="q")
    assert isinstance(options, EnqueueOptions)
    assert options.definition is test_jobs.record
    assert options.options == {"run_at": when, "dedupe_key": "k", "priority": 3, "queue": "q"}


def test_using_refuses_unknown_options_naming_the_job_and_the_allowed_ones():
    with pytest.raises(TypeError) as caught:
        test_jobs.record.using(retries=3, timeout=5)
    message = str(caught.value)
    assert "'testapp.record'" in message
    assert "unknown option(s) retries, timeout" in message
    assert (
        "allowed: after, dedupe_for, dedupe_key, delay, fair_key, priority, queue, run_at"
        in message
    )


@pytest.mark.parametrize(
    ("options", "fix"),
    [
        ({"max_retries": 3}, "max_retries=: use retries="),
        ({"time_limit": 60}, "time_limit=: use timeout="),
        ({"soft_time_limit": 50}, "soft_time_limit=: use soft_timeout="),
        ({"autoretry_for": (KeyError,)}, "autoretry_for=: use retry_on="),
        ({"dont_autoretry_for": (KeyError,)}, "dont_autoretry_for=: use discard_on="),
        ({"bind": True}, "call jobs.current() inside it"),
        ({"takes_context": True}, "call jobs.current() inside the handler"),
        ({"queue_name": "emails"}, "queue_name=: use queue="),
        ({"max_attempts": 3}, "max_attempts=: use retries= (retries after the first attempt"),
        ({"catchup": "all"}, "use catch_up= ('latest', 'all' or 'none'), an option of @jobs.cron"),
        ({"retrys": 3}, "retrys=: did you mean retries=?"),
        ({"every": 5}, "every=: not an option (accepted: backoff, concurrency, dedupe_for,"),
    ],
)
def test_an_option_of_another_tool_names_the_job_and_the_option_to_use(options, fix):
    with pytest.raises(TypeError) as caught:

        @jobs.job(name="shop.sync_account", **options)
        def sync_account(account_id: int) -> None:
            return None

    message = str(caught.value)
    assert message.startswith("Job 'shop.sync_account': @jobs.job() does not take ")
    assert fix in message
    assert "shop.sync_account" not in registry


def test_every_unknown_option_gets_its_fix_in_one_message():
    with pytest.raises(TypeError) as caught:
        jobs.job(name="shop.render", time_limit=60, soft_time_limit=50)(lambda: None)
    assert str(caught.value) == (
        "Job 'shop.render': @jobs.job() does not take soft_time_limit=: use soft_timeout= "
        "(seconds, below timeout=; raises jobs.SoftTimeLimitExceeded inside the handler); "
        "time_limit=: use timeout= (seconds; past it the attempt fails with "
        "jobs.TimeLimitExceeded, and the process pool kills the child)."
    )


def test_enqueue_many_refuses_one_dedupe_key_for_many_jobs():
    with pytest.raises(TypeError, match="dedupe_key"):
        test_jobs.record.using(dedupe_key="k").enqueue_many([{"key": "a"}])


# --- @jobs.cron ---------------------------------------------------------------------


def test_a_cron_handle_carries_its_checked_spec():
    @jobs.cron("@hourly", name="reports.hourly", tz="Europe/Paris", overlap="skip", retries=0)
    def hourly(run: jobs.CronRun) -> None:
        return None

    assert isinstance(hourly, JobHandle)
    assert registry.get("reports.hourly") is hourly
    assert hourly.cron == CronSpec(expression="0 * * * *", tz="Europe/Paris", overlap="skip")
    assert hourly.max_attempts == 1


def test_an_unknown_cron_option_is_refused_naming_it_and_the_accepted_ones():
    with pytest.raises(ImproperlyConfigured) as caught:
        jobs.cron("* * * * *", name="reports.x", every=5)(lambda run: None)
    message = str(caught.value)
    assert message.startswith("Cron schedule 'reports.x': @jobs.cron() does not take every=")
    assert "accepted: backoff, catch_up, catch_up_window," in message
    assert "reports.x" not in registry


@pytest.mark.parametrize(
    ("options", "fix"),
    [
        ({"catchup": "all"}, "catchup=: use catch_up= ('latest', 'all' or 'none')"),
        ({"catchup_window": 60}, "catchup_window=: use catch_up_window="),
        ({"max_retries": 3}, "max_retries=: use retries="),
        ({"time_limit": 60}, "time_limit=: use timeout="),
        ({"timezone": "UTC"}, "timezone=: use tz="),
        ({"overlapp": "skip"}, "overlapp=: did you mean overlap=?"),
    ],
)
def test_a_cron_option_of_another_tool_names_the_one_to_use(options, fix):
    with pytest.raises(ImproperlyConfigured) as caught:
        jobs.cron("0 7 * * *", name="reports.morning", **options)(lambda run: None)
    assert str(caught.value).startswith("Cron schedule 'reports.morning': @jobs.cron() does not")
    assert fix in str(caught.value)
    assert "reports.morning" not in registry


@pytest.mark.parametrize(
    ("expression", "options", "message"),
    [
        ("61 * * * *", {}, "61"),
        ("* * * *", {}, "five fields"),
        ("* * * * *", {"tz": "Bogota"}, "America/Bogota"),
        ("*/90 * * * *", {}, "'*/90' has a step of 90, more than the field's range 0-59 allows"),
        ("0 */25 * * *", {}, "step of 25"),
        ("0 0 31 2 *", {}, "it can never run: February never has a day 31"),
        ("0 0 30 2 *", {}, "it can never run: February never has a day 30"),
        ("* * * * *", {"tz": "America/NewYork"}, "did you mean 'America/New_York'?"),
        ("* * * * *", {"tz": "Europe/Pari"}, "did you mean 'Europe/Paris'?"),
        ("* * * * *", {"catch_up": "some"}, "catch_up"),
        ("* * * * *", {"concurrency": 2}, "overlap='skip'"),
        ("* * * * *", {"catch_up_window": dt.timedelta(0)}, "catch_up_window"),
        ("* * * * *", {"max_catch_up": 0}, "max_catch_up"),
        ("* * * * *", {"overlap": "queue"}, "overlap"),
        ("* * * * *", {"retries": -1}, "retries"),
    ],
)
def test_bad_schedules_fail_at_import_naming_the_schedule_and_the_fix(expression, options, message):
    with pytest.raises(ImproperlyConfigured) as caught:
        jobs.cron(expression, name="reports.nightly", **options)(lambda run: None)
    assert "reports.nightly" in str(caught.value)
    assert message in str(caught.value)
    assert "reports.nightly" not in registry


def test_a_cron_handler_must_take_the_run():
    with pytest.raises(ImproperlyConfigured, match="CronRun"):
        jobs.cron("* * * * *", name="reports.bad")(lambda: None)


def test_tz_defaults_to_settings_time_zone(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    with schedule("0 9 * * *") as definition:
        assert definition.cron.tz == "Europe/Berlin"
