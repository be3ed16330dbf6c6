"""The cost of runjobs's console lines on the drain: one runjobs --burst process (default
settings: one slot) drains N no-op jobs on PostgreSQL, without LOGGING, printing
a line per success (-v 1, the default), nothing but errors (-v 0), or every line as a full
log record (-v 3: the thread name, no fast path). Rounds alternate the variants (the
machine may be busy); jobs/s is N over the first start to the last finish, and CPU is the
runjobs process's user + system time per job (less that of a start with nothing to do):
on a busy machine the CPU figure is the one to compare.

    python bench/console_cost.py [--jobs 5000] [--rounds 5] [--db cq_console_bench]
                                 [--concurrency 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"v0 (no lines)": "0", "v1 (a line per job)": "1", "v3 (log records)": "3"}

ENQUEUE = """
from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.firsthour.shop import jobs as shop
Job.objects.all().delete()
jobs.enqueue_many(shop.noop, [{{"n": i}} for i in range({count})])
"""
RATE = """
from django.db.models import Max, Min
from django_cronqueue.models import Job
span = Job.objects.filter(status="succeeded").aggregate(a=Min("started_at"), b=Max("finished_at"))
count = Job.objects.filter(status="succeeded").count()
print(count, count / (span["b"] - span["a"]).total_seconds())
"""


def manage(env: dict[str, str], *args: str, stderr: int | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.PIPE,
        text=True,
        check=True,
    )
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", default="cq_console_bench")
    parser.add_argument("--concurrency", default="1", help="runjobs --concurrency; 1")
    args = parser.parse_args()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.firsthour.settings",
        "PYTHONPATH": str(ROOT),
        "FIRSTHOUR_DB": "unused",
        "FIRSTHOUR_PG": args.db,
    }
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", args.db], check=False)
    manage(env, "migrate", "-v", "0")
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    # The CPU of a runjobs start with nothing to do, taken off each run's.
    manage(env, "shell", "-c", ENQUEUE.format(count=0))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    manage(env, "runjobs", "--burst", "-v", "0")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    startup = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"start-up: {startup * 1000:.0f} ms CPU")
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = list(VARIANTS.items())
            if round_ % 2:
                order.reverse()
            for name, verbosity in order:
                manage(env, "shell", "-c", ENQUEUE.format(count=args.jobs))
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                with open(Path(tmp) / "stderr.log", "w") as log:
                    manage(
                        env,
                        "runjobs",
                        "--burst",
                        "--concurrency",
                        args.concurrency,
                        "-v",
                        verbosity,
                        stderr=log.fileno(),
                    )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                cpu[name].append(max(used - startup, 0.0) / args.jobs * 1e6)
                lines = (Path(tmp) / "stderr.log").read_text().count("succeeded in")
                count, rate = manage(env, "shell", "-c", RATE).split()[-2:]
                assert int(count) == args.jobs, count
                rates[name].append(float(rate))
                print(
                    f"round {round_ + 1} {name}: {float(rate):.0f} jobs/s, "
                    f"{cpu[name][-1]:.0f} us CPU/job, {lines} lines"
                )
    base = rates["v0 (no lines)"]
    base_cpu = cpu["v0 (no lines)"]
    for name in VARIANTS:
        ratios = [v / b for v, b in zip(rates[name], base, strict=True)]
        cpu_ratios = [v / b for v, b in zip(cpu[name], base_cpu, strict=True)]
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        cpu_listed = ", ".join(f"{r:.2f}" for r in cpu_ratios)
        print(
            f"{name}: median {statistics.median(rates[name]):.0f} jobs/s, per-round ratio to "
            f"v0 {statistics.median(ratios):.3f} ({listed}); "
            f"median {statistics.median(cpu[name]):.0f} us CPU/job, ratio to v0 "
            f"{statistics.median(cpu_ratios):.3f} ({cpu_listed})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
