"""Django tasks listed in the backend's ``OPTIONS["SENSITIVE"]`` (SPEC section 16):
their arguments stored encrypted, and their ``TaskResult`` never shows them, nor the
return value."""

import json

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_cronqueue import backend, jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job
from tests.sensitive_keys import KEY_A, SECRET
from tests.testapp.models import SideEffect
from tests.testapp.sensitive_jobs import digest
from tests.testapp.sensitive_tasks import charge_task, returns_a_set

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not backend.HAS_DJANGO_TASKS, reason="needs a Tasks framework"),
]

NAMES = ("charge_task", "returns_a_set")


@pytest.fixture
def sensitive_task():
    try:
        from django.tasks import task
    except ImportError:  # Django 5.2: the backport
        from django_tasks import task
    tasks = {
        **settings.TASKS,
        "sensitive": {
            "BACKEND": "django_cronqueue.backend.CronQueueBackend",
            "OPTIONS": {"SENSITIVE": [f"tests.testapp.sensitive_tasks.{n}" for n in NAMES]},
        },
    }
    with override_settings(TASKS=tasks, CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A]}):
        yield task(backend="sensitive")
    for name in NAMES:
        registry.unregister(f"task:tests.testapp.sensitive_tasks.{name}")


def test_a_sensitive_tasks_arguments_and_result_are_never_in_clear(sensitive_task):
    sensitive_task = sensitive_task(charge_task)
    enqueued = sensitive_task.enqueue(SECRET, amount=12)
    assert (enqueued.args, enqueued.kwargs) == ([], {})
    row = Job.objects.get(pk=int(enqueued.id))
    assert SECRET not in json.dumps(row.payload)
    assert row.decrypted_payload() == {"args": [SECRET], "kwargs": {"amount": 12}}

    assert jobs.tick() == jobs.TickResult(claimed=1, ran=1, failed=0)
    assert SideEffect.objects.filter(key=digest(SECRET)).exists()  # the task got it in clear
    done = sensitive_task.get_result(enqueued.id)
    assert done.is_finished and done.errors == []
    assert (done.args, done.kwargs, done.return_value) == ([], {}, None)
    row.refresh_from_db()
    assert SECRET not in json.dumps([row.payload, row.result])
    assert row.result == {"$encrypted": None}


def test_a_return_value_json_cannot_hold_fails_without_quoting_it(sensitive_task):
    returns = sensitive_task(returns_a_set)
    enqueued = returns.enqueue(SECRET)
    assert jobs.tick().failed == 1
    row = Job.objects.get(pk=int(enqueued.id))
    assert row.status == "failed" and row.attempts == 1
    assert row.last_error.startswith("TypeError: ") and "returned a set" in row.last_error
    assert SECRET not in row.last_error + row.traceback + json.dumps(row.result)
    assert returns.get_result(enqueued.id).errors[0].exception_class is TypeError


def test_the_option_is_checked():
    with pytest.raises(ImproperlyConfigured, match="SENSITIVE"):
        backend.CronQueueBackend("x", {"OPTIONS": {"SENSITIVE": "shop.tasks.charge"}})
