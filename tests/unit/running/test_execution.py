"""execution.storable_result and result_problem: which return values a row keeps, and
what a Call makes of one it cannot keep. Database-free; the rest of execution is tested
in tests/db/running/test_execution.py."""

import datetime as dt
import math

import pytest
from django.test import override_settings

from django_cronqueue.claiming import ClaimedJob
from django_cronqueue.definitions.registry import JobDefinition
from django_cronqueue.running.execution import Call, result_problem, storable_result
from django_cronqueue.values.validation import MAX_JSON_DEPTH


class BrokenIterable(list):
    def __iter__(self):
        raise RuntimeError("broken __iter__")


def deeply_nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {"doubled": 42},
        [1, "two", 3.5, None, True],
        "text",
        0,
        False,
        "a \\u0000 that is only text",
        {"nested": {"list": [1, {"deep": "é"}]}},
    ],
    ids=repr,
)
def test_json_values_are_kept_as_they_are(value):
    assert storable_result(value) is value


@pytest.mark.parametrize(
    "value",
    [
        None,
        dt.datetime(2026, 1, 1),
        {1, 2},
        b"bytes",
        object(),
        math.nan,
        {"x": math.inf},
        "a\x00b",
        {"key": ["ok", "nul\x00"]},
        "\ud800",
        deeply_nested(100_000),
        BrokenIterable([1]),
    ],
    ids=[
        "none",
        "datetime",
        "set",
        "bytes",
        "object",
        "nan",
        "nested-inf",
        "nul",
        "nested-nul",
        "lone-surrogate",
        "too-deep",
        "broken-iter",
    ],
)
def test_values_the_database_cannot_store_become_none(value):
    assert storable_result(value) is None


def test_results_over_max_payload_bytes_are_dropped():
    with override_settings(CRONQUEUE={"MAX_PAYLOAD_BYTES": 20}):
        assert storable_result("x" * 18) == "x" * 18  # 20 bytes of JSON with the quotes
        assert storable_result("x" * 19) is None
        assert storable_result("é" * 10) is None  # 10 characters, 22 bytes


def test_a_result_nested_to_the_databases_limit_is_kept_and_one_more_level_dropped():
    # The result is the whole stored document: it may nest MAX_JSON_DEPTH levels.
    deepest = deeply_nested(MAX_JSON_DEPTH - 1)  # the innermost [] is a level too
    assert storable_result(deepest) is deepest
    problem = result_problem(deeply_nested(MAX_JSON_DEPTH))
    assert problem.startswith("return value 'result[0]")
    assert "nested 32 levels deep" in problem and "at most 31" in problem


def test_a_circular_result_and_an_integer_json_cannot_write_are_dropped_with_a_reason():
    loop = {}
    loop["self"] = loop
    assert "'result.self' holds itself (a circular reference)" in result_problem(loop)
    assert "'result[1]' holds an integer too long" in result_problem([1, 10**5000])


def test_a_result_that_breaks_when_read_is_dropped_with_a_reason():
    assert result_problem(BrokenIterable([1])) == (
        "return value could not be read as JSON: RuntimeError: broken __iter__"
    )


def claimed(name="misc.job"):
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return ClaimedJob(
        id=7,
        name=name,
        payload={},
        attempts=1,
        max_attempts=4,
        queue="default",
        priority=0,
        run_at=now,
        scheduled_for=None,
        created_at=now,
        token="t",
    )


class StrictDefinition(JobDefinition):
    unstorable_result_fails = True


def handler() -> None:
    return None


def test_a_call_whose_result_cannot_be_stored_succeeds_without_it():
    when = dt.datetime(2026, 1, 1)
    outcome = Call(claimed(), JobDefinition(name="misc.job", func=handler), result={"at": when})
    assert outcome.succeeded and outcome.error is None
    assert "'result.at' holds a datetime" in outcome.result_problem
    assert outcome.result == {"at": when}  # for job_succeeded's receivers
    assert outcome.stored_result is None


def test_a_call_of_a_definition_that_needs_storable_results_fails_for_good():
    definition = StrictDefinition(name="misc.job", func=handler)
    outcome = Call(claimed(), definition, result={1, 2})
    assert not outcome.succeeded and outcome.final
    assert type(outcome.error) is TypeError
    assert str(outcome.error).startswith(
        "Job misc.job #7 returned a value that cannot be stored: return value 'result' "
        "holds a set ({1, 2}), which is not JSON."
    )
    assert Call(claimed(), definition, result={"fine": 1}).succeeded
