"""Jobs used by the test suite, discovered like any app's jobs.py."""

import os
import time

from django_cronqueue import jobs
from tests.testapp.models import SideEffect


@jobs.job
def record(key: str) -> None:
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=0)
def sleep_then_record(key: str, seconds: float) -> None:
    time.sleep(seconds)
    SideEffect.objects.create(key=key, pid=os.getpid())


@jobs.job(retries=2, backoff=lambda attempt: 0)
def always_fails(reason: str = "boom") -> None:
    raise RuntimeError(reason)


@jobs.job
def noop() -> None:
    return None
