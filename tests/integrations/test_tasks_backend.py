"""The Django Tasks backend: django_cronqueue.backend.CronQueueBackend, on Django's
django.tasks (Django >= 6.0) or on the django-tasks backport (Django 5.2, the [tasks]
extra): the same tests run on both.

tests/settings.py configures TASKS when either is there; the tasks are in
tests/testapp/tasks.py, imported at start-up by the app's autodiscovery.
"""

import datetime as dt
import importlib.util
import logging
import os
import subprocess
import sys

import django
import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import backend, jobs, signals, testing
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job
from tests.testapp.models import SideEffect

from .conftest import ROOT

DJANGO_6 = django.VERSION >= (6, 0)
# Django's Tasks framework: built in from Django 6.0, the django-tasks backport on 5.2.
HAS_TASKS = backend.HAS_DJANGO_TASKS
needs_django_6 = pytest.mark.skipif(
    not HAS_TASKS, reason="needs django.tasks (Django >= 6.0) or the django-tasks backport"
)
# Django's own log lines of task states: the logger of the framework's package.
TASKS_LOGGER = "django.tasks" if DJANGO_6 else "django_tasks"

if DJANGO_6:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
elif HAS_TASKS:
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

if HAS_TASKS:
    from tests.testapp import tasks as test_tasks


# --- without a Tasks framework ------------------------------------------------------

# Run in a fresh interpreter where neither django.tasks nor django_tasks can be imported.
WITHOUT_TASKS = """
import sys
sys.modules["django.tasks"] = None
sys.modules["django_tasks"] = None
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django_cronqueue"])
django.setup()
from django.core.exceptions import ImproperlyConfigured
import django_cronqueue.backend as b
assert b.HAS_DJANGO_TASKS is False, b.HAS_DJANGO_TASKS
b.autodiscover_task_modules()  # a no-op
try:
    b.CronQueueBackend("default", {})
except ImproperlyConfigured as exc:
    print(exc)
"""


def test_the_module_imports_without_a_tasks_framework_and_explains_when_used():
    output = subprocess.run(
        [sys.executable, "-c", WITHOUT_TASKS], cwd=ROOT, capture_output=True, text=True
    )
    assert output.returncode == 0, output.stderr
    assert "needs Django's Tasks framework" in output.stdout
    assert "pip install 'django-cronqueue[tasks]'" in output.stdout


def test_the_module_imports_in_a_fresh_interpreter():
    code = "import django_cronqueue.backend as b; print(b.HAS_DJANGO_TASKS)"
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    expected = DJANGO_6 or importlib.util.find_spec("django_tasks") is not None
    assert output.strip() == str(expected)


# Start-up imports the backend (and the Tasks framework) only when TASKS may use it.
STARTUP = """
import sys
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django_cronqueue"], TASKS=TASKS)
django.setup()
print("django_cronqueue.backend" in sys.modules)
"""


@pytest.mark.parametrize(
    ("tasks", "imported"),
    [
        ({}, False),
        ({"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}, False),
        ({"default": {"BACKEND": "django_cronqueue.backend.CronQueueBackend"}}, True),
        ({"default": {"BACKEND": "shop.backends.Custom"}}, True),  # may subclass ours
    ],
)
def test_start_up_imports_the_backend_only_when_tasks_may_use_it(tasks, imported):
    code = f"TASKS = {tasks!r}\n{STARTUP}"
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == str(imported)


@pytest.mark.skipif(DJANGO_6 or not HAS_TASKS, reason="the django-tasks backport on Django 5.2")
def test_on_django_5_the_backend_runs_on_the_backport():
    from django_cronqueue.integrations import taskapi

    assert taskapi.PROVIDER == "django_tasks"
    assert type(task_backends["default"]) is backend.CronQueueBackend


pytestmark = [pytest.mark.django_db]


# --- registration -------------------------------------------------------------------


@needs_django_6
def test_tasks_are_registered_under_their_module_path_at_import():
    names = [name for name in registry.names() if name.startswith("task:")]
    assert names == [
        "task:tests.testapp.tasks.add",
        "task:tests.testapp.tasks.async_add",
        "task:tests.testapp.tasks.explode",
        "task:tests.testapp.tasks.fails_once",
        "task:tests.testapp.tasks.record_task",
        "task:tests.testapp.tasks.returns",
        "task:tests.testapp.tasks.with_context",
    ]
    assert backend.job_name(test_tasks.add) == "task:tests.testapp.tasks.add"
    assert backend.registered_task("task:tests.testapp.tasks.add") is test_tasks.add


@needs_django_6
def test_backend_flags():
    assert isinstance(task_backends["default"], backend.CronQueueBackend)
    assert default_task_backend.supports_defer is True
    assert default_task_backend.supports_async_task is True
    assert default_task_backend.supports_get_result is True
    assert default_task_backend.supports_priority is True
    assert list(default_task_backend.check()) == []


@needs_django_6
def test_backend_options():
    definition = registry.get("task:tests.testapp.tasks.explode")
    assert (definition.max_attempts, definition.timeout) == (1, 30)
    assert registry.get("task:tests.testapp.tasks.add").max_attempts == 4  # DEFAULT_RETRIES
    with pytest.raises(InvalidTaskBackend, match=r"'RETRIES'\] must be an integer >= 0"):
        backend.CronQueueBackend("x", {"OPTIONS": {"RETRIES": -1}})
    with pytest.raises(InvalidTaskBackend, match=r"'TIMEOUT'\] must be a number"):
        backend.CronQueueBackend("x", {"OPTIONS": {"TIMEOUT": 0}})
    with pytest.raises(InvalidTaskBackend, match="unknown key"):
        backend.CronQueueBackend("x", {"OPTIONS": {"RETRY": 1}})
    with pytest.raises(ImproperlyConfigured, match="AUTODISCOVER"):
        backend.CronQueueBackend("x", {"OPTIONS": {"AUTODISCOVER": "tasks"}})


@needs_django_6
def test_check_reports_a_missing_app(monkeypatch):
    from django.apps import apps

    monkeypatch.setattr(apps, "is_installed", lambda name: False)
    [message] = default_task_backend.check()
    assert message.id == "django_cronqueue.E020"


@needs_django_6
def test_tasks_are_validated_as_django_does():
    def local_function():
        return None

    with pytest.raises(InvalidTask, match="module level"):
        task(local_function)
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid"):
        test_tasks.add.using(queue_name="elsewhere")
    with pytest.raises(InvalidTask, match="priority must be"):
        test_tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="aware"):
        test_tasks.add.using(run_after=dt.datetime(2030, 1, 1))


# --- enqueueing ---------------------------------------------------------------------


@needs_django_6
def test_enqueue_writes_a_job_row_and_returns_a_ready_result():
    result = test_tasks.add.enqueue(2, b=3)

    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    assert result.backend == "default"
    assert result.errors == [] and result.worker_ids == [] and result.attempts == 0
    job = Job.objects.get(pk=int(result.id))
    assert job.name == "task:tests.testapp.tasks.add"
    assert job.payload == {"args": [2], "kwargs": {"b": 3}}
    assert (job.status, job.queue, job.priority) == ("pending", "default", 0)
    assert result.enqueued_at == job.created_at
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


@needs_django_6
def test_priority_queue_and_run_after_are_honoured():
    later = timezone.now() + dt.timedelta(minutes=10)
    default = test_tasks.record_task.enqueue("a")
    moved = test_tasks.record_task.using(priority=-3, queue_name="default", run_after=later)
    deferred = moved.enqueue("b")

    row = Job.objects.get(pk=int(default.id))
    assert (row.queue, row.priority) == ("tasks", 5)
    assert (default.task.queue_name, default.task.priority, default.task.run_after) == (
        "tasks",
        5,
        None,
    )
    row = Job.objects.get(pk=int(deferred.id))
    assert (row.queue, row.priority, row.run_at) == ("default", -3, later)
    assert deferred.task.run_after == later

    assert jobs.tick(queues=["default"]).claimed == 0  # not due yet
    assert jobs.tick(queues=["tasks"]).ran == 1
    assert jobs.tick(now=later + dt.timedelta(seconds=1)).ran == 1
    assert list(SideEffect.objects.order_by("id").values_list("key", flat=True)) == ["a", "b"]


@needs_django_6
def test_a_naive_run_after_is_local_time_without_use_tz():
    naive = dt.datetime(2030, 1, 1, 9, 30)
    with override_settings(USE_TZ=False):
        deferred = test_tasks.add.using(run_after=naive).enqueue(1, 2)
        row = Job.objects.get(pk=int(deferred.id))
        assert row.run_at == naive
        assert deferred.task.run_after == naive


@needs_django_6
def test_a_non_json_argument_raises_type_error_as_django_documents():
    with pytest.raises(TypeError, match=r"'args\[0\]' holds a datetime"):
        test_tasks.add.enqueue(timezone.now(), 1)
    with pytest.raises(TypeError, match=r"'kwargs\.b' holds a set"):
        async_to_sync(test_tasks.add.aenqueue)(1, b={1})
    assert not Job.objects.exists()


@needs_django_6
def test_arguments_are_checked_at_the_call_site():
    with pytest.raises(jobs.InvalidPayload, match=r"'args\[0\]' holds a datetime"):
        test_tasks.add.enqueue(timezone.now(), 1)
    with pytest.raises(jobs.InvalidPayload, match=r"'kwargs.b' holds a set"):
        test_tasks.add.enqueue(1, b={1})
    with pytest.raises(jobs.InvalidPayload, match=r"arguments do not match.*'b'"):
        test_tasks.add.enqueue(1)
    with pytest.raises(jobs.InvalidPayload, match="arguments do not match"):
        test_tasks.add.enqueue(1, 2, c=3)
    assert not Job.objects.exists()


@needs_django_6
def test_enqueue_is_transactional():
    from django.db import transaction

    with transaction.atomic():
        test_tasks.add.enqueue(1, 2)
        transaction.set_rollback(True)
    assert not Job.objects.exists()


# --- running and results ------------------------------------------------------------


@needs_django_6
def test_a_task_runs_through_tick_and_get_result_reads_the_row():
    result = test_tasks.add.enqueue(2, 3)
    assert jobs.tick() == jobs.TickResult(claimed=1, ran=1, failed=0)

    done = default_task_backend.get_result(result.id)
    row = Job.objects.get(pk=int(result.id))
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.is_finished
    assert (done.enqueued_at, done.started_at, done.finished_at) == (
        row.created_at,
        row.started_at,
        row.finished_at,
    )
    assert done.last_attempted_at == row.started_at
    assert done.attempts == 1
    assert done.worker_ids == [row.worker_id]
    assert done.errors == []
    assert test_tasks.add.get_result(result.id).return_value == 5

    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


@needs_django_6
def test_a_failing_task_is_failed_with_its_error():
    result = test_tasks.explode.enqueue("kaboom")
    assert jobs.tick().failed == 1

    failed = test_tasks.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.backend == "no_retries"
    assert failed.attempts == 1
    [error] = failed.errors
    assert error.exception_class_path == "tests.testapp.tasks.TaskBoom"
    assert error.exception_class is test_tasks.TaskBoom
    assert "tests.testapp.tasks.TaskBoom: kaboom" in error.traceback
    assert error.traceback.startswith("Traceback (most recent call last):")
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value


@needs_django_6
def test_a_non_json_return_value_fails_the_task_with_a_type_error_at_once():
    """As in Django's reference backends: FAILED, a TypeError, and no retry (the task
    did its work; running it again would do it again and return the same)."""
    result = test_tasks.returns.enqueue("datetime", key="once")
    assert registry.get(backend.job_name(test_tasks.returns)).max_attempts == 4
    assert jobs.tick() == jobs.TickResult(claimed=1, ran=0, failed=1)
    assert jobs.tick(now=timezone.now() + dt.timedelta(hours=1)).claimed == 0

    failed = default_task_backend.get_result(result.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 1)
    [error] = failed.errors
    assert error.exception_class is TypeError
    assert f"task:tests.testapp.tasks.returns #{result.id} returned a value" in error.traceback
    assert "'result' holds a datetime" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    assert Job.objects.get(pk=int(result.id)).result is None
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["once"]


@needs_django_6
@pytest.mark.parametrize(
    ("kind", "value"),
    [("bytes", "café"), ("tuple", ["a", [1, 2]]), ("range", [0, 1, 2])],
)
def test_a_return_value_is_normalized_as_djangos_backends_do(kind, value):
    result = test_tasks.returns.enqueue(kind, key=kind)
    assert jobs.tick().ran == 1
    done = default_task_backend.get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, value)


@needs_django_6
def test_arguments_are_normalized_as_djangos_backends_do():
    result = test_tasks.add.enqueue(b"caf", b"\xc3\xa9")
    assert result.args == ["caf", "é"]
    assert Job.objects.get(pk=int(result.id)).payload == {"args": ["caf", "é"], "kwargs": {}}
    jobs.tick()
    assert default_task_backend.get_result(result.id).return_value == "café"


@needs_django_6
def test_djangos_log_line_of_a_failed_task_has_its_exception(caplog):
    """task_finished is sent while the failure is handled, as Django's backends send
    it: Django's receiver logs the state with the exception (``exc_info``)."""
    exploded = test_tasks.explode.enqueue("kaboom")
    unstorable = test_tasks.returns.enqueue("datetime", key="x")
    added = test_tasks.add.enqueue(1, 2)
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        jobs.tick()
    finished = {
        record.args[0]: record
        for record in caplog.records
        if record.name == TASKS_LOGGER
        and "state=" in record.getMessage()
        and "RUNNING" not in record.getMessage()
    }
    assert finished[exploded.id].levelno == logging.ERROR
    assert "state=FAILED" in finished[exploded.id].getMessage()
    assert finished[exploded.id].exc_info[0] is test_tasks.TaskBoom
    assert "tests.testapp.tasks.TaskBoom: kaboom" in finished[exploded.id].exc_text
    assert finished[unstorable.id].exc_info[0] is TypeError
    assert "'result' holds a datetime" in str(finished[unstorable.id].exc_info[1])
    assert finished[added.id].levelno == logging.INFO
    assert finished[added.id].exc_info is None
    assert "NoneType" not in finished[added.id].getMessage()


@needs_django_6
def test_a_retried_task_is_ready_again_with_its_error_then_succeeds():
    result = test_tasks.fails_once.enqueue(key="flaky")
    now = timezone.now()
    assert jobs.tick(now=now).failed == 1

    retrying = default_task_backend.get_result(result.id)
    assert retrying.status == TaskResultStatus.READY
    assert retrying.attempts == 1
    [error] = retrying.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert retrying.task.run_after is not None  # the retry's due time

    assert jobs.tick(now=now + dt.timedelta(minutes=5)).ran == 1
    done = default_task_backend.get_result(result.id)
    assert (done.status, done.return_value, done.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        "second time lucky",
        2,
    )
    assert len(done.worker_ids) == 2
    assert [e.exception_class_path for e in done.errors] == ["builtins.ValueError"]


@needs_django_6
def test_a_cancelled_task_reads_as_failed():
    result = test_tasks.add.enqueue(1, 2)
    Job.objects.get(pk=int(result.id)).cancel(reason="not needed")
    cancelled = default_task_backend.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    [error] = cancelled.errors
    assert error.exception_class is backend.TaskCancelled
    assert error.traceback == "not needed"


@needs_django_6
def test_a_lost_lease_reads_as_lease_lost():
    result = test_tasks.explode.enqueue("x")
    row = Job.objects.get(pk=int(result.id))
    later = timezone.now() + dt.timedelta(hours=1)
    Job.objects.filter(pk=row.pk).update(
        status="running", attempts=1, locked_until=timezone.now(), lock_token="t"
    )
    jobs.tick(now=later)
    failed = default_task_backend.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    [error] = failed.errors
    assert error.exception_class_path == "django_cronqueue.exceptions.LeaseLost"
    assert "lease lost" in error.traceback


# --- the class of an error: recorded when written, never read from text, never imported

NEVER_IMPORTED = "tests.testapp.never_imported"
# Error text naming classes, in lines shaped like a traceback's last: the class raised,
# tests.testapp.tasks.TaskBoom, in a module no code imports.
TEXT_NAMING_CLASSES = f"kaboom\nos.path.TaskBoom: x\n{NEVER_IMPORTED}.TaskBoom: y"


@pytest.fixture
def nothing_imported(monkeypatch):
    """Fails the test if tests/testapp/never_imported.py gets imported."""
    monkeypatch.delenv("CRONQUEUE_TEST_NEVER_IMPORTED_WAS_IMPORTED", raising=False)
    assert NEVER_IMPORTED not in sys.modules
    yield
    assert NEVER_IMPORTED not in sys.modules
    assert "CRONQUEUE_TEST_NEVER_IMPORTED_WAS_IMPORTED" not in os.environ


@pytest.mark.parametrize(
    "recorded",
    ["builtins.ValueError", "builtins.SystemExit", "django_cronqueue.exceptions.LeaseLost"],
)
def test_a_recorded_class_of_a_loaded_module_is_reported_as_recorded(recorded):
    assert backend.exception_class_path(recorded) == recorded


@pytest.mark.parametrize(
    "recorded",
    [
        "",  # a row failed before the class was recorded
        f"{NEVER_IMPORTED}.TaskBoom",  # a module this process has not imported
        "os.path.ValueError",  # no such class
        "builtins.int",  # not an exception
        "builtins.print",  # not a class
        "ValueError",  # not a dotted path
    ],
)
def test_a_recorded_class_that_cannot_be_named_without_importing_is_exception(
    recorded, nothing_imported
):
    assert backend.exception_class_path(recorded) == "builtins.Exception"


@needs_django_6
def test_a_failing_task_reports_the_class_raised_not_one_its_text_names(nothing_imported):
    result = test_tasks.explode.enqueue(TEXT_NAMING_CLASSES)
    assert jobs.tick().failed == 1
    [error] = test_tasks.explode.get_result(result.id).errors
    assert error.exception_class_path == "tests.testapp.tasks.TaskBoom"
    assert error.exception_class is test_tasks.TaskBoom
    assert error.traceback.endswith(f"{NEVER_IMPORTED}.TaskBoom: y\n")


@needs_django_6
@pytest.mark.parametrize("recorded", ["", f"{NEVER_IMPORTED}.TaskBoom"])
def test_a_failed_row_whose_class_cannot_be_named_reads_as_exception(recorded, nothing_imported):
    # "": a row failed before classes were recorded, its text naming a class to import.
    result = test_tasks.explode.enqueue("x")
    traceback = f"Traceback (most recent call last):\n{NEVER_IMPORTED}.TaskBoom: y\n"
    Job.objects.filter(pk=int(result.id)).update(
        status="failed",
        last_error="TaskBoom: y",
        traceback=traceback,
        exception_class_path=recorded,
    )
    [error] = test_tasks.explode.get_result(result.id).errors
    assert error.exception_class_path == "builtins.Exception"
    assert error.exception_class is Exception
    assert error.traceback == traceback


@needs_django_6
def test_a_running_task_reads_as_running():
    result = test_tasks.add.enqueue(1, 2)
    Job.objects.filter(pk=int(result.id)).update(
        status="running", attempts=1, worker_id="w1", started_at=timezone.now()
    )
    running = default_task_backend.get_result(result.id)
    assert (running.status, running.worker_ids, running.attempts) == (
        TaskResultStatus.RUNNING,
        ["w1"],
        1,
    )


@needs_django_6
def test_takes_context_receives_the_task_result():
    result = test_tasks.with_context.enqueue(key="ctx")
    jobs.tick()
    value = default_task_backend.get_result(result.id).return_value
    assert value == {"attempt": 1, "id": result.id, "key": "ctx"}


@needs_django_6
def test_async_tasks_run():
    result = test_tasks.async_add.enqueue(20, 22)
    assert jobs.tick().ran == 1
    assert default_task_backend.get_result(result.id).return_value == 42


@needs_django_6
def test_aenqueue_and_aget_result():
    result = async_to_sync(test_tasks.add.aenqueue)(4, 5)
    jobs.tick()
    done = async_to_sync(test_tasks.add.aget_result)(result.id)
    assert done.return_value == 9


@needs_django_6
@pytest.mark.parametrize("result_id", ["123456789", "nope", "", None])
def test_get_result_of_an_unknown_id(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


@needs_django_6
def test_get_result_of_a_plain_job_does_not_exist():
    job = jobs.enqueue("testapp.noop")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job.pk))


@needs_django_6
def test_get_result_of_a_task_this_process_does_not_define():
    result = test_tasks.add.enqueue(1, 1)
    Job.objects.filter(pk=int(result.id)).update(name="task:gone.module.function")
    with pytest.raises(TaskResultDoesNotExist, match="does not define"):
        default_task_backend.get_result(result.id)


@needs_django_6
def test_djangos_task_signals_are_sent():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.task.name, task_result.status))

    task_enqueued.connect(receiver)
    task_started.connect(receiver)
    task_finished.connect(receiver)
    try:
        test_tasks.add.enqueue(1, 2)
        test_tasks.explode.enqueue("x")
        jobs.tick()
    finally:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(receiver)
    assert seen == [
        ("add", TaskResultStatus.READY),
        ("explode", TaskResultStatus.READY),
        ("add", TaskResultStatus.RUNNING),
        ("add", TaskResultStatus.SUCCESSFUL),
        ("explode", TaskResultStatus.RUNNING),
        ("explode", TaskResultStatus.FAILED),
    ]


@needs_django_6
def test_our_signals_are_sent_too():
    names = []

    def receiver(sender, **kwargs):
        names.append(sender)

    signals.job_succeeded.connect(receiver)
    try:
        test_tasks.add.enqueue(1, 2)
        jobs.tick()
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert names == ["task:tests.testapp.tasks.add"]


# --- with the testing helpers -------------------------------------------------------


@needs_django_6
def test_eager_mode_runs_tasks_at_once():
    with testing.eager():
        result = test_tasks.add.enqueue(1, 2)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 3)


@needs_django_6
def test_assert_enqueued_takes_a_task():
    test_tasks.add.enqueue(1, b=2)
    testing.assert_enqueued(test_tasks.add, {"args": [1], "kwargs": {"b": 2}}, count=1)
    testing.assert_not_enqueued(test_tasks.explode)
    assert len(testing.enqueued(test_tasks.add, args=(1,))) == 1


# --- a real runjobs process ---------------------------------------------------------


@needs_django_6
@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_tasks_run_under_runjobs_and_their_results_are_readable(runjobs):
    added = test_tasks.add.enqueue(20, b=22)
    recorded = test_tasks.record_task.enqueue("from-runjobs")
    exploded = test_tasks.explode.enqueue("bang")
    with_context = test_tasks.with_context.enqueue(key="k")
    unstorable = test_tasks.returns.enqueue("datetime", key="unstorable")

    worker = runjobs.start("--burst")
    assert worker.wait(120) == 0, runjobs.log(0)

    done = test_tasks.add.get_result(added.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert done.worker_ids[-1].split(":")[1] == str(worker.pid)
    recorded = task_backends["default"].get_result(recorded.id)
    assert (recorded.status, recorded.return_value) == (TaskResultStatus.SUCCESSFUL, "from-runjobs")
    assert SideEffect.objects.get(key="from-runjobs").pid == worker.pid
    failed = test_tasks.explode.get_result(exploded.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is test_tasks.TaskBoom
    assert "TaskBoom: bang" in failed.errors[0].traceback
    context = test_tasks.with_context.get_result(with_context.id).return_value
    assert context == {"attempt": 1, "id": with_context.id, "key": "k"}
    unstorable = test_tasks.returns.get_result(unstorable.id)
    assert (unstorable.status, unstorable.attempts) == (TaskResultStatus.FAILED, 1)
    assert unstorable.errors[0].exception_class is TypeError
    assert SideEffect.objects.filter(key="unstorable").count() == 1
