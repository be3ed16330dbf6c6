"""Flow-control options: ``limit_by`` and ``rate_limit`` checked at import (naming the
job and the value), the rate limit parsed, and the limit key of a payload value."""

import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_cronqueue import jobs
from django_cronqueue.definitions.flow_options import (
    RateLimit,
    key_from_value,
    key_problem,
    parse_rate_limit,
)
from django_cronqueue.definitions.registry import registry

MINUTE = dt.timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _restore_registry():
    saved = dict(registry._definitions)
    yield
    registry._definitions.clear()
    registry._definitions.update(saved)


def sync_tenant(tenant_id: int, day: str = "") -> None:
    return None


def anything(**payload: object) -> None:
    return None


def define(function=sync_tenant, **options):
    return jobs.job(name="flow.job", **options)(function)


# --- rate_limit --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "count", "window"),
    [
        ("30/m", 30, MINUTE),
        ("1/s", 1, dt.timedelta(seconds=1)),
        ("1000/h", 1000, dt.timedelta(hours=1)),
        (" 5 / s ", 5, dt.timedelta(seconds=1)),
        ((3, dt.timedelta(milliseconds=250)), 3, dt.timedelta(milliseconds=250)),
        ((1, dt.timedelta(days=2)), 1, dt.timedelta(days=2)),
    ],
)
def test_rate_limits_are_parsed(value, count, window):
    assert parse_rate_limit(value) == RateLimit(count, window)
    handle = define(rate_limit=value)
    assert handle.rate_limit == RateLimit(count, window)
    assert handle.limit_by is None and handle.has_flow_limits


def test_a_rate_limit_reads_back_as_written():
    assert str(RateLimit(30, MINUTE)) == "30/m"
    assert str(RateLimit(2, dt.timedelta(seconds=90))) == "2 per 0:01:30"


BAD_RATES = [
    "30",
    "30/d",
    "30/min",
    "30/M",
    "0/s",
    "-1/s",
    "1.5/s",
    "/s",
    "",
    "3e2/s",
    "\uff12/s",  # a full-width digit 2: a regex's \d would take it, and int() too
    f"{2**31}/s",
    30,
    1.5,
    None.__class__,
    (0, MINUTE),
    (-1, MINUTE),
    (True, MINUTE),
    ("3", MINUTE),
    (1.5, MINUTE),
    (3, 60),
    (3, dt.timedelta(0)),
    (3, -MINUTE),
    (3,),
    (3, MINUTE, 1),
    [3, MINUTE],
]


@pytest.mark.parametrize("value", BAD_RATES)
def test_a_bad_rate_limit_fails_at_import_naming_the_job_and_the_value(value):
    with pytest.raises(ImproperlyConfigured) as excinfo:
        define(rate_limit=value)
    message = str(excinfo.value)
    assert "'flow.job'" in message
    assert "rate_limit=" in message
    if not isinstance(value, tuple) or len(value) != 2:
        assert repr(value) in message
    assert "flow.job" not in registry


# --- limit_by ----------------------------------------------------------------------


def test_limit_by_a_payload_key_with_a_concurrency_or_a_rate_limit():
    handle = define(limit_by="tenant_id", concurrency=2, rate_limit="30/m")
    assert (handle.limit_by, handle.concurrency, str(handle.rate_limit)) == ("tenant_id", 2, "30/m")
    assert define(limit_by="tenant_id", concurrency=1).rate_limit is None
    registry.unregister("flow.job")
    assert define(limit_by="region", rate_limit="1/s", function=anything).limit_by == "region"


def test_limit_by_a_callable():
    def region(payload: dict) -> str:
        return payload["day"]

    assert define(limit_by=region, rate_limit="1/s").limit_by is region
    assert define(limit_by=lambda payload, extra=1: "k", rate_limit="1/s").limit_by


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"limit_by": "tenant_id"}, "needs concurrency= or rate_limit="),
        ({"limit_by": 5, "concurrency": 1}, "int: 5"),
        ({"limit_by": b"tenant_id", "concurrency": 1}, "bytes"),
        ({"limit_by": ["tenant_id"], "concurrency": 1}, "list"),
        ({"limit_by": "", "concurrency": 1}, "''"),
        ({"limit_by": "tenant", "concurrency": 1}, "'tenant', which is not a keyword argument"),
        ({"limit_by": lambda: "k", "concurrency": 1}, "cannot be called with the payload"),
        ({"limit_by": lambda a, b: "k", "rate_limit": "1/s"}, "cannot be called"),
    ],
)
def test_a_bad_limit_by_fails_at_import_naming_the_job_and_the_value(options, words):
    with pytest.raises(ImproperlyConfigured) as excinfo:
        define(**options)
    message = str(excinfo.value)
    assert "'flow.job'" in message and "limit_by=" in message
    assert words in message
    assert "flow.job" not in registry


def test_limit_by_must_name_a_keyword_argument():
    def positional_only(tenant_id: int, /) -> None:
        return None

    with pytest.raises(ImproperlyConfigured, match="not a keyword argument"):
        define(positional_only, limit_by="tenant_id", concurrency=1)


def test_limit_by_and_rate_limit_are_refused_on_a_cron_schedule():
    for option, value in (("limit_by", "tenant_id"), ("rate_limit", "1/m")):
        with pytest.raises(ImproperlyConfigured) as excinfo:
            jobs.cron("* * * * *", name="flow.cron", **{option: value})(lambda run: None)
        message = str(excinfo.value)
        assert "'flow.cron'" in message and f"{option}=" in message
        assert "from its handler" in message
        assert "flow.cron" not in registry


# --- the limit key of a payload value ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("acme", "acme"),
        ("Acme ", "Acme "),
        (42, "42"),
        ("42", "42"),
        (4.5, "4.5"),
        (True, "true"),
        (None, "null"),
        ([1, "a"], '[1,"a"]'),
        ({"b": 1, "a": "é"}, '{"a":"é","b":1}'),
    ],
)
def test_a_payload_value_becomes_a_key(value, key):
    assert key_from_value(value) == key


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "is empty"),
        ("k" * 201, "201 characters long"),
        ("a\x00b", "NUL"),
        ("\ud800", "surrogate"),
        (5, "of type int"),
        (None, "of type NoneType"),
    ],
)
def test_what_a_key_cannot_be(key, problem):
    assert problem in key_problem(key)


def test_a_key_of_200_characters_is_fine():
    assert key_problem("k" * 200) is None
