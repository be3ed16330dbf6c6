"""A backend for Django's Tasks framework (Django >= 6.0, or the django-tasks backport).

``TASKS = {"default": {"BACKEND": "django_cronqueue.backend.CronQueueBackend"}}`` makes
functions decorated with ``django.tasks.task`` enqueue as ``Job`` rows. ``runjobs`` runs
them with the retries, leases, admin and signals of any other job, and ``get_result()``
reads the row back as a ``TaskResult``.

How a worker learns about a task. Names are the only link between a row and code:
nothing is ever imported from a row. Each task is registered in this process's job
registry, under the name ``"task:<module>.<function>"``, when Django validates it,
which happens when the ``@task`` decorator runs, i.e. when the module defining it is
imported (and again on every enqueue). For a worker that never enqueues, the app
config imports every installed app's ``tasks.py`` at start-up (as it imports
``jobs.py``), once a ``CronQueueBackend`` is configured; ``OPTIONS["AUTODISCOVER"]``
changes the module names. A task defined elsewhere must be imported by some module
that is loaded at start-up, or its rows wait, pending, for a worker that knows it.

Arguments. A task takes positional and keyword arguments, normalized as Django's own
backends do (``as_json``); the row's payload is ``{"args": [...], "kwargs": {...}}`` and
goes through the same checks as every payload (JSON only, within ``MAX_PAYLOAD_BYTES``,
bound to the function's signature), raising ``jobs.InvalidPayload`` (a TypeError, as
Django documents) at the call site. A return value no database can store fails the task
with a TypeError, without a retry.

On Django 5.2, where ``django.tasks`` does not exist, the backend runs on the
``django-tasks`` package (the same API, as ``django_tasks``) when it is installed; without
it this module still imports, and using the backend raises ``ImproperlyConfigured``.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules, import_string

from . import signals
from .conf import database_alias
from .definitions.registry import JobDefinition, registry, validate_common_options
from .exceptions import InvalidPayload
from .integrations.taskapi import (
    PROVIDER,
    InvalidTask,
    InvalidTaskBackend,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from .integrations.taskapi import BaseTaskBackend as _BaseTaskBackend
from .values.validation import MAX_NAME_LENGTH, is_finite_number, is_int

# django.tasks (Django >= 6.0) or the django-tasks backport (Django 5.2): see taskapi.
HAS_DJANGO_TASKS = PROVIDER is not None
BaseTaskBackend: Any = _BaseTaskBackend if HAS_DJANGO_TASKS else object

logger = logging.getLogger("django_cronqueue")

NAME_PREFIX = "task:"
OPTION_KEYS = frozenset({"RETRIES", "TIMEOUT", "AUTODISCOVER", "SENSITIVE"})
DEFAULT_AUTODISCOVER = ("tasks",)
BACKEND_PATH = "django_cronqueue.backend.CronQueueBackend"


class TaskCancelled(Exception):
    """Stands for a cancelled job in ``TaskResult.errors``: Django has no cancelled status,
    so a cancelled job reads as ``FAILED`` with this error."""


def _require_django_tasks() -> None:
    if not HAS_DJANGO_TASKS:
        import django

        raise ImproperlyConfigured(
            "django_cronqueue.backend.CronQueueBackend needs Django's Tasks framework: "
            f"Django >= 6.0, or on Django {django.get_version()} the django-tasks package "
            "(pip install 'django-cronqueue[tasks]'). Install it, remove the backend from "
            "the TASKS setting, or enqueue with django_cronqueue.jobs instead."
        )


def job_name(task: Any) -> str:
    """The job name a Django task runs under: ``"task:<module>.<qualname>"``."""
    return f"{NAME_PREFIX}{task.module_path}"


# --- the registry of tasks ----------------------------------------------------------


@dataclass(eq=False)
class TaskDefinition(JobDefinition):
    """The job definition of a Django task: its handler runs ``task.func``."""

    task: Any = None
    unstorable_result_fails: ClassVar[bool] = True
    typed_values: ClassVar[bool] = False  # Django's rule: arguments must be JSON


# The TaskResult of the task run starting in this thread (set by the job_started
# receiver below, read by the runner for takes_context tasks).
_current_result: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "cronqueue_task_result", default=None
)


def registered_task(name: str) -> Any:
    """The Task registered under a job name in this process, or None."""
    definition = registry.get(name)
    return definition.task if isinstance(definition, TaskDefinition) else None


def _register(
    task: Any, retries: int | None, timeout: float | None, sensitive: bool = False
) -> JobDefinition:
    """Register ``task`` in the job registry (once; the first registration's options win).
    ``sensitive``: its arguments and its return value are stored encrypted, as
    ``@jobs.job(sensitive=True)`` stores a job's."""
    name = job_name(task)
    existing = registry.get(name)
    if isinstance(existing, TaskDefinition) and existing.task.func is task.func:
        return existing
    try:
        validate_common_options(
            name,
            retries=retries,
            backoff=lambda attempt: 0,
            timeout=timeout,
            queue=task.queue_name,
            priority=task.priority,
            on_failed=None,
        )
        return registry.register(
            TaskDefinition(
                name=name,
                func=_runner(task.func, task.takes_context, name),
                retries=retries,
                timeout=timeout,
                queue=task.queue_name,
                priority=task.priority,
                task=task,
                sensitive_all=sensitive,
            )
        )
    except ImproperlyConfigured as exc:
        raise InvalidTask(str(exc)) from None


def _runner(func: Callable[..., Any], takes_context: bool, name: str) -> Callable[..., Any]:
    """The handler a worker calls for a task's row: ``run(args=[...], kwargs={...})``."""

    def run(args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> Any:
        call_args = list(args)
        result = _current_result.get()
        _current_result.set(None)
        if takes_context:
            if result is None or result.task.func is not func:
                raise RuntimeError(
                    f"Task {name}: takes_context tasks run only under a django-cronqueue "
                    "worker (the TaskContext could not be built)."
                )
            call_args.insert(0, TaskContext(task_result=result))
        if inspect.iscoroutinefunction(func):
            return as_json(async_to_sync(func)(*call_args, **(kwargs or {})))
        return as_json(func(*call_args, **(kwargs or {})))

    # Error messages about the definition name the task's function, not this wrapper.
    run.__module__ = func.__module__
    run.__qualname__ = func.__qualname__
    run.__name__ = func.__name__
    return run


def as_json(value: Any) -> Any:
    """``value`` normalized as Django's own backends normalize arguments and return values
    (bytes decoded, tuples and other sequences as lists, mappings as dicts). A value that
    cannot be is returned as it is, for the checks that name the offending part to refuse
    (an argument: InvalidPayload; a return value: the task fails with a TypeError)."""
    try:
        return normalize_json(value)
    except (TypeError, ValueError, RecursionError):
        return value


# --- the backend --------------------------------------------------------------------


class CronQueueBackend(BaseTaskBackend):  # type: ignore[misc,valid-type,unused-ignore]
    """Django Tasks backend storing tasks as django-cronqueue ``Job`` rows.

    ``OPTIONS``: ``RETRIES`` (retries after the first attempt; default
    ``CRONQUEUE["DEFAULT_RETRIES"]``), ``TIMEOUT`` (seconds; default
    ``CRONQUEUE["DEFAULT_TIMEOUT"]``), both for the tasks whose decorator names this
    backend, and ``AUTODISCOVER`` (module names imported from every installed app at
    start-up; default ``["tasks"]``, ``[]`` for none), and ``SENSITIVE`` (the module
    paths of the tasks whose arguments and return value are stored encrypted, as
    ``@jobs.job(sensitive=True)`` stores them: their ``TaskResult`` shows no ``args``,
    ``kwargs`` or ``return_value``).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        _require_django_tasks()
        super().__init__(alias, params)
        options = dict(self.options)
        unknown = sorted(set(options) - OPTION_KEYS)
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(OPTION_KEYS))}."
            )
        self.retries = options.get("RETRIES")
        self.timeout = options.get("TIMEOUT")
        if self.retries is not None and (not is_int(self.retries) or self.retries < 0):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['RETRIES'] must be an integer >= 0 (retries "
                f"after the first attempt), got {self.retries!r}."
            )
        if self.timeout is not None and (not is_finite_number(self.timeout) or self.timeout <= 0):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['TIMEOUT'] must be a number of seconds > 0, "
                f"got {self.timeout!r}."
            )
        self.autodiscover = _autodiscover_option(alias, options)
        self.sensitive = _sensitive_option(alias, options)
        connect_task_signals()

    # validation and registration ----------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's checks, then registration in this process's job registry."""
        super().validate_task(task)
        if len(job_name(task)) > MAX_NAME_LENGTH:
            raise InvalidTask(
                f"Task {task.module_path}: its job name {job_name(task)!r} is longer than "
                f"{MAX_NAME_LENGTH} characters."
            )
        _register(task, self.retries, self.timeout, task.module_path in self.sensitive)

    def _check_arguments(self, task: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        leading = [None] if task.takes_context else []
        signature = inspect.signature(task.func)
        try:
            signature.bind(*leading, *args, **kwargs)
        except TypeError as exc:
            raise InvalidPayload(
                f"Task {task.module_path}{signature}: the arguments do not match ({exc})."
            ) from None

    # enqueueing -----------------------------------------------------------------------

    def enqueue(self, task: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        from .enqueueing.enqueue import enqueue

        self.validate_task(task)
        definition = registry.resolve(job_name(task))
        self._check_arguments(task, args, kwargs)
        job = enqueue(
            definition,
            {"args": as_json(list(args)), "kwargs": as_json(dict(kwargs))},
            run_at=task.run_after,
            priority=task.priority,
            queue=task.queue_name,
        )
        result = self.result_from_row(job, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    # results ---------------------------------------------------------------------------

    def get_result(self, result_id: Any) -> Any:
        """The TaskResult of the row whose id is ``result_id``.

        Raises ``TaskResultDoesNotExist`` when there is no such task row, or when its
        task is not defined in this process (its module was never imported)."""
        from .models import Job

        try:
            pk = int(str(result_id))
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        row = (
            Job.objects.using(database_alias()).filter(pk=pk, name__startswith=NAME_PREFIX).first()
        )
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        task = registered_task(row.name)
        if task is None:
            raise TaskResultDoesNotExist(
                f"{result_id}: job {row.name!r} is a task this process does not define "
                "(is its module imported?)"
            )
        return self.result_from_row(row, task)

    def result_from_row(self, row: Any, task: Any) -> Any:
        """Map a ``Job`` row to a Django ``TaskResult`` (one of a sensitive task without
        its arguments and return value: never shown in clear, nor encrypted)."""
        definition = registry.get(row.name)
        hidden = definition is not None and definition.sensitive
        payload = row.payload if isinstance(row.payload, dict) and not hidden else {}
        attempts = row.attempts or 0
        # The row keeps only the latest lease holder: earlier attempts' workers are "".
        worker_ids = [""] * max(attempts - 1, 0) + [row.worker_id] if attempts else []
        result: Any = TaskResult(
            task=self._task_for_row(row, task),
            id=str(row.pk),
            status=STATUS_MAP[row.status],
            enqueued_at=row.created_at,
            started_at=row.started_at,
            last_attempted_at=row.started_at,
            finished_at=row.finished_at,
            args=list(payload.get("args") or []),
            kwargs=dict(payload.get("kwargs") or {}),
            backend=self.alias,
            errors=task_errors(row),
            worker_ids=worker_ids,
        )
        object.__setattr__(result, "_return_value", None if hidden else row.result)
        return result

    def _task_for_row(self, row: Any, task: Any) -> Any:
        """The task as this row runs it: its priority, queue and run_after."""
        deferred = row.run_at is not None and row.created_at is not None
        run_after = row.run_at if deferred and row.run_at > row.created_at else None
        try:
            return replace(
                task,
                priority=row.priority,
                queue_name=row.queue,
                run_after=run_after,
                backend=self.alias,
            )
        except (InvalidTask, ImproperlyConfigured, TypeError, ValueError):
            return task  # a row changed outside Django's limits (e.g. priority > 100)

    # checks ----------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[Any]:
        from django.apps import apps

        if apps.is_installed("django_cronqueue"):
            return []
        return [
            checks.Error(
                f"TASKS[{self.alias!r}] uses {BACKEND_PATH}, but django_cronqueue is not in "
                "INSTALLED_APPS.",
                hint='Add "django_cronqueue" to INSTALLED_APPS and run migrate.',
                id="django_cronqueue.E020",
            )
        ]


STATUS_MAP: dict[str, Any] = (
    {
        "pending": TaskResultStatus.READY,
        "running": TaskResultStatus.RUNNING,
        "succeeded": TaskResultStatus.SUCCESSFUL,
        "failed": TaskResultStatus.FAILED,
        "cancelled": TaskResultStatus.FAILED,
    }
    if HAS_DJANGO_TASKS
    else {}
)


def _sensitive_option(alias: str, options: dict[str, Any]) -> frozenset[str]:
    value = options.get("SENSITIVE", ())
    if isinstance(value, str) or not all(isinstance(item, str) and item for item in value):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']['SENSITIVE'] must be a list of task module paths "
            f"(e.g. ['shop.tasks.charge']), got {value!r}."
        )
    return frozenset(value)


def _autodiscover_option(alias: str, options: dict[str, Any]) -> tuple[str, ...]:
    value = options.get("AUTODISCOVER", DEFAULT_AUTODISCOVER)
    if isinstance(value, str) or not all(isinstance(item, str) and item for item in value):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']['AUTODISCOVER'] must be a list of module names "
            f'(e.g. ["tasks"]), got {value!r}.'
        )
    return tuple(value)


# --- errors -------------------------------------------------------------------------

# The class path of an error whose class this process cannot name without importing
# anything: rows failed before the class was recorded, or a class of a module not loaded.
UNKNOWN_EXCEPTION_PATH = "builtins.Exception"


def task_errors(row: Any) -> list[Any]:
    """``TaskResult.errors`` of a row: its last error (the row keeps only the last one)."""
    if not row.last_error:
        return []
    if row.status == "cancelled":
        return [
            TaskError(
                exception_class_path=f"{__name__}.{TaskCancelled.__qualname__}",
                traceback=row.last_error,
            )
        ]
    return [
        TaskError(
            exception_class_path=exception_class_path(row.exception_class_path),
            traceback=row.traceback or row.last_error,
        )
    ]


def exception_class_path(recorded: str) -> str:
    """The class path to report for a failure: the one recorded when it was written, if
    it names an exception class of a module this process has already imported, else
    ``UNKNOWN_EXCEPTION_PATH``. Nothing is imported, and nothing is read from error text:
    ``TaskError.exception_class`` then resolves without running any module's code."""
    module_name, _, class_name = recorded.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    found = getattr(module, class_name, None) if module is not None else None
    if isinstance(found, type) and issubclass(found, BaseException):
        return recorded
    return UNKNOWN_EXCEPTION_PATH


# --- Django's task signals, sent from the worker ------------------------------------


def _load_result(sender: Any, job_id: int) -> Any:
    task = registered_task(sender) if isinstance(sender, str) else None
    if task is None:
        return None
    backend = task_backends[task.backend]
    if not isinstance(backend, CronQueueBackend):
        return None
    return backend.get_result(str(job_id))


def _send(signal: Any, backend_class: type, result: Any) -> None:
    for receiver, response in signal.send_robust(backend_class, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "A receiver of %s raised: %r", getattr(receiver, "__qualname__", receiver), response
            )


def _on_job_started(sender: Any, job: Any, **kwargs: Any) -> None:
    if not (isinstance(sender, str) and sender.startswith(NAME_PREFIX)):
        return
    _current_result.set(None)
    try:
        result = _load_result(sender, job.id)
        if result is not None:
            _current_result.set(result)
            _send(task_started, CronQueueBackend, result)
    except Exception:
        logger.exception("Task %s #%s: could not send task_started", sender, job.id)


def _on_job_finished(
    sender: Any, job: Any, exc: BaseException | None = None, **kwargs: Any
) -> None:
    if not (isinstance(sender, str) and sender.startswith(NAME_PREFIX)):
        return
    try:
        result = _load_result(sender, job.id)
        if result is None:
            return
        if exc is None:
            _send(task_finished, CronQueueBackend, result)
        else:
            _send_handling(exc, task_finished, result)
    except Exception:
        logger.exception("Task %s #%s: could not send task_finished", sender, job.id)


def _send_handling(exc: BaseException, signal: Any, result: Any) -> None:
    """Send ``signal`` while ``exc`` is being handled, as Django's own backends send
    task_finished for a failure: its receivers (Django's log line among them) read the
    failure from ``sys.exc_info()``."""
    traceback, context = exc.__traceback__, exc.__context__
    try:
        raise exc
    except BaseException:
        _send(signal, CronQueueBackend, result)
    finally:  # leave the exception as it was: without this frame, nor a new context
        exc.__traceback__, exc.__context__ = traceback, context


def connect_task_signals() -> None:
    """Send Django's task signals for task rows. Connected once a CronQueueBackend is
    configured (at start-up) or created, so other sites pay nothing for them."""
    signals.job_started.connect(_on_job_started, dispatch_uid="cronqueue_tasks_started")
    signals.job_succeeded.connect(_on_job_finished, dispatch_uid="cronqueue_tasks_succeeded")
    signals.job_failed.connect(_on_job_finished, dispatch_uid="cronqueue_tasks_failed")


# --- start-up -----------------------------------------------------------------------


def configured_aliases() -> list[tuple[str, dict[str, Any]]]:
    """The TASKS aliases whose backend is a CronQueueBackend (or a subclass)."""
    configured = getattr(settings, "TASKS", None)
    if not HAS_DJANGO_TASKS or not isinstance(configured, dict):
        return []
    found = []
    for alias, params in configured.items():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        if not isinstance(path, str):
            continue
        try:
            backend_class = import_string(path)
        except ImportError:
            continue  # Django reports a backend it cannot import
        if isinstance(backend_class, type) and issubclass(backend_class, CronQueueBackend):
            found.append((alias, params))
    return found


def autodiscover_task_modules() -> None:
    """Import every installed app's ``tasks.py`` (or the OPTIONS["AUTODISCOVER"] names)
    when a CronQueueBackend is configured, so that a worker knows every task."""
    names: list[str] = []
    aliases = configured_aliases()
    if aliases:
        connect_task_signals()
    for alias, params in aliases:
        options = params.get("OPTIONS") or {}
        for name in _autodiscover_option(alias, options):
            if name not in names:
                names.append(name)
    if names:
        autodiscover_modules(*names)
