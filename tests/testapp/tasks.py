"""Django Tasks (Django >= 6.0, or the django-tasks backport on 5.2) used by the test suite.

Imported at start-up by the app config's autodiscovery when TASKS uses
CronQueueBackend (tests/settings.py configures it when either is there).
"""

import datetime as dt
import os

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from tests.testapp.models import SideEffect


class TaskBoom(Exception):
    """Raised by a failing task: a non-builtin exception, to check its dotted path."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="tasks", priority=5)
def record_task(key: str) -> str:
    SideEffect.objects.create(key=key, pid=os.getpid())
    return key


@task(backend="no_retries")
def explode(message: str = "boom") -> None:
    raise TaskBoom(message)


@task
def fails_once(key: str) -> str:
    """Raises on its first attempt, succeeds on the next."""
    if not SideEffect.objects.filter(key=key).exists():
        SideEffect.objects.create(key=key, pid=os.getpid())
        raise ValueError("first attempt fails")
    return "second time lucky"


@task(takes_context=True)
def with_context(context, key: str) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "key": key}


@task
async def async_add(a: int, b: int) -> int:
    return a + b


RETURNED = {
    "datetime": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),  # not JSON
    "bytes": b"caf\xc3\xa9",  # Django's backends decode bytes
    "tuple": ("a", (1, 2)),
    "range": range(3),
}


@task
def returns(kind: str, key: str) -> object:
    """Does its work (a SideEffect row ``key``), then returns ``RETURNED[kind]``."""
    SideEffect.objects.create(key=key, pid=os.getpid())
    return RETURNED[kind]
