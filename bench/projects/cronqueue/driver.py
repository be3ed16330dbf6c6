"""django-cronqueue: how the benchmark drives it (on PostgreSQL, SQLite and MariaDB)."""

from __future__ import annotations

import sys

from benchlib import RESULTS_DIR
from benchlib.spec import Drain, System, window_sql

FINISHED = "status IN ('succeeded', 'failed')"


def system(vendor: str) -> System:
    if vendor == "postgres":
        key, label, database = "cronqueue", "cronqueue", "bench_cronqueue"
        drains = (
            Drain("default", "runjobs (concurrency 1)", "default"),
            Drain("c2", "--concurrency 2", "one", ("--concurrency", "2")),
            Drain("c4", "--concurrency 4", "one", ("--concurrency", "4")),
            Drain(
                "p50",
                "PREFETCH 50",
                "one",
                env={"BENCH_CRONQUEUE": '{"PREFETCH": 50}'},
            ),
            Drain(
                "c2p50",
                "--concurrency 2, PREFETCH 50",
                "one",
                ("--concurrency", "2"),
                env={"BENCH_CRONQUEUE": '{"PREFETCH": 50}'},
            ),
            Drain(
                "c4p50",
                "--concurrency 4, PREFETCH 50",
                "one",
                ("--concurrency", "4"),
                env={"BENCH_CRONQUEUE": '{"PREFETCH": 50}'},
            ),
            Drain("2proc", "2 x runjobs", "two", processes=2),
        )
    else:
        key, label = f"cronqueue_{vendor}", f"cq {vendor}"
        database = "bench_cronqueue"
        if vendor == "sqlite":
            database = str(RESULTS_DIR / "bench_cronqueue.sqlite3")
        drains = (
            Drain("default", "runjobs (concurrency 1)", "default"),
            Drain("2proc", "2 x runjobs", "two", processes=2),
        )
    return System(
        key=key,
        label=label,
        distribution="django-cronqueue",
        module="projects.cronqueue.driver",
        settings="projects.cronqueue.settings",
        vendor=vendor,
        database=database,
        worker=("runjobs",),
        drains=drains,
        tables=(
            "django_cronqueue_job",
            "django_cronqueue_worker",
            "django_cronqueue_namelock",
            "django_cronqueue_flowlock",
            "django_cronqueue_jobstart",
        ),
        done_sql=f"SELECT COUNT(*) FROM django_cronqueue_job WHERE {FINISHED}",
        window_sql=window_sql(
            vendor, "django_cronqueue_job", "started_at", "finished_at", FINISHED
        ),
        enqueue_modes=("single", "transaction", "bulk", "dedupe"),
    )


SYSTEMS = [system("postgres"), system("sqlite"), system("mariadb")]


# --- Django side ----------------------------------------------------------------------


def enqueue_one(i: int) -> None:
    from projects.cronqueue.benchjobs.jobs import noop

    noop.enqueue(n=i)


def enqueue_one_dedupe(i: int) -> None:
    from projects.cronqueue.benchjobs.jobs import noop

    noop.using(dedupe_key=f"bench-{i}").enqueue(n=i)


def enqueue_bulk(n: int) -> None:
    from django_cronqueue import jobs
    from projects.cronqueue.benchjobs.jobs import noop

    jobs.enqueue_many(noop, [{"n": i} for i in range(n)])


def fill(n: int) -> None:
    enqueue_bulk(n)


def fill_flow(n: int) -> dict:
    """n due jobs of ``limited`` (10 starts per tenant an hour), 90% of them over their
    limit: tenant "big" has used its hour already (its 10 starts are logged) and its rows
    come first in claim order; behind them, 10% of n for as many tenants of 10 jobs each,
    every one of them within its limit. Needs BENCH_FLOW (set by the harness)."""
    import datetime as dt

    from django.utils import timezone

    from django_cronqueue import jobs
    from django_cronqueue.models import JobStart
    from projects.cronqueue.benchjobs.jobs import FLOW_RATE_COUNT, limited

    runnable = n // 10
    over = n - runnable
    now = timezone.now()
    JobStart.objects.bulk_create(
        JobStart(name=limited.name, limit_key="big", started_at=now) for _ in range(FLOW_RATE_COUNT)
    )
    earlier = now - dt.timedelta(minutes=1)
    jobs.enqueue_many(limited, [{"n": i, "tenant": "big"} for i in range(over)], run_at=earlier)
    tenants = -(-runnable // FLOW_RATE_COUNT)
    jobs.enqueue_many(
        limited, [{"n": over + i, "tenant": f"t{i % tenants}"} for i in range(runnable)], run_at=now
    )
    return {"runnable": runnable, "over": over, "tenants": tenants}


def fill_group(n: int) -> None:
    """A group of n no-op members and a then callback, written in one transaction."""
    from django_cronqueue import jobs
    from projects.cronqueue.benchjobs.jobs import noop

    jobs.group([noop.s(n=i) for i in range(n)]).then(noop.s(n=-1)).enqueue()


def enqueue_record(i: int) -> None:
    from projects.cronqueue.benchjobs.jobs import record

    record.enqueue(n=i)


if __name__ == "__main__":
    from benchlib.driver import main

    main(sys.modules[__name__])
