"""What encrypting sensitive arguments costs, on PostgreSQL: the same no-op job with two
string arguments and an int, defined three ways (bench/sensitive_site/jobs.py): plain,
``sensitive=("card_token", "email")`` and ``sensitive=True``. Each round, for each variant
in turn (alternating the order, as the machine may be busy): N jobs enqueued by one
``enqueue_many`` call, N/10 by one ``enqueue`` call each (in one transaction), then
``runjobs --burst`` drains them all (default settings; the sensitive jobs are decrypted
before their handler and erased when they succeed). Prints each variant's medians and its
per-round ratio to plain.

    python bench/sensitive.py [--jobs 5000] [--rounds 5] [--db cq_sensitive_bench]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("plain", "two_sensitive", "all_sensitive")

ENQUEUE = """
import time
from django.db import transaction
from django_cronqueue import jobs
from django_cronqueue.models import Job
from bench.sensitive_site import jobs as site
Job.objects.all().delete()
job = getattr(site, {variant!r})
def payload(n):
    token, email = f"tok_{{n:08d}}_4242424242424242", f"buyer{{n}}@example.com"
    return {{"n": n, "card_token": token, "email": email}}
started = time.perf_counter()
jobs.enqueue_many(job, [payload(n) for n in range({count})])
many = time.perf_counter() - started
started = time.perf_counter()
with transaction.atomic():
    for n in range({count} // 10):
        job.enqueue(**payload(n))
single = time.perf_counter() - started
print({count} / many, ({count} // 10) / single)
"""
RATE = """
from django.db.models import Max, Min
from django_cronqueue.models import Job
done = Job.objects.filter(status="succeeded")
span = done.aggregate(a=Min("started_at"), b=Max("finished_at"))
count = done.count()
print(count, count / (span["b"] - span["a"]).total_seconds())
"""


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def one_round(env: dict[str, str], variant: str, count: int) -> tuple[float, float, float]:
    """(enqueue_many jobs/s, enqueue jobs/s, drain jobs/s) of one variant."""
    many, single = map(
        float, manage(env, "shell", "-c", ENQUEUE.format(variant=variant, count=count)).split()[-2:]
    )
    manage(env, "runjobs", "--burst", "-v", "0")
    done, rate = manage(env, "shell", "-c", RATE).split()[-2:]
    expected = count + count // 10
    assert int(done) == expected, f"{variant}: {done} of {expected} jobs succeeded"
    return many, single, float(rate)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", default="cq_sensitive_bench")
    args = parser.parse_args()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.sensitive_site.settings",
        "PYTHONPATH": str(ROOT),
        "FIRSTHOUR_DB": "unused",
        "FIRSTHOUR_PG": args.db,
    }
    subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", args.db], check=False)
    manage(env, "migrate", "-v", "0")
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    for round_ in range(args.rounds):
        order = list(VARIANTS) if round_ % 2 == 0 else list(reversed(VARIANTS))
        for variant in order:
            figures[variant].append(one_round(env, variant, args.jobs))
            many, single, drain = figures[variant][-1]
            print(
                f"round {round_ + 1} {variant}: enqueue_many {many:.0f}/s, "
                f"enqueue {single:.0f}/s, drain {drain:.0f} jobs/s",
                flush=True,
            )
    print(f"\nmedians of {args.rounds} rounds, {args.jobs} jobs (ratio to plain, per-round median)")
    for variant in VARIANTS:
        cells = []
        for index, label in enumerate(("enqueue_many", "enqueue", "drain")):
            values = [round_[index] for round_ in figures[variant]]
            ratios = [
                mine[index] / plain[index]
                for mine, plain in zip(figures[variant], figures["plain"], strict=True)
            ]
            cells.append(
                f"{label} {statistics.median(values):,.0f}/s ({statistics.median(ratios):.2f})"
            )
        print(f"{variant:>14}: " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
