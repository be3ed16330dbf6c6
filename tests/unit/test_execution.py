"""execution.storable_result: which return values a row keeps. Database-free; the rest
of execution is tested in tests/db/test_execution.py."""

import datetime as dt
import math

import pytest
from django.test import override_settings

from django_cronqueue.execution import storable_result


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
