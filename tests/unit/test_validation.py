"""django_cronqueue.validation: the column limits and the predicates every check uses."""

import math

import pytest

from django_cronqueue import validation
from django_cronqueue.models import Job
from django_cronqueue.validation import (
    is_finite_number,
    is_int,
    is_priority,
    is_queue_name,
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
