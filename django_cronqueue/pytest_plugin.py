"""pytest fixtures for django-cronqueue, loaded through the ``pytest11`` entry point.

- ``cronqueue``: a ``django_cronqueue.testing.CronQueueHelper`` (it requests
  pytest-django's ``db``): ``.tick(now=...)`` / ``.run_due_jobs(...)``,
  ``.run_until_idle(...)``, ``.jobs()``, ``.enqueued(job, **payload_subset)``,
  ``.assert_enqueued(job, payload=None, count=None)``, ``.assert_not_enqueued(...)``,
  ``.capture()`` and ``.eager()``.
- ``cronqueue_eager``: the same, with eager mode on for the whole test: every enqueue
  runs its handler at once.

pytest loads this module in every session of an environment where django-cronqueue is
installed, Django project or not: it imports nothing from Django until a fixture runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from django_cronqueue.testing import CronQueueHelper


@pytest.fixture
def cronqueue(db: Any) -> CronQueueHelper:
    """Run jobs and assert what was enqueued, on the test database."""
    from django_cronqueue.testing import CronQueueHelper

    return CronQueueHelper()


@pytest.fixture
def cronqueue_eager(cronqueue: CronQueueHelper) -> Iterator[CronQueueHelper]:
    """``cronqueue`` with eager mode on: every enqueue runs its handler at once."""
    with cronqueue.eager():
        yield cronqueue
