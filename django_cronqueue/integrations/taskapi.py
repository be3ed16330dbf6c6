"""Django's Tasks framework, from wherever this site has it.

Django >= 6.0 ships it as ``django.tasks``. On Django 5.2 the ``django-tasks`` package
(``pip install django-cronqueue[tasks]``) is the same API as ``django_tasks``, with two
exceptions spelled ``InvalidTaskError`` and ``InvalidTaskBackendError``. ``PROVIDER``
says which one was found (``django.tasks`` wins when both are there), or is None; the
names below are then None too, and ``backend`` says what to install.
"""

from __future__ import annotations

from typing import Any

PROVIDER: str | None = None

BaseTaskBackend: Any = None
TaskContext: Any = None
TaskError: Any = None
TaskResult: Any = None
TaskResultStatus: Any = None
task_backends: Any = None
InvalidTask: Any = None
InvalidTaskBackend: Any = None
TaskResultDoesNotExist: Any = None
task_enqueued: Any = None
task_started: Any = None
task_finished: Any = None
normalize_json: Any = None


def _django() -> dict[str, Any]:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    return _names(
        BaseTaskBackend, TaskContext, TaskError, TaskResult, TaskResultStatus, task_backends,
        InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist,
        task_enqueued, task_started, task_finished, normalize_json,
    )  # fmt: skip


def _backport() -> dict[str, Any]:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import (
        InvalidTaskBackendError,
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    return _names(
        BaseTaskBackend, TaskContext, TaskError, TaskResult, TaskResultStatus, task_backends,
        InvalidTaskError, InvalidTaskBackendError, TaskResultDoesNotExist,
        task_enqueued, task_started, task_finished, normalize_json,
    )  # fmt: skip


NAMES = (
    "BaseTaskBackend", "TaskContext", "TaskError", "TaskResult", "TaskResultStatus",
    "task_backends", "InvalidTask", "InvalidTaskBackend", "TaskResultDoesNotExist",
    "task_enqueued", "task_started", "task_finished", "normalize_json",
)  # fmt: skip


def _names(*values: Any) -> dict[str, Any]:
    return dict(zip(NAMES, values, strict=True))


for _package, _load in (("django.tasks", _django), ("django_tasks", _backport)):
    try:
        globals().update(_load())
    except ImportError:  # absent, or a backport without one of these names
        continue
    PROVIDER = _package
    break
