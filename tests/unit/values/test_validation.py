"""django_cronqueue.values.validation: the column limits and the predicates every check uses."""

import math
import sys

import pytest

from django_cronqueue.models import Job
from django_cronqueue.values import validation
from django_cronqueue.values.validation import (
    is_finite_number,
    is_int,
    is_priority,
    is_queue_name,
    json_problem,
    short_repr,
    text_problem,
)


def test_the_limits_are_the_columns_limits():
    assert validation.MAX_NAME_LENGTH == Job._meta.get_field("name").max_length == 200
    assert validation.MAX_QUEUE_LENGTH == Job._meta.get_field("queue").max_length == 100
    assert Job._meta.get_field("dedupe_key").max_length == validation.MAX_DEDUPE_KEY_LENGTH
    assert (validation.MIN_PRIORITY, validation.MAX_PRIORITY) == (-2147483648, 2147483647)


@pytest.mark.parametrize(("value", "expected"), [(0, True), (-3, True), (2**70, True)])
def test_is_int_takes_ints(value, expected):
    assert is_int(value) is expected


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None])
def test_is_int_refuses_bools_floats_and_strings(value):
    assert is_int(value) is False


@pytest.mark.parametrize("value", [0, 1, -1.5, 1e300])
def test_finite_numbers(value):
    assert is_finite_number(value) is True


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", None])
def test_not_finite_numbers(value):
    assert is_finite_number(value) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, True),
        (-(2**31), True),
        (2**31 - 1, True),
        (2**31, False),
        (-(2**31) - 1, False),
        (True, False),
        (1.0, False),
        ("1", False),
    ],
)
def test_is_priority_is_a_32_bit_integer(value, expected):
    assert is_priority(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("default", True),
        ("q" * 100, True),
        ("q" * 101, False),
        ("", False),
        (" \t", False),
        (5, False),
        (None, False),
    ],
)
def test_is_queue_name(value, expected):
    assert is_queue_name(value) is expected


def test_text_problem_of_clean_text_is_none():
    assert text_problem("plain ascii", "x") is None
    assert text_problem("émoji 🎉 and \\x00 spelt out", "x") is None


def test_text_problem_names_a_nul_and_how_to_fix_it():
    problem = text_problem("a\x00b", "payload key 'k'")
    assert problem.startswith("payload key 'k' contains a NUL character")
    assert "base64" in problem


def test_text_problem_names_a_lone_surrogate():
    problem = text_problem("a\udc80", "dedupe_key=")
    assert problem.startswith("dedupe_key= contains a lone surrogate")
    assert "UTF-8" in problem


def test_short_repr_keeps_short_values_and_cuts_long_ones():
    assert short_repr("abc") == "'abc'"
    long = short_repr("x" * 100)
    assert len(long) == 60 and long.endswith("...") and long.startswith("'xxx")
    assert short_repr(list(range(10)), limit=10) == "[0, 1, ..."


# --- json_problem: what every supported database stores as JSON ---------------------


def nested(levels, kind="list", bottom="x"):
    """``bottom`` inside ``levels`` lists (or dicts): JSON nested ``levels`` deep."""
    value = bottom
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


def problem_of(value, **options):
    return json_problem(value, "v", noun="payload key", **options)


def test_the_depth_limit_is_mariadbs():
    # MariaDB's JSON_VALID accepts 31 levels of arrays and objects, not 32; the test at
    # tests/db/enqueueing/test_enqueue.py::test_mariadb_refuses_one_level_past_the_limit proves it.
    assert validation.MAX_JSON_DEPTH == 31


@pytest.mark.parametrize("kind", ["list", "dict"])
@pytest.mark.parametrize("bottom", ["x", [], {}], ids=["scalar", "empty-list", "empty-dict"])
def test_json_nested_to_the_limit_is_accepted_and_one_level_more_refused(kind, bottom):
    # An empty container at the bottom is a level of its own.
    levels = validation.MAX_JSON_DEPTH - (0 if bottom == "x" else 1)
    assert problem_of(nested(levels, kind, bottom)) is None
    problem = problem_of(nested(levels + 1, kind, bottom))
    assert problem.startswith("payload key 'v")
    assert "nested 32 levels deep" in problem and "at most 31" in problem


def test_depth_counts_from_the_top_of_the_stored_document():
    assert problem_of(nested(30), depth=2) is None
    assert "nested 32 levels deep" in problem_of(nested(31), depth=2)


def test_a_value_nested_far_too_deep_is_refused_without_recursion_error():
    assert "levels deep" in problem_of(nested(100_000))


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_circular_value_is_refused_naming_where(kind):
    value = [] if kind == "list" else {}
    inner = {"loop": value}
    if kind == "list":
        value.append(inner)
    else:
        value["inner"] = inner
    problem = problem_of(value)
    assert "circular reference" in problem
    assert problem.startswith(
        "payload key 'v[0].loop'" if kind == "list" else "payload key 'v.inner.loop'"
    )


def test_a_value_inside_its_enclosing_container_is_circular():
    outer = {}
    outer["v"] = [outer]
    assert "circular" in problem_of(outer["v"], depth=2, inside=[outer])


def test_a_value_seen_twice_without_a_cycle_is_fine():
    shared = [1, 2]
    assert problem_of({"a": shared, "b": [shared, shared]}) is None


def test_an_integer_past_pythons_digit_limit_is_refused_not_a_value_error():
    digits = sys.get_int_max_str_digits()
    assert problem_of(10 ** (digits - 1)) is None  # exactly at the limit
    problem = problem_of([1, -(10**digits)])
    assert problem.startswith("payload key 'v[1]' holds an integer too long")
    assert "string" in problem


def test_an_integer_past_postgresqls_numeric_is_refused(monkeypatch):
    limit = validation.MAX_JSON_NUMBER_DIGITS
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a site that lifted Python's limit
    try:
        assert problem_of(10 ** (limit - 1)) is None
        assert f"{limit + 1} digits" in problem_of(10**limit)
    finally:
        sys.set_int_max_str_digits(previous)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.nan, "holds nan"),
        ({"a": math.inf}, "'v.a' holds inf"),
        ({1: "x"}, "non-string key 1"),
        (["ok", "a\x00b"], "'v[1]' holds a string that contains a NUL"),
        ({"k\udc80": 1}, "holds a key that contains a lone surrogate"),
        ({1, 2}, "holds a set"),
        (b"bytes", "holds a bytes"),
    ],
    ids=repr,
)
def test_json_problem_names_what_and_where(value, expected):
    assert expected in problem_of(value)


@pytest.mark.parametrize(
    "value", [None, True, 0, -(2**63), 1.5, "é🎉", [], {}, (1, "two"), {"a": [None, {"b": 1}]}]
)
def test_plain_json_has_no_problem(value):
    assert problem_of(value) is None
