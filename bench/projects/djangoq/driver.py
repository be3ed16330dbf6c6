"""django-q2 with the ORM broker: ``manage.py qcluster``.

A qcluster is a process tree (sentinel, pusher, monitor and ``workers`` worker
processes, default one per CPU); "one process" here means one qcluster, and its RSS and
CPU are summed over the tree. Results are saved at its default ``save_limit`` (250), so
the drain rate is read by polling the broker table, not from per-task timestamps. It has
no bulk enqueue.
"""

from __future__ import annotations

import sys

from benchlib.spec import Drain, System

NOOP = "projects.djangoq.benchtasks.tasks.noop"
RECORD = "projects.djangoq.benchtasks.tasks.record"

SYSTEM = System(
    key="djangoq",
    label="django-q2",
    distribution="django-q2",
    module="projects.djangoq.driver",
    settings="projects.djangoq.settings",
    vendor="postgres",
    database="bench_djangoq",
    worker=("qcluster",),
    drains=(
        Drain("default", "qcluster (workers = 2 CPUs)", "default"),
        Drain("w1", "workers 1", "one", env={"BENCH_Q_WORKERS": "1"}),
        Drain("w4", "workers 4", "one", env={"BENCH_Q_WORKERS": "4"}),
        Drain("2proc", "2 x qcluster", "two", processes=2),
    ),
    tables=("django_q_ormq", "django_q_task"),
    # Queued tasks are rows of the broker table, deleted when acknowledged.
    done_sql="SELECT {n} - COUNT(*) FROM django_q_ormq",
)
SYSTEMS = [SYSTEM]


# --- Django side ----------------------------------------------------------------------


def enqueue_one(i: int) -> None:
    from django_q.tasks import async_task

    async_task(NOOP, i)


class _Collect:
    """A stand-in broker for async_task: keeps the signed packages instead of pushing."""

    def __init__(self, list_key: str) -> None:
        self.list_key = list_key
        self.packages: list[str] = []

    def enqueue(self, package: str) -> int:
        self.packages.append(package)
        return len(self.packages)


def fill(n: int) -> None:
    """Packages built by async_task itself, inserted into the broker table in bulk."""
    import logging

    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    logging.getLogger("django-q").setLevel(logging.WARNING)  # one INFO line per task
    collect = _Collect(get_broker().list_key)
    for i in range(n):
        async_task(NOOP, i, broker=collect)
    now = timezone.now()
    OrmQ.objects.bulk_create(
        [OrmQ(key=collect.list_key, payload=package, lock=now) for package in collect.packages],
        batch_size=1000,
    )


def enqueue_record(i: int) -> None:
    from django_q.tasks import async_task

    async_task(RECORD, i)


if __name__ == "__main__":
    from benchlib.driver import main

    main(sys.modules[__name__])
