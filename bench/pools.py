#!/usr/bin/env python3
"""Worker pools on PostgreSQL: the thread pool against the process pool, in one run.

- **drain**: jobs/s of ``runjobs --burst --concurrency 2`` draining ``--jobs`` no-op jobs,
  ``--pool threads`` then ``--pool processes``. Target: processes >= half of threads.
- **cpu**: the same with ``--cpu-jobs`` jobs of about 50 ms of pure-Python work each.
  Target: processes >= 1.7x threads (on 2 free cores).
- **kill**: ``--kills`` jobs stuck in a C-level sleep with ``timeout=1``, one process-pool
  worker: for each, the time from its hard limit (started_at + 1 s) to its row's
  ``finished_at`` (failed, TimeLimitExceeded). Target: p95 < 1 s.
- **asyncio**: ``--async-jobs`` (1,000) jobs each awaiting ``asyncio.sleep(1)``, one
  ``runjobs --pool asyncio --concurrency 1000 --burst``: first start to last finish, and the
  process's peak resident set. Target: under 3 s, under 150 MB.
- **memory**: the resident set of an idle ``--pool processes --concurrency 2`` worker and of
  each of its children (and of an idle thread-pool worker).

Run it from the repository root with the project's virtualenv; it (re)creates the
database ``bench_pools``:

    .venv/bin/python bench/pools.py
    .venv/bin/python bench/pools.py --jobs 5000 --cpu-jobs 100 --kills 10

It prints the figures and the targets and writes them to bench/results/pools-<time>.json.
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

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DATABASE = "bench_pools"
TABLE = "django_cronqueue_job"
ENV = {
    "DJANGO_SETTINGS_MODULE": "projects.cronqueue.settings",
    "BENCH_DB": "postgres",
    "BENCH_DB_NAME": DATABASE,
    "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)]),
}


def sql(statement: str, params: tuple = ()) -> list[tuple]:
    import psycopg
    from benchlib.db import PG

    with psycopg.connect(dbname=DATABASE, autocommit=True, **PG) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def runjobs(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "django", "runjobs", *args],
        cwd=ROOT,
        env={**os.environ},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def drain(name: str, count: int, pool: str) -> float:
    """Jobs/s of one ``runjobs --burst --concurrency 2 --pool <pool>``."""
    from django_cronqueue import jobs

    sql(f"DELETE FROM {TABLE}")
    jobs.enqueue_many(name, [{"n": i} for i in range(count)])
    sql(f"VACUUM ANALYZE {TABLE}")
    worker = runjobs("--burst", "--concurrency", "2", "--pool", pool)
    if worker.wait(1800) != 0:
        raise SystemExit(f"runjobs --pool {pool} failed")
    [(done, first, last)] = sql(
        f"SELECT COUNT(*), MIN(started_at), MAX(finished_at) FROM {TABLE} "
        "WHERE status = 'succeeded'"
    )
    if done != count:
        raise SystemExit(f"the {pool} drain finished {done} of {count} jobs")
    return count / (last - first).total_seconds()


def kill_latencies(count: int) -> list[float]:
    from django_cronqueue import jobs

    sql(f"DELETE FROM {TABLE}")
    jobs.enqueue_many("benchjobs.stuck", [{"n": i} for i in range(count)])
    worker = runjobs("--pool", "processes", "--concurrency", "2", "--poll-interval", "0.2")
    try:
        deadline = time.monotonic() + 60 + count * 3
        while time.monotonic() < deadline:
            [(left,)] = sql(f"SELECT COUNT(*) FROM {TABLE} WHERE status <> 'failed'")
            if not left:
                break
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(60)
    rows = sql(f"SELECT started_at, finished_at, last_error FROM {TABLE}")
    if len(rows) != count or not all(r[2].startswith("TimeLimitExceeded") for r in rows):
        raise SystemExit("the stuck jobs did not all fail with TimeLimitExceeded")
    return sorted((end - start).total_seconds() - 1.0 for start, end, _ in rows)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def descendants(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found + [grand for child in found for grand in descendants(child)]


def idle_memory(pool: str) -> dict[str, Any]:
    sql(f"DELETE FROM {TABLE}")
    worker = runjobs("--pool", pool, "--concurrency", "2")
    try:
        time.sleep(8)  # started, children forked, idle
        others = descendants(worker.pid)
        return {"parent_mb": rss_mb(worker.pid), "children_mb": [rss_mb(p) for p in others]}
    finally:
        worker.terminate()
        worker.wait(60)


def asyncio_drain(count: int) -> dict[str, float]:
    from django_cronqueue import jobs

    sql(f"DELETE FROM {TABLE}")
    jobs.enqueue_many("benchjobs.sleeps", [{"n": i} for i in range(count)])
    sql(f"VACUUM ANALYZE {TABLE}")
    worker = runjobs("--pool", "asyncio", "--concurrency", str(count), "--burst")
    peak = 0.0
    while worker.poll() is None:
        try:
            for line in Path(f"/proc/{worker.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            pass
        time.sleep(0.05)
    [(done, first, last)] = sql(
        f"SELECT COUNT(*), MIN(started_at), MAX(finished_at) FROM {TABLE} "
        "WHERE status = 'succeeded'"
    )
    if done != count:
        raise SystemExit(f"the asyncio drain finished {done} of {count} jobs")
    return {"seconds": (last - first).total_seconds(), "peak_rss_mb": peak}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--cpu-jobs", type=int, default=100)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--async-jobs", type=int, default=1_000)
    options = parser.parse_args()
    os.environ.update(ENV)
    sys.path[:0] = [str(BENCH), str(ROOT)]
    from benchlib import db

    db.recreate("postgres", DATABASE)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results: dict[str, Any] = {"started": dt.datetime.now(dt.timezone.utc).isoformat()}
    results["loadavg"] = os.getloadavg()
    for pool in ("threads", "processes"):
        results[f"drain_{pool}"] = drain("benchjobs.noop", options.jobs, pool)
        results[f"cpu_{pool}"] = drain("benchjobs.cpu", options.cpu_jobs, pool)
        results[f"idle_{pool}"] = idle_memory(pool)
    results["asyncio"] = asyncio_drain(options.async_jobs)
    latencies = kill_latencies(options.kills)
    results["kill_latencies"] = latencies
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    drain_ratio = results["drain_processes"] / results["drain_threads"]
    cpu_ratio = results["cpu_processes"] / results["cpu_threads"]
    print(f"load average at start: {results['loadavg']}")
    print(
        f"no-op drain, --concurrency 2: threads {results['drain_threads']:.0f} jobs/s, "
        f"processes {results['drain_processes']:.0f} jobs/s ({drain_ratio:.2f}x; target >= 0.5)"
    )
    print(
        f"50 ms CPU jobs, --concurrency 2: threads {results['cpu_threads']:.1f} jobs/s, "
        f"processes {results['cpu_processes']:.1f} jobs/s ({cpu_ratio:.2f}x; target >= 1.7)"
    )
    print(
        f"hard limit -> failure recorded: median {statistics.median(latencies):.2f}s, "
        f"p95 {p95:.2f}s (target < 1s)"
    )
    print(
        f"asyncio pool, {options.async_jobs} x asyncio.sleep(1): "
        f"{results['asyncio']['seconds']:.2f}s, peak {results['asyncio']['peak_rss_mb']:.0f} MB "
        "(target < 3 s, < 150 MB)"
    )
    for pool in ("threads", "processes"):
        idle = results[f"idle_{pool}"]
        print(
            f"idle {pool} worker: parent {idle['parent_mb']:.0f} MB, "
            f"others {[round(mb) for mb in idle['children_mb']]} MB"
        )
    out = BENCH / "results" / f"pools-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"written to {out.relative_to(ROOT)}")
    return 0 if drain_ratio >= 0.5 and cpu_ratio >= 1.7 and p95 < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
