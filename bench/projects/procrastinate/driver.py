"""procrastinate (Django integration): ``manage.py procrastinate worker``.

Enqueueing goes through Django's connection (``task.defer``, ``task.batch_defer``); the
worker uses its own psycopg 3 pool and LISTEN/NOTIFY. ``--concurrency`` runs that many
jobs at once in one process (sync tasks run in threads). The dedupe figure uses
``queueing_lock``, its nearest equivalent of a dedupe key.
"""

from __future__ import annotations

import sys

from benchlib.spec import Drain, System

SYSTEM = System(
    key="procrastinate",
    label="procrastinate",
    distribution="procrastinate",
    module="projects.procrastinate.driver",
    settings="projects.procrastinate.settings",
    vendor="postgres",
    database="bench_procrastinate",
    worker=("procrastinate", "worker"),
    drains=(
        Drain("default", "worker (concurrency 1)", "default"),
        Drain("c2", "--concurrency 2", "one", ("--concurrency", "2")),
        Drain("c4", "--concurrency 4", "one", ("--concurrency", "4")),
        Drain("2proc", "2 x worker", "two", processes=2),
    ),
    tables=(
        "procrastinate_events",
        "procrastinate_jobs",
        "procrastinate_periodic_defers",
        "procrastinate_workers",
    ),
    done_sql="SELECT COUNT(*) FROM procrastinate_jobs WHERE status IN ('succeeded', 'failed')",
    # Its events table (filled by triggers) has when each job started and finished.
    window_sql=(
        "SELECT COUNT(*) FILTER (WHERE type IN ('succeeded', 'failed')), "
        "EXTRACT(EPOCH FROM MAX(at) FILTER (WHERE type IN ('succeeded', 'failed')) "
        "- MIN(at) FILTER (WHERE type = 'started')) FROM procrastinate_events"
    ),
    enqueue_modes=("single", "transaction", "bulk", "dedupe"),
)
SYSTEMS = [SYSTEM]


# --- Django side ----------------------------------------------------------------------


def enqueue_one(i: int) -> None:
    from projects.procrastinate.benchtasks.tasks import noop

    noop.defer(n=i)


def enqueue_one_dedupe(i: int) -> None:
    from projects.procrastinate.benchtasks.tasks import noop

    noop.configure(queueing_lock=f"bench-{i}").defer(n=i)


def enqueue_bulk(n: int) -> None:
    from projects.procrastinate.benchtasks.tasks import noop

    noop.batch_defer(*({"n": i} for i in range(n)))


def fill(n: int) -> None:
    for start in range(0, n, 5000):
        enqueue_bulk(min(5000, n - start))


def enqueue_record(i: int) -> None:
    from projects.procrastinate.benchtasks.tasks import record

    record.defer(n=i)


if __name__ == "__main__":
    from benchlib.driver import main

    main(sys.modules[__name__])
