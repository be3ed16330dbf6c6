"""System checks of the worker pools and time limits: E030-E034."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.worker import checks as pool_checks


def ids(messages):
    return [message.id for message in messages]


@pytest.fixture
def defined():
    names = []

    def define(name, func, **options):
        names.append(name)
        return jobs.job(name=name, **options)(func)

    yield define
    for name in names:
        registry.unregister(name)


def sync_handler() -> None:
    pass


async def async_handler() -> None:
    pass


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("POOL", "prefork", "E030"),
        ("POOL", "eventlet", "E030"),
        ("TIMEOUT_GRACE", -1, "E033"),
        ("TIMEOUT_GRACE", float("inf"), "E033"),
        ("MAX_JOBS_PER_CHILD", 0, "E034"),
        ("MAX_MEMORY_PER_CHILD", 1.5, "E034"),
    ],
)
def test_bad_pool_settings_are_errors_naming_the_key(key, value, check_id):
    with override_settings(CRONQUEUE={key: value}):
        messages = pool_checks.check_pools()
    assert ids(messages) == [f"django_cronqueue.{check_id}"]
    assert f"CRONQUEUE['{key}']" in messages[0].msg


def test_good_pool_settings_pass():
    settings = {"POOL": "processes", "TIMEOUT_GRACE": 0, "MAX_JOBS_PER_CHILD": 5}
    with override_settings(CRONQUEUE={**settings, "MAX_MEMORY_PER_CHILD": 256}):
        assert pool_checks.check_pools() == []


def test_a_soft_timeout_not_below_the_timeout_is_e031(defined):
    defined("tests.checks.soft_equal", async_handler, timeout=10, soft_timeout=10)
    messages = pool_checks.check_pools()
    assert ids(messages) == ["django_cronqueue.E031"]
    assert "'tests.checks.soft_equal'" in messages[0].msg


def test_e031_judges_the_default_timeout_too(defined):
    defined("tests.checks.soft_default", async_handler, soft_timeout=30)
    with override_settings(CRONQUEUE={"DEFAULT_TIMEOUT": 20}):
        assert ids(pool_checks.check_pools()) == ["django_cronqueue.E031"]
    with override_settings(CRONQUEUE={"DEFAULT_TIMEOUT": 40}):
        assert pool_checks.check_pools() == []


def test_a_soft_timeout_on_a_sync_handler_needs_the_process_pool(defined, monkeypatch):
    defined("tests.checks.soft_sync", sync_handler, timeout=10, soft_timeout=5)
    messages = pool_checks.check_pools()
    assert ids(messages) == ["django_cronqueue.E032"]
    assert "'tests.checks.soft_sync'" in messages[0].msg
    with override_settings(CRONQUEUE={"POOL": "processes"}):
        assert pool_checks.check_pools() == []
    monkeypatch.setattr(pool_checks, "pool_in_use", "processes")  # runjobs --pool processes
    assert pool_checks.check_pools() == []


def test_a_soft_timeout_on_an_async_handler_is_fine_in_the_thread_pool(defined):
    defined("tests.checks.soft_async", async_handler, timeout=10, soft_timeout=5)
    assert pool_checks.check_pools() == []


@pytest.mark.parametrize("value", [0, -1, float("nan"), "5"])
def test_a_bad_soft_timeout_is_refused_at_import(value):
    with pytest.raises(ImproperlyConfigured, match="soft_timeout="):
        jobs.job(name="tests.checks.bad_soft", soft_timeout=value)(sync_handler)
    assert registry.get("tests.checks.bad_soft") is None
