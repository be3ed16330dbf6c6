"""django-tasks-db: Django's Tasks framework with its database backend and ``db_worker``.

``db_worker`` runs one task at a time per process; it has no concurrency option, so its
"best" one-process setting is persistent connections (CONN_MAX_AGE=None): at Django's
default (0) it reconnects after every task. The Tasks API has no bulk enqueue.
``--no-startup-delay`` is passed everywhere: by default each worker sleeps up to 1 s at
start (against thundering herds), which would only blur when the drain starts.
"""

from __future__ import annotations

import sys

from benchlib.spec import Drain, System, window_sql

FINISHED = "status IN ('SUCCESSFUL', 'FAILED')"
PERSISTENT = {"BENCH_CONN_MAX_AGE": "none"}

SYSTEM = System(
    key="tasksdb",
    label="tasks-db",
    distribution="django-tasks-db",
    module="projects.tasksdb.driver",
    settings="projects.tasksdb.settings",
    vendor="postgres",
    database="bench_tasksdb",
    worker=("db_worker", "--no-startup-delay"),
    drains=(
        Drain("default", "db_worker (CONN_MAX_AGE=0)", "default"),
        Drain("persistent", "CONN_MAX_AGE=None", "one", env=PERSISTENT),
        Drain("2proc", "2 x db_worker", "two", processes=2),
        Drain(
            "2proc_persistent",
            "2 x db_worker, CONN_MAX_AGE=None",
            "two",
            processes=2,
            env=PERSISTENT,
        ),
    ),
    tables=("django_tasks_database_dbtaskresult",),
    done_sql=f"SELECT COUNT(*) FROM django_tasks_database_dbtaskresult WHERE {FINISHED}",
    window_sql=window_sql(
        "postgres", "django_tasks_database_dbtaskresult", "started_at", "finished_at", FINISHED
    ),
)
SYSTEMS = [SYSTEM]


# --- Django side ----------------------------------------------------------------------


def enqueue_one(i: int) -> None:
    from projects.tasksdb.benchtasks.tasks import noop

    noop.enqueue(n=i)


def fill(n: int) -> None:
    """The backend's own row, built as DatabaseBackend.enqueue builds it, in bulk."""
    from django.utils.json import normalize_json
    from django_tasks_db.models import DBTaskResult, get_date_max

    from projects.tasksdb.benchtasks.tasks import noop

    backend = noop.get_backend()
    rows = [
        DBTaskResult(
            id=backend._get_id(),
            args_kwargs=normalize_json({"args": [], "kwargs": {"n": i}}),
            priority=noop.priority,
            task_path=noop.module_path,
            queue_name=noop.queue_name,
            run_after=noop.run_after or get_date_max(),  # what its pre_save handler does
            backend_name=backend.alias,
        )
        for i in range(n)
    ]
    DBTaskResult.objects.bulk_create(rows, batch_size=1000)


def enqueue_record(i: int) -> None:
    from projects.tasksdb.benchtasks.tasks import record

    record.enqueue(n=i)


if __name__ == "__main__":
    from benchlib.driver import main

    main(sys.modules[__name__])
