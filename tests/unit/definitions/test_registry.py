"""``@jobs.job``: names, options, clashes, backoff and the discovery of apps' jobs.py."""

import importlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_cronqueue import jobs
from django_cronqueue.definitions.backoff import DEFAULT_BACKOFF, Exponential
from django_cronqueue.definitions.registry import JobDefinition, default_name, registry
from tests.testapp import jobs as testapp_jobs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _restore_registry():
    """Jobs defined by a test do not outlive it."""
    saved = dict(registry._definitions)
    yield
    registry._definitions.clear()
    registry._definitions.update(saved)


def make_function(name, module, qualname=None):
    """A fresh function that looks as if ``module`` defined it as ``qualname``."""

    def function(user_id: int = 0) -> int:
        return user_id * 2

    function.__name__ = name
    function.__qualname__ = qualname or name
    function.__module__ = module
    return function


# --- the decorator ------------------------------------------------------------------


def test_bare_decorator_registers_a_callable_handle():
    @jobs.job
    def double(x: int) -> int:
        """Doubles x."""
        return x * 2

    assert isinstance(double, JobDefinition)
    assert double(x=21) == 42
    assert double(4) == 8
    assert double.__name__ == "double"
    assert double.__doc__ == "Doubles x."
    assert registry.get(double.name) is double
    assert double.retries is None
    assert double.backoff is DEFAULT_BACKOFF
    assert double.timeout is None
    assert double.concurrency is None
    assert double.queue is None
    assert double.priority == 0
    assert double.on_failed is None
    assert double.is_async is False


def test_decorator_with_options_keeps_every_option():
    def alert(job, exc):
        return None

    backoff = jobs.exponential(base=2.0, factor=3.0)

    @jobs.job(
        name="emails.digest",
        retries=5,
        backoff=backoff,
        timeout=120,
        concurrency=2,
        queue="emails",
        priority=10,
        on_failed=alert,
    )
    def send_digest(user_id: int, day: str) -> None:
        return None

    assert send_digest.name == "emails.digest"
    assert registry.get("emails.digest") is send_digest
    assert send_digest.retries == 5
    assert send_digest.max_attempts == 6
    assert send_digest.backoff is backoff
    assert send_digest.timeout == 120
    assert send_digest.effective_timeout == 120
    assert send_digest.concurrency == 2
    assert send_digest.queue == send_digest.effective_queue == "emails"
    assert send_digest.priority == 10
    assert send_digest.on_failed is alert


def test_retries_zero_means_a_single_attempt():
    @jobs.job(name="once", retries=0)
    def once() -> None:
        return None

    assert once.max_attempts == 1


def test_defaults_come_from_settings():
    @jobs.job(name="defaults")
    def defaults() -> None:
        return None

    assert defaults.max_attempts == 4  # DEFAULT_RETRIES 3: four attempts in all
    assert defaults.effective_timeout == 60
    assert defaults.effective_queue == "default"
    with override_settings(
        CRONQUEUE={"DEFAULT_RETRIES": 7, "DEFAULT_TIMEOUT": 5, "DEFAULT_QUEUE": "low"}
    ):
        assert defaults.max_attempts == 8
        assert defaults.effective_timeout == 5
        assert defaults.effective_queue == "low"
    assert defaults.max_attempts == 4


def test_async_handlers_are_recognised():
    @jobs.job(name="async.handler")
    async def handler(x: int) -> int:
        return x

    assert handler.is_async is True


def test_a_string_in_place_of_the_function_is_refused():
    with pytest.raises(ImproperlyConfigured, match="decorates a function"):
        jobs.job("emails.digest")


# --- names --------------------------------------------------------------------------


def test_function_in_an_installed_app_is_named_app_label_dot_function():
    assert testapp_jobs.record.name == "testapp.record"
    assert registry.get("testapp.record") is testapp_jobs.record
    assert "testapp.noop" in registry
    # Any module of the app, however deep: the app label and the function's own name.
    function = make_function("send_welcome_email", "tests.testapp.emails.tasks", "Outer.inner")
    handle = jobs.job(function)
    assert handle.name == "testapp.send_welcome_email"
    assert registry.get("testapp.send_welcome_email") is handle


def test_installed_app_label_not_module_path():
    function = make_function("purge_sessions", "django.contrib.sessions.jobs")
    assert default_name(function) == "sessions.purge_sessions"


def test_function_outside_installed_apps_is_named_module_dot_qualname():
    @jobs.job
    def local_job() -> None:
        return None

    assert local_job.name == (
        "tests.unit.definitions.test_registry."
        "test_function_outside_installed_apps_is_named_module_dot_qualname.<locals>.local_job"
    )
    function = make_function("helper", "myproject.tasks", "Tasks.helper")
    assert jobs.job(function).name == "myproject.tasks.Tasks.helper"


def test_a_module_merely_prefixed_like_an_app_is_not_in_it():
    # "tests.testapp" is installed; "tests.testappx" is not part of it.
    function = make_function("thing", "tests.testappx.jobs")
    assert default_name(function) == "tests.testappx.jobs.thing"


def test_explicit_name_wins():
    function = make_function("record", "tests.testapp.other")
    assert jobs.job(name="custom.record")(function).name == "custom.record"


# --- clashes ------------------------------------------------------------------------


def test_two_functions_with_one_explicit_name_raise_naming_both():
    jobs.job(name="dup.job")(make_function("first", "pkg.one"))
    with pytest.raises(ImproperlyConfigured) as excinfo:
        jobs.job(name="dup.job")(make_function("second", "pkg.two"))
    message = str(excinfo.value)
    assert "dup.job" in message
    assert "pkg.one.first" in message
    assert "pkg.two.second" in message
    assert registry.get("dup.job").func.__module__ == "pkg.one"  # the first one stays


def test_two_functions_with_one_default_name_raise_naming_both():
    # Same app, same function name, another module: both default to "testapp.record".
    with pytest.raises(ImproperlyConfigured) as excinfo:
        jobs.job(make_function("record", "tests.testapp.other"))
    message = str(excinfo.value)
    assert "'testapp.record'" in message
    assert "tests.testapp.jobs.record" in message
    assert "tests.testapp.other.record" in message
    assert registry.get("testapp.record") is testapp_jobs.record


def test_registering_the_same_function_again_is_fine():
    function = make_function("again", "pkg.mod")
    first = jobs.job(name="again")(function)
    second = jobs.job(name="again")(function)
    assert registry.get("again") is second
    assert first.func is second.func


def test_reimporting_a_jobs_module_is_fine(tmp_path, monkeypatch):
    (tmp_path / "reimported_jobs.py").write_text(
        "from django_cronqueue import jobs\n\n"
        "@jobs.job\n"
        "def handler(x: int) -> int:\n"
        "    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reimported_jobs", raising=False)
    module = importlib.import_module("reimported_jobs")
    first = module.handler
    module = importlib.reload(module)
    assert module.handler is not first
    assert registry.get("reimported_jobs.handler") is module.handler


# --- bad options --------------------------------------------------------------------


def _noop_callable(job, exc):
    return None


BAD_OPTIONS = [
    ("retries", -1),
    ("retries", True),
    ("retries", 1.5),
    ("retries", "3"),
    ("timeout", 0),
    ("timeout", -5),
    ("timeout", "60"),
    ("timeout", True),
    ("timeout", math.nan),
    ("timeout", math.inf),
    ("concurrency", 0),
    ("concurrency", -1),
    ("concurrency", True),
    ("concurrency", 1.5),
    ("backoff", 5),
    ("backoff", "exponential"),
    ("on_failed", "alert_ops"),
    ("on_failed", 1),
    ("queue", ""),
    ("queue", "   "),
    ("queue", 5),
    ("queue", "q" * 101),
    ("priority", "high"),
    ("priority", 1.5),
    ("priority", True),
    ("priority", None),
    ("priority", 2**31),
    ("priority", -(2**31) - 1),
]


@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
def test_bad_option_raises_naming_the_job_and_the_option(option, value):
    with pytest.raises(ImproperlyConfigured) as excinfo:
        jobs.job(name="bad.options", **{option: value})(make_function("f", "pkg.mod"))
    message = str(excinfo.value)
    assert "'bad.options'" in message
    assert f"{option}=" in message
    assert "bad.options" not in registry


@pytest.mark.parametrize(("option", "value"), [("retries", -1), ("timeout", 0)])
def test_bad_option_of_a_default_named_job_names_it(option, value):
    with pytest.raises(ImproperlyConfigured) as excinfo:
        jobs.job(**{option: value})(make_function("send", "tests.testapp.jobs"))
    assert "'testapp.send'" in str(excinfo.value)
    assert f"{option}=" in str(excinfo.value)


@pytest.mark.parametrize(
    "good",
    [
        {"retries": 0},
        {"timeout": 0.5},
        {"concurrency": 1},
        {"queue": "q" * 100},
        {"priority": -5},
        {"priority": 2**31 - 1},
        {"backoff": lambda attempt: 0},
    ],
)
def test_boundary_values_are_accepted(good):
    handle = jobs.job(name="good.options", **good)(make_function("f", "pkg.mod"))
    assert registry.get("good.options") is handle


def test_too_long_name_raises_naming_the_option():
    name = "n" * 201
    with pytest.raises(ImproperlyConfigured) as excinfo:
        jobs.job(name=name)(make_function("f", "pkg.mod"))
    assert "name=" in str(excinfo.value)
    assert "201" in str(excinfo.value)
    assert name not in registry
    assert jobs.job(name="n" * 200)(make_function("g", "pkg.mod")).name == "n" * 200


def test_too_long_default_name_raises():
    function = make_function("f" * 200, "pkg.mod")
    with pytest.raises(ImproperlyConfigured, match="name="):
        jobs.job(function)


@pytest.mark.parametrize("name", ["", "   ", 5, "with\x00nul"])
def test_bad_names_raise(name):
    with pytest.raises(ImproperlyConfigured, match="name"):
        jobs.job(name=name)(make_function("f", "pkg.mod"))


# --- backoff ------------------------------------------------------------------------


@pytest.mark.parametrize(("attempt", "nominal"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)])
def test_default_backoff_is_exponential_with_20_percent_jitter(attempt, nominal):
    delays = [DEFAULT_BACKOFF(attempt) for _ in range(300)]
    assert all(0.8 * nominal <= delay <= 1.2 * nominal for delay in delays)
    assert len(set(delays)) > 1  # jittered, not constant
    assert min(delays) < nominal < max(delays)


def test_default_backoff_is_used_when_none_is_given():
    @jobs.job(name="default.backoff")
    def handler() -> None:
        return None

    assert handler.backoff is DEFAULT_BACKOFF
    assert isinstance(handler.backoff, Exponential)
    assert (handler.backoff.base, handler.backoff.factor, handler.backoff.jitter) == (1, 2, 0.2)


def test_exponential_options():
    assert jobs.exponential(base=2.0, factor=3.0, jitter=0)(1) == 2.0
    assert jobs.exponential(base=2.0, factor=3.0, jitter=0)(3) == 18.0
    assert jobs.exponential(jitter=0, max_delay=5)(10) == 5
    assert jobs.exponential(jitter=0)(0) == 1.0  # never below the base
    for _ in range(100):
        assert 1.6 <= jobs.exponential(base=2.0)(1) <= 2.4


@pytest.mark.parametrize(
    "kwargs",
    [{"base": -1}, {"factor": 0.5}, {"jitter": 1}, {"jitter": -0.1}, {"max_delay": -1}],
)
def test_exponential_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="exponential"):
        jobs.exponential(**kwargs)


def test_callable_backoff_is_kept_verbatim():
    def backoff(attempt):
        return 7 * attempt

    @jobs.job(name="custom.backoff", backoff=backoff)
    def handler() -> None:
        return None

    assert handler.backoff is backoff
    assert [handler.backoff(attempt) for attempt in (1, 2, 3)] == [7, 14, 21]


# --- discovery of installed apps' jobs.py --------------------------------------------


def run_django_setup(settings_module, **env):
    code = (
        "import django; django.setup(); "
        "from django_cronqueue.definitions.registry import registry; print(registry.names())"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module,
            "PYTHONPATH": str(ROOT),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_installed_apps_jobs_modules_are_imported_at_setup():
    result = run_django_setup("tests.settings", CRONQUEUE_TEST_DB="sqlite")
    assert result.returncode == 0, result.stderr
    assert "'testapp.record'" in result.stdout
    assert "'testapp.noop'" in result.stdout


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("raise", "RuntimeError: broken_jobs_app.jobs fails on purpose"),
        ("import", "ModuleNotFoundError: No module named 'module_that_does_not_exist'"),
        ("clash", "ImproperlyConfigured: Two jobs are named 'broken_jobs.clash'"),
    ],
)
def test_a_broken_jobs_module_makes_setup_fail_loudly(mode, error):
    result = run_django_setup("tests.broken_jobs_app.settings", BROKEN_JOBS_MODE=mode)
    assert result.returncode != 0
    assert error in result.stderr
    assert "tests/broken_jobs_app/jobs.py" in result.stderr  # the traceback points at it


def test_the_broken_app_sets_up_fine_when_its_jobs_module_is_fine():
    result = run_django_setup("tests.broken_jobs_app.settings", BROKEN_JOBS_MODE="fine")
    assert result.returncode == 0, result.stderr
    assert "'broken_jobs.fine'" in result.stdout
