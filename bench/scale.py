#!/usr/bin/env python3
"""Scale: django-cronqueue on PostgreSQL with a long history, many schedules and a big prune.

Three measurements, each the median of ``--runs`` runs:

- **history**: the drain rate of 20,000 no-op jobs (one ``runjobs --burst`` process at its
  defaults) with an empty table, then with 1,000,000 finished rows beside them. Target:
  with the history >= 90% of the empty-table rate.
- **schedules**: the time of one ``jobs.tick()`` when nothing is due, in a process that
  defines 1,000 cron schedules, against the same tick with none. Target: < 50 ms.
- **pruning**: 1,000,000 succeeded rows past their retention are pruned (by
  ``maintenance.prune``, in its own process, in batches of ``PRUNE_BATCH_SIZE``) while this
  process keeps claiming and completing jobs 10 at a time; the longest claim while the
  prune runs, against the longest of as many claims without it. Target: no claim waits
  for the prune (the longest claim stays under 100 ms, a tenth of the poll interval).
- **dynamic**: 100,000 dynamic schedules (``CronSchedule.objects.create_dynamic``, copied
  by SQL), nothing due: the time of one ``jobs.tick()`` (target: <= 20 ms); then 10,000 of
  them due at the same instant: the time of one ``Scheduler.materialize`` and a check of
  exactly one row per schedule (target: <= 2 s).

- **churn** and **held-transaction** (only when named in ``--only``; ``bench/churn.py``):
  sustained enqueue and drain for ``--minutes``, sampling the job table's dead rows, size,
  claim latency and how many lease renewals were HOT updates every 30 s; the second one
  holds a transaction open for ``--hold-minutes`` meanwhile. In their own database,
  ``bench_churn``:

    .venv/bin/python bench/scale.py --only churn --minutes 5
    .venv/bin/python bench/scale.py --only held-transaction --minutes 5 --hold-minutes 2

Run it from the repository root with the project's virtualenv (``scripts/test postgres``
makes one and starts PostgreSQL); it (re)creates the database ``bench_scale``:

    .venv/bin/python bench/scale.py                 # 3 runs, about 10 minutes
    .venv/bin/python bench/scale.py --runs 1 --history 200000 --prune 200000
    .venv/bin/python bench/scale.py --only dynamic

It prints the figures and the targets, writes them to ``bench/results/scale-<time>.json``
and exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import churn

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DATABASE = "bench_scale"
TABLE = "django_cronqueue_job"
NOOP = "benchjobs.noop"
ENV = {
    "DJANGO_SETTINGS_MODULE": "projects.cronqueue.settings",
    "BENCH_DB": "postgres",
    "BENCH_DB_NAME": DATABASE,
    "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)]),
}
HISTORY_TARGET = 0.90
TICK_TARGET_MS = 50.0
CLAIM_TARGET_MS = 100.0
DYNAMIC_TICK_TARGET_MS = 20.0
MATERIALIZE_TARGET_S = 2.0
MEASUREMENTS = ("history", "pruning", "schedules", "dynamic")
CHURN_MODES = ("churn", "held-transaction")  # run only when named
CHURN_DATABASE = "bench_churn"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--history", type=int, default=1_000_000, help="finished rows")
    parser.add_argument("--schedules", type=int, default=1_000)
    parser.add_argument("--ticks", type=int, default=50, help="ticks timed per run")
    parser.add_argument("--prune", type=int, default=1_000_000, help="rows to prune")
    parser.add_argument("--dynamic", type=int, default=100_000, help="dynamic schedules")
    parser.add_argument("--due", type=int, default=10_000, help="of them due at once")
    parser.add_argument(
        "--only", default=",".join(MEASUREMENTS), help=f"a subset of {','.join(MEASUREMENTS)}"
    )
    parser.add_argument("--prune-child", action="store_true", help=argparse.SUPPRESS)
    churn.add_arguments(parser)
    options = parser.parse_args()

    os.environ.update(ENV)
    sys.path[:0] = [str(BENCH), str(ROOT)]
    if options.prune_child:
        return prune_child()
    if options.producer_child:
        os.environ["BENCH_DB_NAME"] = CHURN_DATABASE
        return churn.producer_child(options.producer_child)
    chosen = options.only.split(",")
    if unknown := set(chosen) - set(MEASUREMENTS) - set(CHURN_MODES):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    if set(chosen) & set(CHURN_MODES):
        os.environ["BENCH_DB_NAME"] = CHURN_DATABASE
        if set(chosen) - set(CHURN_MODES):
            parser.error("--only: churn and held-transaction run on their own")
        return measure_churn(chosen, options)

    from benchlib import db

    db.recreate("postgres", DATABASE)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results: dict[str, Any] = {"started": dt.datetime.now(dt.timezone.utc).isoformat()}
    if "history" in chosen:
        results["history"] = measure_history(options)
    if "pruning" in chosen:
        results["pruning"] = measure_pruning(options)
    if "dynamic" in chosen:
        results["dynamic"] = measure_dynamic(options)
    if "schedules" in chosen:  # last: it registers the schedules
        results["schedules"] = measure_schedules(options)
    verdicts = report(results)
    out = BENCH / "results" / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten to {out.relative_to(ROOT)}")
    return 0 if all(verdicts) else 1


# --- churn ------------------------------------------------------------------------


def measure_churn(modes: list[str], options: argparse.Namespace) -> int:
    """Each mode on a freshly migrated ``bench_churn`` database."""
    import django
    from benchlib import db

    results: dict[str, Any] = {"started": dt.datetime.now(dt.timezone.utc).isoformat()}
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    verdicts: list[bool] = []
    for mode in modes:
        connections.close_all()
        db.recreate("postgres", CHURN_DATABASE)
        call_command("migrate", verbosity=0)
        print(f"{mode}: {options.minutes:g} minutes, {options.workers} x runjobs", flush=True)
        results[mode] = churn.run(mode, options, churn_sql, ROOT, CHURN_DATABASE)
        verdicts += results[mode]["verdicts"]
    out = BENCH / "results" / f"churn-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten to {out.relative_to(ROOT)}")
    return 0 if all(verdicts) else 1


def churn_sql(statement: str, params: tuple = ()) -> list[tuple]:
    return sql(statement, params, database=CHURN_DATABASE)


# --- the database ---------------------------------------------------------------------


def sql(statement: str, params: tuple = (), database: str = DATABASE) -> list[tuple]:
    """Run one statement on its own autocommit connection (VACUUM needs one)."""
    import psycopg
    from benchlib.db import PG

    with psycopg.connect(dbname=database, autocommit=True, **PG) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def insert_finished(count: int, finished_ago: dt.timedelta) -> None:
    """``count`` succeeded rows of the no-op job, finished ``finished_ago`` before now."""
    for start in range(0, count, 250_000):
        sql(
            f"INSERT INTO {TABLE} (name, payload, status, queue, priority, attempts, "
            "max_attempts, run_at, worker_id, last_error, traceback, created_at, started_at, "
            "finished_at) "
            "SELECT %s, jsonb_build_object('n', i), 'succeeded', 'default', 0, 1, 4, "
            "now() - %s, '', '', '', now() - %s, now() - %s, now() - %s "
            "FROM generate_series(%s, %s) AS i",
            (
                NOOP,
                finished_ago,
                finished_ago,
                finished_ago,
                finished_ago,
                start,
                min(start + 250_000, count) - 1,
            ),
        )
    sql(f"VACUUM ANALYZE {TABLE}")


def fill(count: int) -> int:
    """Queue ``count`` no-op jobs; returns the id they come after."""
    from django_cronqueue import jobs

    [(mark,)] = sql(f"SELECT COALESCE(MAX(id), 0) FROM {TABLE}")
    for start in range(0, count, 10_000):
        jobs.enqueue_many(NOOP, [{"n": i} for i in range(start, min(start + 10_000, count))])
    return mark


# --- history ------------------------------------------------------------------------


def drain_rate(count: int) -> float:
    """Jobs/s of one default ``runjobs --burst`` draining ``count`` fresh jobs."""
    from benchlib.db import checkpoint_postgres

    mark = fill(count)
    sql(f"VACUUM ANALYZE {TABLE}")
    # Every drain starts just after a checkpoint, so none pays for one (or for the full
    # page images that follow it) that an earlier bulk insert brought on.
    checkpoint_postgres()
    subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst"],
        cwd=ROOT,
        env={**os.environ},
        check=True,
        timeout=900,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    [(done, first, last)] = sql(
        f"SELECT COUNT(*), MIN(started_at), MAX(finished_at) FROM {TABLE} "
        "WHERE id > %s AND status = 'succeeded'",
        (mark,),
    )
    if done != count:
        raise SystemExit(f"the drain finished {done} of {count} jobs")
    sql(f"DELETE FROM {TABLE} WHERE id > %s", (mark,))
    return count / (last - first).total_seconds()


def measure_history(options: argparse.Namespace) -> dict[str, Any]:
    print(f"history: drain {options.drain_jobs:,} jobs, empty table", flush=True)
    empty = [drain_rate(options.drain_jobs) for _ in range(options.runs)]
    print(f"  {[round(rate) for rate in empty]} jobs/s", flush=True)
    print(f"history: {options.history:,} finished rows", flush=True)
    insert_finished(options.history, dt.timedelta(hours=1))  # within the 1-day retention
    full = [drain_rate(options.drain_jobs) for _ in range(options.runs)]
    print(f"  {[round(rate) for rate in full]} jobs/s", flush=True)
    sql(f"TRUNCATE {TABLE} CASCADE")
    return {
        "finished_rows": options.history,
        "empty_runs": empty,
        "history_runs": full,
        "empty": statistics.median(empty),
        "with_history": statistics.median(full),
    }


# --- pruning ------------------------------------------------------------------------


def prune_child() -> int:
    import django

    django.setup()
    from django.utils import timezone

    from django_cronqueue import maintenance

    started = time.perf_counter()
    deleted = maintenance.prune(timezone.now())
    print(json.dumps({"deleted": deleted, "seconds": time.perf_counter() - started}))
    return 0


def child_running(child: subprocess.Popen) -> Any:
    return lambda: child.poll() is None


def claim_times(until: Any, minimum: int) -> list[float]:
    """Claim 10 jobs and complete them, over and over, timing each claim (ms)."""
    from django.utils import timezone

    from django_cronqueue.claiming import claim_due, complete_successes

    times: list[float] = []
    while len(times) < minimum or until():
        started = time.perf_counter()
        claimed = claim_due(timezone.now(), queues=None, limit=10, worker_id="bench-scale")
        times.append((time.perf_counter() - started) * 1000)
        if not claimed:
            fill(5_000)
            continue
        complete_successes(claimed, finished_at=timezone.now(), using="default")
    return times


def measure_pruning(options: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for run in range(options.runs):
        print(f"pruning: run {run + 1}, {options.prune:,} rows past their retention", flush=True)
        sql(f"TRUNCATE {TABLE} CASCADE")
        insert_finished(options.prune, dt.timedelta(days=2))
        fill(5_000)
        child = subprocess.Popen(
            [sys.executable, __file__, "--prune-child"],
            cwd=ROOT,
            env={**os.environ},
            stdout=subprocess.PIPE,
            text=True,
        )
        during = claim_times(child_running(child), minimum=1)
        pruned = json.loads(child.communicate(timeout=60)[0])
        quiet = claim_times(lambda: False, minimum=len(during))
        runs.append(
            {
                "pruned": pruned["deleted"],
                "prune_seconds": pruned["seconds"],
                "claims_during": len(during),
                "longest_claim_during_ms": max(during),
                "p99_claim_during_ms": percentile(during, 99),
                "longest_claim_quiet_ms": max(quiet),
                "p99_claim_quiet_ms": percentile(quiet, 99),
            }
        )
        print(f"  {runs[-1]}", flush=True)
        if pruned["deleted"] != options.prune:
            raise SystemExit(f"the prune deleted {pruned['deleted']} of {options.prune} rows")
    sql(f"TRUNCATE {TABLE} CASCADE")
    return {"runs": runs, **{key: median_of(runs, key) for key in runs[0]}}


# --- schedules ----------------------------------------------------------------------


def tick_times(count: int) -> list[float]:
    from django.utils import timezone

    from django_cronqueue import jobs

    jobs.tick()  # first sight of the schedules: creates their rows
    times = []
    for _ in range(count):
        started = time.perf_counter()
        result = jobs.tick(now=timezone.now())
        times.append((time.perf_counter() - started) * 1000)
        if result.claimed:
            raise SystemExit("a tick found work: nothing should be due")
    return times


def measure_schedules(options: argparse.Namespace) -> dict[str, Any]:
    from django_cronqueue import jobs

    sql(f"TRUNCATE {TABLE} CASCADE")
    print(f"schedules: {options.ticks} ticks with none", flush=True)
    none = [statistics.median(tick_times(options.ticks)) for _ in range(options.runs)]

    def yearly(run: jobs.CronRun) -> None:
        """Never due while measured: the first minute of the year."""

    for index in range(options.schedules):
        jobs.cron("0 0 1 1 *", tz="Europe/Paris", name=f"scale.yearly_{index}")(yearly)
    print(f"schedules: {options.ticks} ticks with {options.schedules:,}", flush=True)
    runs = [tick_times(options.ticks) for _ in range(options.runs)]
    return {
        "schedules": options.schedules,
        "tick_ms_none_runs": none,
        "tick_ms_runs": [statistics.median(times) for times in runs],
        "tick_ms_p95_runs": [percentile(times, 95) for times in runs],
        "tick_ms_none": statistics.median(none),
        "tick_ms": statistics.median(statistics.median(times) for times in runs),
        "tick_ms_p95": statistics.median(percentile(times, 95) for times in runs),
    }


# --- dynamic schedules ---------------------------------------------------------------

SCHEDULE_TABLE = "django_cronqueue_cronschedule"
YEARLY = "0 0 1 1 *"


def create_dynamic_schedules(count: int) -> None:
    """One schedule made by the API, copied ``count - 1`` times by SQL (its own payload
    each), all yearly: never due while measured."""
    from django_cronqueue.models import CronSchedule

    sql(f"TRUNCATE {TABLE}, {SCHEDULE_TABLE} CASCADE")
    CronSchedule.objects.create_dynamic(
        name="scale.dynamic-0", job=NOOP, payload={"n": 0}, expression=YEARLY, tz="Europe/Paris"
    )
    sql(
        f"INSERT INTO {SCHEDULE_TABLE} (name, source, job, payload, expression, tz, options, "
        "cursor, next_run, paused, active, created_at, updated_at) "
        "SELECT 'scale.dynamic-' || i, source, job, jsonb_build_object('n', i), expression, "
        "tz, options, cursor, next_run, paused, active, created_at, updated_at "
        f"FROM {SCHEDULE_TABLE}, generate_series(1, %s) AS i WHERE name = 'scale.dynamic-0'",
        (count - 1,),
    )
    sql(f"VACUUM ANALYZE {SCHEDULE_TABLE}")


def materialize_due(scheduler: Any, due: int) -> tuple[float, int, int]:
    """Make ``due`` schedules due at the last minute boundary, time one materialization,
    and count the rows it made (all, and distinct schedules); then make them yearly again."""
    from django.utils import timezone

    now = timezone.now()
    boundary = now.replace(second=0, microsecond=0)
    ids = f"SELECT id FROM {SCHEDULE_TABLE} ORDER BY id LIMIT %s"
    sql(
        f"UPDATE {SCHEDULE_TABLE} SET expression = '* * * * *', cursor = %s, next_run = %s "
        f"WHERE id IN ({ids})",
        (boundary - dt.timedelta(seconds=1), boundary, due),
    )
    started = time.perf_counter()
    created = scheduler.materialize(timezone.now())
    seconds = time.perf_counter() - started
    [(rows, distinct)] = sql(
        f"SELECT COUNT(*), COUNT(DISTINCT schedule) FROM {TABLE} WHERE scheduled_for = %s",
        (boundary,),
    )
    if created != due or rows != due or distinct != due:
        raise SystemExit(f"materialized {created}, {rows} rows of {distinct} schedules, not {due}")
    sql(f"DELETE FROM {TABLE}")
    sql(
        f"UPDATE {SCHEDULE_TABLE} SET expression = %s, next_run = %s WHERE id IN ({ids})",
        (YEARLY, now + dt.timedelta(days=366), due),
    )
    return seconds, rows, distinct


def measure_dynamic(options: argparse.Namespace) -> dict[str, Any]:
    from django_cronqueue.scheduler import Scheduler

    print(f"dynamic: {options.dynamic:,} schedules, {options.ticks} ticks", flush=True)
    create_dynamic_schedules(options.dynamic)
    ticks = [tick_times(options.ticks) for _ in range(options.runs)]
    print(f"dynamic: {options.due:,} due at once", flush=True)
    scheduler = Scheduler()
    scheduler.materialize(dt.datetime.now(dt.timezone.utc))  # syncs; nothing due
    seconds = [materialize_due(scheduler, options.due)[0] for _ in range(options.runs)]
    return {
        "schedules": options.dynamic,
        "due": options.due,
        "tick_ms_runs": [statistics.median(times) for times in ticks],
        "tick_ms_p95_runs": [percentile(times, 95) for times in ticks],
        "tick_ms": statistics.median(statistics.median(times) for times in ticks),
        "tick_ms_p95": statistics.median(percentile(times, 95) for times in ticks),
        "materialize_seconds_runs": seconds,
        "materialize_seconds": statistics.median(seconds),
    }


# --- report -------------------------------------------------------------------------


def percentile(values: list[float], rank: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(rank / 100 * len(ordered)) - 1))]


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def report(results: dict[str, Any]) -> list[bool]:
    verdicts = []
    if "dynamic" in results:
        verdicts += report_dynamic(results["dynamic"])
    if {"history", "pruning", "schedules"} <= results.keys():
        verdicts += report_history(results)
    return verdicts


def report_dynamic(dynamic: dict[str, Any]) -> list[bool]:
    verdicts = [
        dynamic["tick_ms_p95"] <= DYNAMIC_TICK_TARGET_MS,
        dynamic["materialize_seconds"] <= MATERIALIZE_TARGET_S,
    ]
    mark = ["MISSED", "met"]
    print("\n| figure | value | target |\n| --- | ---: | --- |")
    print(
        f"| tick, {dynamic['schedules']:,} dynamic schedules, nothing due (ms, median / p95) "
        f"| {dynamic['tick_ms']:.1f} / {dynamic['tick_ms_p95']:.1f} | "
        f"p95 <= {DYNAMIC_TICK_TARGET_MS:.0f} ms: {mark[verdicts[0]]} |"
    )
    print(
        f"| {dynamic['due']:,} occurrences due at once, one row each (s) | "
        f"{dynamic['materialize_seconds']:.2f} | <= {MATERIALIZE_TARGET_S:.0f} s: "
        f"{mark[verdicts[1]]} |"
    )
    return verdicts


def report_history(results: dict[str, Any]) -> list[bool]:
    history, pruning, schedules = results["history"], results["pruning"], results["schedules"]
    ratio = history["with_history"] / history["empty"]
    verdicts = [
        ratio >= HISTORY_TARGET,
        schedules["tick_ms_p95"] < TICK_TARGET_MS,
        pruning["longest_claim_during_ms"] < CLAIM_TARGET_MS,
    ]
    mark = ["MISSED", "met"]
    print("\n| figure | value | target |\n| --- | ---: | --- |")
    print(f"| drain, empty table (jobs/s) | {history['empty']:,.0f} | |")
    print(
        f"| drain, {history['finished_rows']:,} finished rows (jobs/s) | "
        f"{history['with_history']:,.0f} | |"
    )
    print(f"| with history / empty | {ratio:.0%} | >= {HISTORY_TARGET:.0%}: {mark[verdicts[0]]} |")
    print(f"| tick, no schedules (ms, median) | {schedules['tick_ms_none']:.1f} | |")
    print(
        f"| tick, {schedules['schedules']:,} schedules, nothing due (ms, median) | "
        f"{schedules['tick_ms']:.1f} | |"
    )
    print(
        f"| tick, {schedules['schedules']:,} schedules (ms, p95) | "
        f"{schedules['tick_ms_p95']:.1f} | < {TICK_TARGET_MS:.0f} ms: {mark[verdicts[1]]} |"
    )
    print(
        f"| prune {pruning['pruned']:,.0f} rows (s) | {pruning['prune_seconds']:.1f} "
        f"({pruning['pruned'] / pruning['prune_seconds']:,.0f} rows/s) | |"
    )
    print(f"| claims while pruning (10 jobs each) | {pruning['claims_during']:,.0f} | |")
    print(
        f"| claim while pruning (ms, p99 / longest) | {pruning['p99_claim_during_ms']:.1f} / "
        f"{pruning['longest_claim_during_ms']:.1f} | longest < {CLAIM_TARGET_MS:.0f} ms: "
        f"{mark[verdicts[2]]} |"
    )
    print(
        f"| claim without pruning (ms, p99 / longest) | {pruning['p99_claim_quiet_ms']:.1f} / "
        f"{pruning['longest_claim_quiet_ms']:.1f} | |"
    )
    return verdicts


if __name__ == "__main__":
    sys.exit(main())
