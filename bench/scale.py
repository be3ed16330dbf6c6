#!/usr/bin/env python3
"""Scale: django-cronqueue on PostgreSQL with a long history, many schedules and a big prune.

Three measurements, each the median of ``--runs`` runs:

- **history**: for each size of ``--history`` (finished rows beside the queue, spread over
  ``--history-days`` days), the drain rate of 20,000 no-op jobs (one ``runjobs --burst``
  process at its defaults) and the claim's latency (``--claims`` claims of 10 jobs with the
  worker's ``claim_due``, each completed: p50 and p99). Target: beside every history, the
  drain >= 90% and the claim p50 and p99 <= 110% of the empty table's.
- **schedules**: the time of one ``jobs.tick()`` when nothing is due, in a process that
  defines 1,000 cron schedules, against the same tick with none. Target: < 50 ms.
- **pruning**: ``--prune`` succeeded rows of one day past their retention, beside the
  largest history (kept within it), are pruned (by ``maintenance.prune``, in its own
  process, in batches of ``PRUNE_BATCH_SIZE``) while this process keeps claiming and
  completing jobs 10 at a time; the longest claim while the prune runs, against the longest
  of as many claims without it. Target: no claim waits for the prune (the longest claim
  stays under 100 ms, a tenth of the poll interval). Also the prune's wall time and the
  table's ``n_dead_tup`` right after it and after a ``VACUUM`` (the issue's target for a
  day of history: under 1 s, and no dead rows). ``--prune-beside N`` first writes N
  finished rows straight into the history tables of the last 20 days (PostgreSQL), for a
  prune beside a long history without the history measurement.
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

    .venv/bin/python bench/scale.py                 # 3 runs; the prune of 1M rows dominates
    .venv/bin/python bench/scale.py --runs 1 --history 0,200000 --prune 200000
    .venv/bin/python bench/scale.py --only history,pruning \\
        --history 0,1000000,20000000 --prune 5000000    # about 20 GB of disk
    .venv/bin/python bench/scale.py --only dynamic

``--vendor mariadb`` or ``--vendor sqlite`` runs the **history** measurement (only) on that
database instead, through the same drain and ``claim_due`` (its processes get ``BENCH_DB``
and ``BENCH_DB_NAME``): MariaDB's ``bench_scale`` (utf8mb4) or SQLite's
``bench/results/bench_scale.sqlite3``, (re)created, the history filled by one statement per
size (the SEQUENCE engine's ``seq_0_to_<n>``, a recursive CTE), then ``ANALYZE``:

    .venv/bin/python bench/scale.py --only history --vendor mariadb --history 0,1000000

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
# The retention of succeeded rows while measured: the history (spread over fewer days) is
# kept, the rows to prune are one day past it.
RETENTION = dt.timedelta(days=30)
NOOP = "benchjobs.noop"
ENV = {
    "DJANGO_SETTINGS_MODULE": "projects.cronqueue.settings",
    "BENCH_DB": "postgres",
    "BENCH_DB_NAME": DATABASE,
    "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)]),
    "BENCH_CRONQUEUE": json.dumps({"SUCCEEDED_RETENTION": RETENTION.total_seconds()}),
}
HISTORY_TARGET = 0.90
CLAIM_LATENCY_TARGET = 1.10  # claim p50 and p99 beside a history / with an empty table
TICK_TARGET_MS = 50.0
CLAIM_TARGET_MS = 100.0
DYNAMIC_TICK_TARGET_MS = 20.0
MATERIALIZE_TARGET_S = 2.0
MEASUREMENTS = ("history", "pruning", "schedules", "dynamic")
CHURN_MODES = ("churn", "held-transaction")  # run only when named
CHURN_DATABASE = "bench_churn"
VENDORS = ("postgres", "mariadb", "sqlite")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument(
        "--history",
        type=sizes,
        default="0,1000000",
        help="finished rows beside the queue, one measurement per size (comma-separated)",
    )
    parser.add_argument(
        "--history-days", type=float, default=20.0, help="days the history is spread over"
    )
    parser.add_argument("--claims", type=int, default=2_000, help="claims timed per run")
    parser.add_argument("--schedules", type=int, default=1_000)
    parser.add_argument("--ticks", type=int, default=50, help="ticks timed per run")
    parser.add_argument("--prune", type=int, default=1_000_000, help="rows to prune")
    parser.add_argument(
        "--prune-beside",
        type=int,
        default=0,
        help="pruning only: finished rows written straight into the history tables first "
        "(beside the history measurement's, if any)",
    )
    parser.add_argument(
        "--prune-seconds",
        type=float,
        default=0.0,
        help="stop the prune after this long and report its rate (0: let it finish)",
    )
    parser.add_argument("--dynamic", type=int, default=100_000, help="dynamic schedules")
    parser.add_argument("--due", type=int, default=10_000, help="of them due at once")
    parser.add_argument(
        "--only", default=",".join(MEASUREMENTS), help=f"a subset of {','.join(MEASUREMENTS)}"
    )
    parser.add_argument(
        "--vendor",
        choices=VENDORS,
        default="postgres",
        help="the database of the history measurement (the others: postgres only)",
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
    if not 0 < options.history_days < RETENTION.days:
        parser.error(f"--history-days: more than 0 and fewer than {RETENTION.days}")
    if unknown := set(chosen) - set(MEASUREMENTS) - set(CHURN_MODES):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    if options.vendor != "postgres" and chosen != ["history"]:
        parser.error(f"--vendor {options.vendor}: the history measurement only (--only history)")
    if set(chosen) & set(CHURN_MODES):
        os.environ["BENCH_DB_NAME"] = CHURN_DATABASE
        if set(chosen) - set(CHURN_MODES):
            parser.error("--only: churn and held-transaction run on their own")
        return measure_churn(chosen, options)

    from benchlib import db

    os.environ["BENCH_DB"] = options.vendor
    os.environ["BENCH_DB_NAME"] = database_name(options.vendor)
    db.recreate(options.vendor, os.environ["BENCH_DB_NAME"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results: dict[str, Any] = {
        "started": dt.datetime.now(dt.timezone.utc).isoformat(),
        "vendor": options.vendor,
    }
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


def database_name(vendor: str) -> str:
    """``bench_scale``; a file under bench/results/ on SQLite."""
    return str(BENCH / "results" / f"{DATABASE}.sqlite3") if vendor == "sqlite" else DATABASE


def sql(statement: str, params: tuple = (), database: str | None = None) -> list[tuple]:
    """Run one statement (``%s`` placeholders) on its own autocommit connection (VACUUM
    needs one), to BENCH_DB's database ``database`` (by default BENCH_DB_NAME's)."""
    from benchlib.db import Database

    vendor = os.environ["BENCH_DB"]
    if vendor == "sqlite":
        statement = statement.replace("%s", "?")
    connection = Database(vendor, database or os.environ["BENCH_DB_NAME"])
    try:
        cursor = connection.connection.cursor()
        # No parameters, no placeholders: MySQLdb would %-format the statement anyway.
        cursor.execute(statement, params) if params else cursor.execute(statement)
        return cursor.fetchall() if cursor.description else []
    finally:
        connection.close()


def analyze() -> None:
    """Fresh planner statistics for the job table (PostgreSQL: vacuumed too)."""
    sql(
        {
            "postgres": f"VACUUM ANALYZE {TABLE}",
            "mariadb": f"ANALYZE TABLE {TABLE}",
            "sqlite": "ANALYZE",
        }[os.environ["BENCH_DB"]]
    )


def settle() -> None:
    """Analyze, then flush what the writes so far left to flush (PostgreSQL: a
    ``CHECKPOINT``; SQLite: the WAL into the database file; MariaDB: the purge of the
    row versions the writes left, as a VACUUM would), so that none is paid for while
    measured."""
    from benchlib.db import checkpoint_postgres

    analyze()
    if os.environ["BENCH_DB"] == "postgres":
        checkpoint_postgres()
    elif os.environ["BENCH_DB"] == "sqlite":
        sql("PRAGMA wal_checkpoint(TRUNCATE)")
    elif os.environ["BENCH_DB"] == "mariadb":
        wait_for_purge()
        flush_dirty_pages()


PURGED = 1_000  # undo logs left for InnoDB's purge, at most, before a measurement
PURGE_WAIT = 300.0


def wait_for_purge() -> None:
    """Wait until InnoDB's purge has caught up with the writes so far (a move of a million
    rows to the history partition leaves as many delete-marked entries in the hot one)."""
    deadline = time.monotonic() + PURGE_WAIT
    while time.monotonic() < deadline:
        [(_, left)] = sql("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'")
        if int(left) <= PURGED:
            return
        time.sleep(1)
    print(f"  InnoDB's purge still had {int(left):,} undo logs after {PURGE_WAIT:.0f} s")


FLUSHED = 200  # dirty pages left in InnoDB's buffer pool, at most, before a measurement


def flush_dirty_pages() -> None:
    """InnoDB's CHECKPOINT: have the page cleaner write every dirty page out (the dirty
    page target at 0 for a while), so that a drain does not pay for an earlier write."""
    [(_, before)] = sql("SHOW GLOBAL VARIABLES LIKE 'innodb_max_dirty_pages_pct'")
    sql("SET GLOBAL innodb_max_dirty_pages_pct = 0")
    try:
        deadline = time.monotonic() + PURGE_WAIT
        while time.monotonic() < deadline:
            [(_, dirty)] = sql("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
            if int(dirty) <= FLUSHED:
                return
            time.sleep(0.5)
        print(f"  InnoDB still had {int(dirty):,} dirty pages after {PURGE_WAIT:.0f} s")
    finally:
        sql(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(before)}")


def table_bytes() -> int:
    """The job table with its indexes (MariaDB: InnoDB's estimate)."""
    vendor = os.environ["BENCH_DB"]
    if vendor == "postgres":
        [(total,)] = sql(f"SELECT pg_total_relation_size('{TABLE}')")
    elif vendor == "mariadb":
        [(total,)] = sql(
            "SELECT data_length + index_length FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            (TABLE,),
        )
    else:
        [(total,)] = sql(
            "SELECT SUM(pgsize) FROM dbstat "
            "WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = %s)",
            (TABLE,),
        )
    return int(total)


def sizes(text: str) -> list[int]:
    """``0,1000000,20000000``: the sizes, ascending."""
    try:
        values = sorted({int(value) for value in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not values or values[0] < 0:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}")
    return values


def insert_finished(
    count: int, finished_ago: dt.timedelta, spread: dt.timedelta = dt.timedelta(0)
) -> None:
    """``count`` succeeded rows of the no-op job, finished from ``finished_ago`` before
    now to ``spread`` earlier than that, evenly: on PostgreSQL in steps of 250,000 rows,
    elsewhere by one statement."""
    step = 250_000 if os.environ["BENCH_DB"] == "postgres" else count
    for start in range(0, count, step):
        source, params = finished_source(
            start, min(start + step, count) - 1, finished_ago, spread, count
        )
        sql(
            f"INSERT INTO {TABLE} (name, payload, status, queue, priority, attempts, "
            "max_attempts, run_at, worker_id, last_error, traceback, created_at, started_at, "
            "finished_at) "
            "SELECT %s, " + PAYLOAD[os.environ["BENCH_DB"]] + ", 'succeeded', 'default', 0, "
            f"1, 4, at, '', '', '', at, at, at FROM {source}",
            (NOOP, *params),
        )
    if os.environ["BENCH_DB"] in ("postgres", "mariadb"):
        archive_history()
    analyze()


def archive_history() -> None:
    """Move the rows just inserted where a site's workers would have put them as they
    finished: into the history tables, or MariaDB's history partition
    (``django_cronqueue.history.archive``)."""
    from django.utils import timezone

    from django_cronqueue.history import archive

    started = time.perf_counter()
    moved = 0
    while batch := archive.archive(timezone.now(), batch_size=500_000):  # 10M a call
        moved += batch
    print(f"  {moved:,} rows moved to history in {time.perf_counter() - started:.0f} s")


PAYLOAD = {
    "postgres": "jsonb_build_object('n', i)",
    "mariadb": "JSON_OBJECT('n', i)",
    "sqlite": "json_object('n', i)",
}


def finished_source(
    first: int, last: int, finished_ago: dt.timedelta, spread: dt.timedelta, count: int
) -> tuple[str, tuple]:
    """The rows ``first`` to ``last`` of ``count`` as a FROM clause of ``i`` and ``at``
    (when it finished: ``finished_ago`` before now, and ``spread * i / count`` earlier),
    with its parameters."""
    vendor = os.environ["BENCH_DB"]
    if vendor == "postgres":
        return (
            "generate_series(%s::bigint, %s::bigint) AS i, "
            "LATERAL (SELECT now() - %s - %s * (i::float8 / %s::float8)) AS finished (at)",
            (first, last, finished_ago, spread, count),
        )
    seconds = (finished_ago.total_seconds(), spread.total_seconds(), count)
    if vendor == "mariadb":  # the SEQUENCE engine's table of integers; DATETIME(6) in UTC
        return (
            "(SELECT seq AS i, TIMESTAMPADD(MICROSECOND, -FLOOR(1e6 * (%s + %s * seq / %s)), "
            f"UTC_TIMESTAMP(6)) AS at FROM seq_{first}_to_{last}) AS finished",
            seconds,
        )
    # SQLite: a recursive CTE; Django's text datetimes in UTC
    return (
        "(WITH RECURSIVE seq (i) AS (SELECT %s UNION ALL SELECT i + 1 FROM seq WHERE i < %s) "
        "SELECT i, strftime('%Y-%m-%d %H:%M:%f', 'now', -(%s + %s * i / CAST(%s AS REAL)) "
        "|| ' seconds') AS at FROM seq)",
        (first, last, *seconds),
    )


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
    from benchlib.spec import window_sql

    mark = fill(count)
    # Every drain starts just after a checkpoint, so none pays for one (or for the full
    # page images that follow it) that an earlier bulk insert brought on.
    settle()
    subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst"],
        cwd=ROOT,
        env={**os.environ},
        check=True,
        timeout=900,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    where = f"id > {int(mark)} AND status = 'succeeded'"
    [(done, seconds)] = sql(
        window_sql(os.environ["BENCH_DB"], TABLE, "started_at", "finished_at", where)
    )
    if done != count:
        left = sql(
            f"SELECT status, COUNT(*), MIN(run_at), MAX(run_at) FROM {TABLE} "
            f"WHERE id > {int(mark)} AND status <> 'succeeded' GROUP BY status"
        )
        raise SystemExit(f"the drain finished {done} of {count} jobs; left: {left}")
    sql(f"DELETE FROM {TABLE} WHERE id > %s", (mark,))
    return count / float(seconds)


def recount() -> float:
    """Make the counts of finished rows true to the table again (rows inserted by SQL were
    never counted): forget them and do the first housekeeping pass, as after an upgrade.
    Its seconds. A site's worker keeps them counted; without this, each drain's worker
    would do that first pass."""
    from django.utils import timezone

    from django_cronqueue.history import counting
    from django_cronqueue.models import FinishedCountMark

    FinishedCountMark.objects.all().delete()  # the next pass empties the counts, counts again
    started = time.perf_counter()
    counting.count_finished(timezone.now())
    return time.perf_counter() - started


def claim_latency(claims: int) -> list[float]:
    """``claims`` claims of 10 jobs (each completed) on a vacuumed table, after a
    checkpoint (ms); the rows they made go again."""
    mark = fill(5_000)
    settle()
    times = claim_times(lambda: False, minimum=claims)
    sql(f"DELETE FROM {TABLE} WHERE id > %s", (mark,))
    return times


def measure_history(options: argparse.Namespace) -> dict[str, Any]:
    days = dt.timedelta(days=options.history_days)
    rows = 0
    points = []
    for size in options.history:
        point: dict[str, Any] = {"finished_rows": size}
        if size > rows:
            print(f"history: {size:,} finished rows over {days.days} days", flush=True)
            started = time.perf_counter()
            # Finished an hour ago and earlier: within the retention, never pruned.
            insert_finished(size - rows, dt.timedelta(hours=1), days)
            point["fill_seconds"] = time.perf_counter() - started
            point["first_count_seconds"] = recount()
            rows = size
        else:
            print("history: empty table", flush=True)
        point["table_mb"] = table_bytes() / 2**20
        drains, p50s, p99s = [], [], []
        for _ in range(options.runs):
            drains.append(drain_rate(options.drain_jobs))
            times = claim_latency(options.claims)
            p50s.append(percentile(times, 50))
            p99s.append(percentile(times, 99))
        print(
            f"  drain {[round(rate) for rate in drains]} jobs/s, "
            f"claim p50 {[round(t, 2) for t in p50s]} ms, p99 {[round(t, 2) for t in p99s]} ms",
            flush=True,
        )
        point.update(
            drain_runs=drains,
            claim_p50_runs=p50s,
            claim_p99_runs=p99s,
            drain=statistics.median(drains),
            claim_p50=statistics.median(p50s),
            claim_p99=statistics.median(p99s),
        )
        points.append(point)
    return {"days": options.history_days, "claims": options.claims, "points": points}


# --- pruning ------------------------------------------------------------------------


def prune_child() -> int:
    import django

    django.setup()
    from django.utils import timezone

    from django_cronqueue.housekeeping import maintenance

    started = time.perf_counter()
    deleted = maintenance.prune(timezone.now())
    print(json.dumps({"deleted": deleted, "seconds": time.perf_counter() - started}))
    return 0


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


def dead_tuples() -> int:
    """The job table's ``n_dead_tup``, once the statistics of the sessions that ended are in."""
    time.sleep(1.5)  # a backend sends its statistics at most once a second
    [(dead,)] = sql("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", (TABLE,))
    return int(dead)


def insert_into_history_tables(count: int, days: int) -> None:
    """``count`` succeeded rows written straight into the day tables of the last ``days``
    days (yesterday and before), as many per day, without passing through the job table
    (about 130,000 rows/s here, where moving them goes at 20,000)."""
    from django.db import connection

    from django_cronqueue.history import archive

    today = dt.datetime.now(dt.timezone.utc).date()
    columns = ", ".join(HISTORY_ROW)
    values = ", ".join(HISTORY_ROW.values())
    for back in range(1, days + 1):
        day = today - dt.timedelta(days=back)
        name = archive.postgresql.day_table(day)
        archive.postgresql.ensure_table(connection, name)
        rows = count // days + (1 if back <= count % days else 0)
        started = dt.datetime.combine(day, dt.time(0, 30), dt.timezone.utc)
        sql(
            f'INSERT INTO "{name}" ({columns}) SELECT {values} FROM generate_series(1, %s) AS i, '
            "LATERAL (SELECT %s::timestamptz + interval '23 hours' * (i::float8 / %s)) AS f(at)",
            (rows, started, rows),
        )
    print(f"  {count:,} rows written into {days} history tables", flush=True)
    analyze()


# A history row by column, as the SQL of ``insert_into_history_tables`` gives it (``i``: its
# number, ``at``: when it ran and finished; an inheriting table has no default for ``id``).
HISTORY_ROW = {
    "id": f"nextval(pg_get_serial_sequence('{TABLE}', 'id'))",
    "name": f"'{NOOP}'",
    "payload": "jsonb_build_object('n', i)",
    "status": "'succeeded'",
    "queue": "'default'",
    "priority": "0",
    "attempts": "1",
    "max_attempts": "4",
    "run_at": "at",
    "created_at": "at",
    "started_at": "at",
    "finished_at": "at",
    **dict.fromkeys(
        ["worker_id", "last_error", "traceback", "exception_class_path", "cancel_requested_by"],
        "''",
    ),
    **dict.fromkeys(["cancel_reason", "limit_key", "schedule", "traceparent"], "''"),
    "snoozes": "0",
    "blocked": "FALSE",
    "waiting_for": "0",
    "has_downstream": "FALSE",
}


def measure_pruning(options: argparse.Namespace) -> dict[str, Any]:
    """Beside the history the history measurement left (within the retention) and
    ``--prune-beside`` rows more."""
    if options.prune_beside:
        print(f"pruning: {options.prune_beside:,} finished rows beside, over 20 days", flush=True)
        insert_into_history_tables(options.prune_beside, 20)
        recount()
    [(beside,)] = sql(f"SELECT COUNT(*) FROM {TABLE}")
    budget = options.prune_seconds or float("inf")
    runs = []
    for run in range(options.runs):
        print(
            f"pruning: run {run + 1}, {options.prune:,} rows of one day past their retention "
            f"beside {beside:,}",
            flush=True,
        )
        # One UTC day's rows, from 00:30 to 23:30, the day before the retention's cutoff.
        now = dt.datetime.now(dt.timezone.utc)
        day = (now - RETENTION - dt.timedelta(days=1)).date()
        last = dt.datetime.combine(day, dt.time(23, 30), dt.timezone.utc)
        insert_finished(options.prune, now - last, dt.timedelta(hours=23))
        recount()
        mark = fill(5_000)
        sql(f"VACUUM ANALYZE {TABLE}")
        dead_before = dead_tuples()
        child = subprocess.Popen(
            [sys.executable, __file__, "--prune-child"],
            cwd=ROOT,
            env={**os.environ},
            stdout=subprocess.PIPE,
            text=True,
        )
        started = time.perf_counter()

        def pruning(child: subprocess.Popen = child, started: float = started) -> bool:
            return child.poll() is None and time.perf_counter() - started < budget

        during = claim_times(pruning, minimum=1)
        if child.poll() is None:  # the budget ran out: each batch commits on its own
            child.terminate()
            child.wait(timeout=60)
            pruned = {"deleted": None, "seconds": time.perf_counter() - started}
        else:
            pruned = json.loads(child.communicate(timeout=60)[0])
        dead_after = dead_tuples()  # the prune's, and the claims' (2 per job claimed)
        cutoff = dt.datetime.now(dt.timezone.utc) - RETENTION
        [(left,)] = sql(
            f"SELECT COUNT(*) FROM {TABLE} WHERE status = 'succeeded' AND finished_at < %s",
            (cutoff,),
        )
        finished = pruned["deleted"] is not None
        pruned["deleted"] = options.prune - left
        quiet = claim_times(lambda: False, minimum=len(during))
        started = time.perf_counter()
        sql(f"VACUUM {TABLE}")
        vacuum_seconds = time.perf_counter() - started
        runs.append(
            {
                "pruned": pruned["deleted"],
                "prune_seconds": pruned["seconds"],
                "prune_finished": finished,
                "prune_seconds_all": pruned["seconds"] * options.prune / max(1, pruned["deleted"]),
                "dead_tuples_before": dead_before,
                "dead_tuples_after": dead_after,
                "vacuum_seconds": vacuum_seconds,
                "dead_tuples_after_vacuum": dead_tuples(),
                "claims_during": len(during),
                "longest_claim_during_ms": max(during),
                "p99_claim_during_ms": percentile(during, 99),
                "longest_claim_quiet_ms": max(quiet),
                "p99_claim_quiet_ms": percentile(quiet, 99),
            }
        )
        print(f"  {runs[-1]}", flush=True)
        if finished and left:
            raise SystemExit(f"the prune left {left} of {options.prune} rows")
        if run + 1 < options.runs:  # the last run's rows go with the TRUNCATE below
            sql(f"DELETE FROM {TABLE} WHERE id > %s", (mark,))
            # What the prune left (millions of rows when stopped), without the foreign
            # keys' checks of every row: nothing refers to these.
            import psycopg
            from benchlib.db import PG

            with psycopg.connect(dbname=DATABASE, autocommit=True, **PG) as connection:
                connection.execute("SET session_replication_role = replica")
                connection.execute(
                    f"DELETE FROM {TABLE} WHERE status = 'succeeded' AND finished_at < %s",
                    (cutoff,),
                )
    sql(f"TRUNCATE {TABLE} CASCADE")
    return {
        "beside": beside,
        "runs": runs,
        **{key: median_of(runs, key) for key in runs[0]},
        "prune_finished": all(run["prune_finished"] for run in runs),
    }


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
    from django_cronqueue.schedules.scheduler import Scheduler

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
    if results.keys() & {"history", "pruning", "schedules"}:
        print("\n| figure | value | target |\n| --- | ---: | --- |")
    if "history" in results:
        verdicts += report_history(results["history"])
    if "schedules" in results:
        verdicts += report_schedules(results["schedules"])
    if "pruning" in results:
        verdicts += report_pruning(results["pruning"])
    if "dynamic" in results:
        verdicts += report_dynamic(results["dynamic"])
    return verdicts


def report_dynamic(dynamic: dict[str, Any]) -> list[bool]:
    verdicts = [
        dynamic["tick_ms_p95"] <= DYNAMIC_TICK_TARGET_MS,
        dynamic["materialize_seconds"] <= MATERIALIZE_TARGET_S,
    ]
    mark = MARK
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


MARK = ["MISSED", "met"]


def report_history(history: dict[str, Any]) -> list[bool]:
    verdicts = []
    base, *others = history["points"]
    beside = f"{base['finished_rows']:,} finished rows" if base["finished_rows"] else "empty"
    for point in history["points"]:
        rows = f"{point['finished_rows']:,} finished rows ({point['table_mb']:,.0f} MB)"
        print(f"| drain, {rows} (jobs/s) | {point['drain']:,.0f} | |")
        print(
            f"| claim of 10, {rows} (ms, p50 / p99) | "
            f"{point['claim_p50']:.2f} / {point['claim_p99']:.2f} | |"
        )
    for point in others:
        ratios = [
            ("drain", point["drain"] / base["drain"], ">=", HISTORY_TARGET),
            ("claim p50", point["claim_p50"] / base["claim_p50"], "<=", CLAIM_LATENCY_TARGET),
            ("claim p99", point["claim_p99"] / base["claim_p99"], "<=", CLAIM_LATENCY_TARGET),
        ]
        for name, ratio, sense, target in ratios:
            met = ratio >= target if sense == ">=" else ratio <= target
            verdicts.append(met)
            print(
                f"| {name}, {point['finished_rows']:,} finished rows / {beside} | {ratio:.0%} "
                f"| {sense} {target:.0%}: {MARK[met]} |"
            )
    return verdicts


def report_schedules(schedules: dict[str, Any]) -> list[bool]:
    met = schedules["tick_ms_p95"] < TICK_TARGET_MS
    print(f"| tick, no schedules (ms, median) | {schedules['tick_ms_none']:.1f} | |")
    print(
        f"| tick, {schedules['schedules']:,} schedules, nothing due (ms, median) | "
        f"{schedules['tick_ms']:.1f} | |"
    )
    print(
        f"| tick, {schedules['schedules']:,} schedules (ms, p95) | "
        f"{schedules['tick_ms_p95']:.1f} | < {TICK_TARGET_MS:.0f} ms: {MARK[met]} |"
    )
    return [met]


def report_pruning(pruning: dict[str, Any]) -> list[bool]:
    met = pruning["longest_claim_during_ms"] < CLAIM_TARGET_MS
    rate = pruning["pruned"] / pruning["prune_seconds"]
    if pruning["prune_finished"]:
        print(
            f"| prune {pruning['pruned']:,.0f} rows of one day, beside {pruning['beside']:,} "
            f"(s) | {pruning['prune_seconds']:.1f} ({rate:,.0f} rows/s) | (issue: < 1 s) |"
        )
    else:
        print(
            f"| prune of one day, beside {pruning['beside']:,}: stopped after "
            f"{pruning['prune_seconds']:.0f} s, rows deleted | {pruning['pruned']:,.0f} "
            f"({rate:,.0f} rows/s) | |"
        )
        print(
            f"| prune of the whole day at that rate (s, extrapolated) | "
            f"{pruning['prune_seconds_all']:,.0f} | (issue: < 1 s) |"
        )
    print(
        f"| dead rows, before / right after the prune / after a VACUUM "
        f"({pruning['vacuum_seconds']:.1f} s) | {pruning['dead_tuples_before']:,.0f} / "
        f"{pruning['dead_tuples_after']:,.0f} / {pruning['dead_tuples_after_vacuum']:,.0f} "
        "| (issue: 0 after the prune) |"
    )
    print(f"| claims while pruning (10 jobs each) | {pruning['claims_during']:,.0f} | |")
    print(
        f"| claim while pruning (ms, p99 / longest) | {pruning['p99_claim_during_ms']:.1f} / "
        f"{pruning['longest_claim_during_ms']:.1f} | longest < {CLAIM_TARGET_MS:.0f} ms: "
        f"{MARK[met]} |"
    )
    print(
        f"| claim without pruning (ms, p99 / longest) | {pruning['p99_claim_quiet_ms']:.1f} / "
        f"{pruning['longest_claim_quiet_ms']:.1f} | |"
    )
    return [met]


if __name__ == "__main__":
    sys.exit(main())
