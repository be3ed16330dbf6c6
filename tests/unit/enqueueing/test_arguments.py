"""django_cronqueue.enqueueing.arguments: an enqueue call's payload and options are checked before
anything is written, with errors naming the job and the offending key or option.
Database-free: the checks are called directly (tests/db/enqueueing/test_enqueue.py checks that a
refused enqueue writes no row)."""

import datetime as dt
import json
import math

import pytest
from django.test import override_settings

from django_cronqueue.cron.spec import CronSpec
from django_cronqueue.definitions.registry import JobDefinition
from django_cronqueue.enqueueing.arguments import (
    check_dedupe_key,
    check_payload,
    check_priority,
    check_queue,
    resolve_run_at,
)
from django_cronqueue.exceptions import InvalidPayload
from django_cronqueue.values.validation import MAX_JSON_DEPTH

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)


def send(user_id: int, day: str = "mon") -> None:
    return None


def anything(**kwargs) -> None:
    return None


def positional(a, /, b=0) -> None:
    return None


def keyword_only(*, a, b=0) -> None:
    return None


def nightly(run) -> None:
    return None


SEND = JobDefinition(name="emails.send", func=send, queue="emails", priority=5)
ANYTHING = JobDefinition(name="misc.anything", func=anything)
POSITIONAL = JobDefinition(name="misc.positional", func=positional)
KEYWORD_ONLY = JobDefinition(name="misc.keyword_only", func=keyword_only)
NIGHTLY = JobDefinition(name="reports.nightly", func=nightly, cron=CronSpec("0 2 * * *", "UTC"))


def refused(definition, payload):
    with pytest.raises(InvalidPayload) as caught:
        check_payload(definition, payload)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith(f"Job {definition.name!r}")
    return message


# --- the payload --------------------------------------------------------------------


def test_a_good_payload_comes_back_as_a_plain_dict():
    from types import MappingProxyType

    payload = MappingProxyType({"user_id": 1, "day": "tue"})
    checked = check_payload(SEND, payload)
    assert checked == {"user_id": 1, "day": "tue"}
    # A dict (the stored form, marked so that checking it again does not encode it twice).
    assert isinstance(checked, dict)
    assert json.loads(json.dumps(checked)) == checked
    assert check_payload(SEND, {"user_id": 1}) == {"user_id": 1}
    assert check_payload(KEYWORD_ONLY, {"a": 1}) == {"a": 1}


def test_no_payload_is_an_empty_one():
    assert check_payload(ANYTHING, None) == {}
    assert check_payload(NIGHTLY, None) == {}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        pytest.param(object(), "'user_id'", id="object"),
        pytest.param({1, 2}, "'user_id'", id="set"),
        pytest.param(1.5j, "'user_id'", id="complex"),
        pytest.param(b"bytes", "'user_id'", id="bytes"),
        pytest.param(math.nan, "'user_id'", id="nan"),
        pytest.param(-math.inf, "'user_id'", id="-inf"),
        pytest.param({"a": [1, {"b": {1}}]}, "'user_id.a[1].b'", id="nested-set"),
        pytest.param({"a": {"b": math.inf}}, "'user_id.a.b'", id="nested-inf"),
        pytest.param({2: "x"}, "'user_id'", id="nested-int-key"),
    ],
)
def test_a_value_that_is_not_json_is_refused_naming_its_path(value, path):
    message = refused(SEND, {"user_id": value})
    assert f"payload key {path}" in message


def test_the_refusal_of_a_non_json_value_says_what_to_pass_instead():
    message = refused(SEND, {"user_id": {1, 2}})
    assert "a set ({1, 2}), which is not JSON" in message
    assert "datetime, date, time, timedelta, Decimal or UUID" in message
    assert "an id instead of a model instance" in message


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        pytest.param({"user_id": "a\x00b"}, "'user_id'", id="nul-in-value"),
        pytest.param({"user_id": ["ok", "bad\x00"]}, "'user_id[1]'", id="nested-nul"),
        pytest.param({"user_id": {"k\x00": 1}}, "'user_id'", id="nul-in-nested-key"),
        pytest.param({"user_id": 1, "da\x00y": 1}, "'da\\x00y'", id="nul-in-key"),
        pytest.param({"user_id": "\ud800"}, "'user_id'", id="lone-surrogate"),
    ],
)
def test_text_a_database_cannot_store_is_refused(payload, path):
    message = refused(SEND, payload)
    assert path in message
    assert "NUL" in message or "surrogate" in message


@pytest.mark.parametrize("payload", [["user_id", 1], "user_id=1", 42, (("user_id", 1),)])
def test_a_payload_that_is_not_a_dict_is_refused(payload):
    message = refused(SEND, payload)
    assert "must be a dict of keyword arguments" in message
    assert type(payload).__name__ in message


def test_a_key_that_is_not_a_string_is_refused():
    message = refused(ANYTHING, {1: "a"})
    assert "payload key 1 is a int" in message


# --- binding to the handler's signature ---------------------------------------------


def test_a_missing_argument_is_refused_naming_it_and_the_signature():
    message = refused(SEND, {"day": "tue"})
    assert "payload key 'user_id' is missing" in message
    assert "tests.unit.enqueueing.test_arguments.send(user_id: int, day: str = 'mon')" in message


def test_an_unexpected_key_is_refused_naming_it():
    message = refused(SEND, {"user_id": 1, "usr_id": 2})
    assert "payload key 'usr_id' is not an argument of" in message


def test_a_handler_taking_kwargs_takes_any_key_but_only_json():
    assert check_payload(ANYTHING, {"x": 1, "y": [2]}) == {"x": 1, "y": [2]}
    assert "'when'" in refused(ANYTHING, {"when": {1, 2}})


def test_positional_only_arguments_cannot_be_passed():
    assert "positional-only" in refused(POSITIONAL, {"a": 1})
    assert "'a' is missing" in refused(KEYWORD_ONLY, {"b": 1})


def test_a_cron_schedule_takes_an_empty_payload_only():
    assert check_payload(NIGHTLY, {}) == {}
    message = refused(NIGHTLY, {"run": 1})
    assert "cron schedule" in message and "'run'" in message


def test_the_payload_size_limit_counts_utf8_bytes_of_json():
    with override_settings(CRONQUEUE={"MAX_PAYLOAD_BYTES": 100}):
        check_payload(ANYTHING, {"k": "x" * 91})  # {"k": "xx..."}: exactly 100 bytes
        message = refused(ANYTHING, {"k": "x" * 92})
        assert "101 bytes" in message and "MAX_PAYLOAD_BYTES" in message
        refused(ANYTHING, {"k": "é" * 46})  # 46 characters, 92 bytes of UTF-8


def nested(levels):
    value = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def test_a_payload_nested_to_the_databases_limit_is_accepted_and_one_more_level_refused():
    # The payload object is the first of MariaDB's 31 levels: a value may nest 30.
    assert check_payload(ANYTHING, {"k": nested(MAX_JSON_DEPTH - 1)}) == {
        "k": nested(MAX_JSON_DEPTH - 1)
    }
    message = refused(ANYTHING, {"k": nested(MAX_JSON_DEPTH)})
    assert "payload key 'k[0]" in message
    assert "nested 32 levels deep" in message and "at most 31" in message


def test_the_issues_40_deep_payload_is_refused():
    assert "levels deep" in refused(ANYTHING, {"k": nested(40)})


def test_a_circular_payload_is_refused_not_a_recursion_error():
    loop = []
    loop.append(loop)
    assert "'k[0]' holds itself (a circular reference)" in refused(ANYTHING, {"k": loop})
    payload = {}
    payload["k"] = {"back": payload}
    assert "'k.back' holds itself" in refused(ANYTHING, payload)


def test_an_integer_json_cannot_write_is_refused_not_a_value_error():
    message = refused(ANYTHING, {"k": [10**5000]})
    assert "'k[0]' holds an integer too long" in message


def test_invalid_payload_is_a_value_error_and_a_type_error():
    with pytest.raises(TypeError):
        check_payload(ANYTHING, {"k": {1, 2}})
    assert issubclass(InvalidPayload, ValueError) and issubclass(InvalidPayload, TypeError)


# --- options ------------------------------------------------------------------------


def test_queue_and_priority_default_to_the_jobs_own():
    assert check_queue(SEND, None) == "emails"
    assert check_queue(ANYTHING, None) == "default"
    assert check_priority(SEND, None) == 5
    assert check_queue(SEND, "bulk") == "bulk"
    assert check_priority(SEND, -(2**31)) == -(2**31)


@pytest.mark.parametrize("queue", ["", "  ", 5, "q" * 101, "a\x00b"])
def test_a_bad_queue_is_refused(queue):
    with pytest.raises(ValueError, match=r"^Job 'emails\.send': .*queue="):
        check_queue(SEND, queue)


@pytest.mark.parametrize("priority", ["high", 1.5, True, 2**31, -(2**31) - 1])
def test_a_bad_priority_is_refused(priority):
    with pytest.raises(ValueError, match=r"^Job 'emails\.send': priority= must be an integer"):
        check_priority(SEND, priority)


def test_dedupe_keys():
    assert check_dedupe_key(SEND, None) is None
    assert check_dedupe_key(SEND, "k" * 200) == "k" * 200


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", "non-empty string"),
        (42, "non-empty string"),
        ("k" * 201, "201 characters long; the limit is 200"),
        ("a\x00b", "NUL"),
    ],
)
def test_a_bad_dedupe_key_is_refused(key, expected):
    with pytest.raises(ValueError, match=r"^Job 'emails\.send': ") as caught:
        check_dedupe_key(SEND, key)
    assert "dedupe_key=" in str(caught.value)
    assert expected in str(caught.value)


def test_run_at_and_delay():
    later = dt.datetime(2030, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert resolve_run_at(SEND, NOW, None, None) == NOW
    assert resolve_run_at(SEND, NOW, later, None) is later
    assert resolve_run_at(SEND, NOW, None, dt.timedelta(minutes=5)) == NOW + dt.timedelta(minutes=5)
    assert resolve_run_at(SEND, NOW, None, 90) == NOW + dt.timedelta(seconds=90)
    assert resolve_run_at(SEND, NOW, None, 0.5) == NOW + dt.timedelta(seconds=0.5)


@pytest.mark.parametrize(
    ("run_at", "delay", "expected"),
    [
        (NOW, 5, "not both"),
        ("2030-01-01T00:00:00Z", None, "must be a datetime"),
        (dt.date(2030, 1, 1), None, "must be a datetime"),
        (dt.datetime(2030, 1, 1), None, "naive"),
        (None, "5 minutes", "delay="),
        (None, True, "delay="),
        (None, math.nan, "delay="),
        (None, math.inf, "delay="),
    ],
    ids=repr,
)
def test_bad_run_at_or_delay_is_refused(run_at, delay, expected):
    with pytest.raises(ValueError, match=r"^Job 'emails\.send': ") as caught:
        resolve_run_at(SEND, NOW, run_at, delay)
    assert expected in str(caught.value)


def test_without_use_tz_run_at_is_naive_local_time():
    naive = dt.datetime(2030, 1, 1, 9, 30)
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        assert resolve_run_at(SEND, naive, naive, None) is naive
        aware = dt.datetime(2030, 1, 1, 8, 30, tzinfo=dt.timezone.utc)
        assert resolve_run_at(SEND, naive, aware, None) == naive  # 09:30 in Paris
