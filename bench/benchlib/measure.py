"""The measurements. Each returns a dict of figures and raises on failure.

- enqueue: jobs/s of single calls (autocommit), of calls inside one transaction, of the
  bulk API and of single calls with a dedupe key, timed inside the driver process.
- drain: queue ``drain_jobs`` no-op jobs, ANALYZE, start the workers, and poll the number
  of finished jobs every 0.1 s until all are finished or ``drain_seconds`` have passed
  since the first one finished; stop the workers. Rate = finished jobs / (last finish -
  first start), from the system's own per-job timestamps where it keeps them, else from
  the polled counts.
- idle and latency: one worker at its defaults; one warm-up job proves it is up; after
  2 s of rest, its CPU time and memory (whole process tree) over ``idle_seconds``; then
  ``latency_jobs`` record_start jobs enqueued ``latency_interval`` apart.
- ceiling: pgbench, one client, a claim-and-complete UPDATE per transaction, and 50 per
  statement, on a table filled with pending rows.
- flow (django-cronqueue only): ``flow_jobs`` due jobs of a ``limit_by``/``rate_limit`` job,
  90% of them over their limit and first in claim order, drained by one default worker
  that counts the statements it sends (``benchlib/statements.py``); then the same number
  of runnable jobs as plain no-op jobs, counted the same way. Figures: jobs/s of the
  runnable ones, and statements, transactions and round trips per executed job.
- group (django-cronqueue only): a ``jobs.group`` of ``group_jobs`` no-op members with a
  ``then`` callback, drained (callback included) by one counted default worker; then a
  plain drain of as many jobs: the extra statements and round trips per member.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from . import BENCH_DIR, statements
from .db import PG, Database
from .procs import Workers, usage
from .spec import Drain, System

POLL = 0.1
QUIET_BUSY = 30.0  # percent of all cores: "quiet enough" to start a measurement
STARTUP_TIMEOUT = 60.0  # seconds for workers to finish their first job
SETTLE = 2.0  # seconds of rest before the idle window


@dataclass
class Options:
    enqueue_jobs: int = 2000
    enqueue_seconds: float = 3.0
    bulk_jobs: int = 20000
    drain_jobs: int = 20000
    drain_seconds: float = 5.0
    latency_jobs: int = 200
    latency_interval: float = 0.05
    idle_seconds: float = 10.0
    ceiling_seconds: int = 5
    quiet_wait: float = 10.0
    flow_jobs: int = 20000
    group_jobs: int = 10000


def wait_for_quiet(max_seconds: float) -> float:
    """Wait (at most ``max_seconds``) until the whole machine is under QUIET_BUSY % busy
    over one second, so that a measurement does not start in the middle of someone
    else's test run. Returns the last busy percentage seen."""
    deadline = time.monotonic() + max_seconds
    busy = psutil.cpu_percent(interval=1.0)
    while busy > QUIET_BUSY and time.monotonic() < deadline:
        busy = psutil.cpu_percent(interval=1.0)
    return busy


class Context:
    def __init__(self, options: Options, workdir: Path) -> None:
        self.options = options
        self.workdir = workdir  # logs and latency files of this invocation
        self.python = sys.executable

    def env(self, system: System, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env["PYTHONPATH"] = str(BENCH_DIR)
        env.update(system.environment())
        env.update(extra or {})
        return env

    def driver(
        self, system: System, *args: str, env: dict[str, str] | None = None, timeout: float = 900
    ) -> dict[str, Any]:
        """Run ``python -m <driver> ARGS`` and return the JSON on its last stdout line."""
        done = subprocess.run(
            [self.python, "-m", system.module, *args],
            cwd=BENCH_DIR,
            env=self.env(system, env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"{system.key} driver {args[0]} failed: {' | '.join(tail)}")
        return json.loads(lines[-1])

    def workers(self, system: System, drain: Drain, name: str, extra=None) -> Workers:
        command = [self.python, "-m", "django", *system.worker, *drain.args]
        return Workers(
            [command] * drain.processes,
            env=self.env(system, {**drain.env, **(extra or {})}),
            cwd=BENCH_DIR,
            log=self.workdir / "logs" / f"{system.key}-{name}.log",
        )


def measure_enqueue(ctx: Context, system: System) -> dict[str, Any]:
    o = ctx.options
    counts = {
        "single": o.enqueue_jobs,
        "transaction": o.enqueue_jobs,
        "bulk": o.bulk_jobs,
        "dedupe": o.enqueue_jobs,
    }
    args = ["--max-seconds", str(o.enqueue_seconds)]
    for mode in system.enqueue_modes:
        args += [f"--{mode}", str(counts[mode])]
    db = Database(system.vendor, system.database)
    try:
        db.reset(system.tables)
        rates = ctx.driver(system, "enqueue", *args)
        db.reset(system.tables)
        # The same single calls with a persistent connection (CONN_MAX_AGE=None): only a
        # system that closes connections itself between enqueues (django-q2) differs.
        persistent = ctx.driver(
            system, "enqueue", "--single", str(o.enqueue_jobs),
            "--max-seconds", str(o.enqueue_seconds), env={"BENCH_CONN_MAX_AGE": "none"},
        )  # fmt: skip
        rates["single_persistent"] = persistent["single"]
        db.reset(system.tables)
    finally:
        db.close()
    return {f"enqueue_{mode}": rate for mode, rate in rates.items()}


def measure_drain(ctx: Context, system: System, drain: Drain) -> dict[str, Any]:
    n = ctx.options.drain_jobs
    db = Database(system.vendor, system.database)
    try:
        db.reset(system.tables)
        ctx.driver(system, "fill", str(n))
        db.analyze(system.tables)
        done_sql = system.done_sql.format(n=n)
        samples: list[tuple[float, int]] = []
        with ctx.workers(system, drain, f"drain-{drain.key}") as workers:
            began = time.monotonic()
            while True:
                time.sleep(POLL)
                now, done = time.monotonic(), int(db.scalar(done_sql))
                if done > 0:
                    samples.append((now, done))
                if done >= n or (samples and now - samples[0][0] >= ctx.options.drain_seconds):
                    break
                if not samples and now - began > STARTUP_TIMEOUT:
                    raise RuntimeError(f"no job finished within {STARTUP_TIMEOUT:.0f}s")
                workers.check_alive()
        # The workers are stopped (gracefully: jobs in hand are finished or given back).
        (t0, d0), (t1, d1) = samples[0], samples[-1]
        result: dict[str, Any] = {"finished_all": d1 >= n, "polled_seconds": t1 - t0}
        if system.window_sql:
            finished, span = db.row(system.window_sql)
            result.update(rate=finished / float(span), jobs=finished, seconds=float(span))
            result["method"] = "per-job timestamps"
        else:
            result.update(rate=(d1 - d0) / (t1 - t0), jobs=d1 - d0, seconds=t1 - t0)
            result["method"] = f"polled every {POLL}s"
        db.reset(system.tables)
        return result
    finally:
        db.close()


def measure_idle_and_latency(ctx: Context, system: System, tag: str) -> dict[str, Any]:
    o = ctx.options
    default = next(d for d in system.drains if d.role == "default")
    path = ctx.workdir / f"latency-{system.key}-{tag}.txt"
    path.unlink(missing_ok=True)
    db = Database(system.vendor, system.database)
    try:
        db.reset(system.tables)
        with ctx.workers(system, default, "idle", {"BENCH_LATENCY_FILE": str(path)}) as workers:
            warm = ctx.driver(
                system, "latency", "--jobs", "1", "--interval", "0", "--file", str(path),
                "--first-id", "0", "--timeout", str(STARTUP_TIMEOUT),
            )  # fmt: skip
            if warm["started"] != 1:
                raise RuntimeError("the worker did not run the warm-up job")
            time.sleep(SETTLE)
            workers.check_alive()
            psutil.cpu_percent()  # starts the machine-wide counter
            before, t0 = usage(workers.pids), time.monotonic()
            time.sleep(o.idle_seconds)
            after, t1 = usage(workers.pids), time.monotonic()
            machine_busy = psutil.cpu_percent()  # all cores, everything running
            workers.check_alive()
            latency = ctx.driver(
                system, "latency", "--jobs", str(o.latency_jobs),
                "--interval", str(o.latency_interval), "--file", str(path),
                "--first-id", "1", "--timeout", "30",
            )  # fmt: skip
        db.reset(system.tables)
    finally:
        db.close()
    if latency["started"] < latency["jobs"]:
        raise RuntimeError(f"only {latency['started']} of {latency['jobs']} latency jobs ran")
    return {
        "idle_cpu_percent": (after.cpu_seconds - before.cpu_seconds) / (t1 - t0) * 100,
        "idle_rss_mb": after.rss_bytes / 2**20,
        "idle_pss_mb": after.pss_bytes / 2**20,
        "idle_processes": after.processes,
        "idle_machine_busy_percent": machine_busy,
        "latency_p50_ms": latency["p50_ms"],
        "latency_p95_ms": latency["p95_ms"],
        "latency_max_ms": latency["max_ms"],
    }


CEILING_DB = "bench_ceiling"
# figure: (script, jobs per transaction, pending rows to queue per second of run: ~3x need)
CEILING_SCRIPTS = {
    "ceiling_one": ("claim_one.sql", 1, 10_000),
    "ceiling_batch": ("claim_batch.sql", 50, 80_000),
}


def measure_ceiling(ctx: Context) -> dict[str, Any]:
    """Jobs/s that one pgbench client gets through the claim-and-complete scripts."""
    seconds = ctx.options.ceiling_seconds
    result: dict[str, Any] = {}
    db = Database("postgres", CEILING_DB)
    try:
        db.execute((BENCH_DIR / "pgbench" / "schema.sql").read_text())
        for figure, (script, per_transaction, rows_per_second) in CEILING_SCRIPTS.items():
            rows = rows_per_second * seconds
            db.execute("TRUNCATE ceiling_job RESTART IDENTITY")
            db.execute(
                "INSERT INTO ceiling_job (name, payload, status, run_at) "
                "SELECT 'noop', jsonb_build_object('n', g), 'pending', now() - interval '1 minute' "
                f"FROM generate_series(1, {int(rows)}) g"
            )
            db.execute("VACUUM ANALYZE ceiling_job")
            done = subprocess.run(
                ["pgbench", "-n", "-c", "1", "-j", "1", "-T", str(seconds),
                 "-f", str(BENCH_DIR / "pgbench" / script),
                 "-h", PG["host"], "-p", str(PG["port"]), "-U", PG["user"], CEILING_DB],
                capture_output=True, text=True, timeout=seconds + 60,
                env={**os.environ, "PGPASSWORD": PG["password"]},
            )  # fmt: skip
            match = re.search(r"tps = ([\d.]+)", done.stdout)
            if done.returncode or not match:
                raise RuntimeError(f"pgbench failed: {done.stderr.strip()[-300:]}")
            left = db.scalar("SELECT COUNT(*) FROM ceiling_job WHERE status = 'pending'")
            if left == 0:
                raise RuntimeError(f"{script}: the table ran out of pending rows; fill more")
            result[figure] = float(match.group(1)) * per_transaction
        db.execute("TRUNCATE ceiling_job")
    finally:
        db.close()
    return result


FLOW_ENV = {"BENCH_FLOW": "1"}
# Rows of the tenant over its limit that a worker claimed (must be none).
OVER_CLAIMED_SQL = (
    "SELECT COUNT(*) FROM django_cronqueue_job WHERE limit_key = 'big' AND attempts > 0"
)


def measure_flow(ctx: Context, system: System) -> dict[str, Any]:
    """The flow-control drain, then a plain drain of as many jobs, both counted."""
    n = ctx.options.flow_jobs
    filled: dict[str, Any] = {}

    def fill_flow() -> int:
        filled.update(ctx.driver(system, "fill-flow", str(n), env=FLOW_ENV))
        return int(filled["runnable"])

    flow = _counted_drain(ctx, system, "flow", fill_flow, FLOW_ENV)
    del flow["checked"]
    over_claimed = flow.pop("over_claimed")
    if over_claimed:
        raise RuntimeError(f"{over_claimed} job(s) over their limit were claimed")
    runnable = int(filled["runnable"])

    def fill_plain() -> int:
        ctx.driver(system, "fill", str(runnable))
        return runnable

    plain = _counted_drain(ctx, system, "plain", fill_plain, {})
    del plain["over_claimed"], plain["checked"]
    return {
        **{f"flow_{key}": value for key, value in flow.items()},
        **{f"plain_counted_{key}": value for key, value in plain.items()},
        "flow_over": filled["over"],
        "flow_tenants": filled["tenants"],
    }


def measure_group(ctx: Context, system: System) -> dict[str, Any]:
    """The workflow drain: a ``jobs.group`` of ``group_jobs`` no-op members with a
    ``then`` callback (the drain ends when the callback has run, once: it is one row),
    then a plain drain of as many jobs, both counted: the extra statements per member."""
    n = ctx.options.group_jobs

    def fill_group() -> int:
        ctx.driver(system, "fill-group", str(n))
        return n + 1  # the members and the callback

    group = _counted_drain(
        ctx, system, "group", fill_group, {}, to_the_end=True, check_sql=CALLBACK_RAN_SQL
    )
    del group["over_claimed"]
    if group.pop("checked") != 1:
        raise RuntimeError("the group's then callback did not run, once, after its batch")

    def fill_plain() -> int:
        ctx.driver(system, "fill", str(n + 1))
        return n + 1

    plain = _counted_drain(ctx, system, "plain", fill_plain, {})
    del plain["over_claimed"], plain["checked"]
    return {
        **{f"group_{key}": value for key, value in group.items()},
        **{f"group_plain_{key}": value for key, value in plain.items()},
        "group_extra_statements_per_member": (
            group["statements_per_job"] - plain["statements_per_job"]
        ),
        "group_extra_round_trips_per_member": (
            group["round_trips_per_job"] - plain["round_trips_per_job"]
        ),
    }


# The group drain's check: its then callback (the one no-op with n = -1) succeeded, and
# its batch finished with every member counted.
CALLBACK_RAN_SQL = (
    "SELECT COUNT(*) FROM django_cronqueue_job j JOIN django_cronqueue_batch b "
    "ON b.then_job_id = j.id WHERE j.status = 'succeeded' AND b.finished_at IS NOT NULL "
    "AND b.succeeded = b.size"
)


def _counted_drain(
    ctx: Context,
    system: System,
    tag: str,
    fill: Any,
    env: dict[str, str],
    *,
    to_the_end: bool = False,
    check_sql: str | None = None,
) -> dict[str, Any]:
    """Fill, drain with one default worker counting its statements, stop, and divide.
    ``to_the_end``: wait for every job, not only ``drain_seconds``; ``check_sql``: a
    count read before the tables are emptied (returned as ``checked``)."""
    default = next(d for d in system.drains if d.role == "default")
    counts_dir = ctx.workdir / "statements" / f"{system.key}-{tag}-{time.time_ns()}"
    db = Database(system.vendor, system.database)
    try:
        db.reset(system.tables)
        runnable = fill()
        db.analyze(system.tables)
        samples: list[tuple[float, int]] = []
        extra = {**env, "BENCH_COUNT_STATEMENTS": str(counts_dir)}
        with ctx.workers(system, default, f"counted-{tag}", extra) as workers:
            began = time.monotonic()
            while True:
                time.sleep(POLL)
                now, done = time.monotonic(), int(db.scalar(system.done_sql))
                if done > 0:
                    samples.append((now, done))
                if done >= runnable or (
                    not to_the_end and samples and now - samples[0][0] >= ctx.options.drain_seconds
                ):
                    break
                if not samples and now - began > STARTUP_TIMEOUT:
                    raise RuntimeError(f"no job finished within {STARTUP_TIMEOUT:.0f}s")
                workers.check_alive()
        counts = statements.read(counts_dir)
        if counts["processes"] != default.processes:
            raise RuntimeError(f"{counts['processes']} worker(s) wrote their counts")
        finished, span = db.row(system.window_sql or "")
        over_claimed = db.scalar(OVER_CLAIMED_SQL) if tag == "flow" else 0
        checked = int(db.scalar(check_sql)) if check_sql else None
        db.reset(system.tables)
    finally:
        db.close()
    transactions = counts["commits"] + counts["rollbacks"]
    round_trips = counts["statements"] + transactions
    if system.vendor == "postgres":
        round_trips += transactions  # psycopg's BEGIN before each transaction's first statement
    elif system.vendor == "mariadb":
        round_trips += counts["autocommit_changes"]  # SET autocommit around each transaction
    return {
        "rate": finished / float(span),
        "jobs": finished,
        "runnable": runnable,
        "statements_per_job": counts["statements"] / finished,
        "transactions_per_job": transactions / finished,
        "round_trips_per_job": round_trips / finished,
        "statements": counts["statements"],
        "over_claimed": over_claimed,
        "checked": checked,
    }
