"""Fair shares beside a backlog: what turns cost a claim, and what they save the small keys.

PostgreSQL (a database of its own) holds two copies of one workload: ``--keys`` tenants,
one of them with a backlog of ``--backlog`` due jobs, the others with ``--per-key`` due
jobs each, enqueued after the backlog. One copy is in a queue whose job has
``fair_by="tenant"``, the other in a plain queue (no fair key). Then, in this process:

- **claims**: ``--claims`` claims of ``--batch`` jobs each from each queue, alternating,
  timed one by one: claims per second and p50/p99 per claim, with and without turns;
- **small keys** (on a fresh fill): the fair queue is claimed on until every small key's
  jobs have started,
  counting the claims, the seconds and the backlog's jobs claimed before them. In the
  plain queue they wait behind the whole backlog (claim order: run_at, then id): the
  backlog's rows ahead of the first small job are counted, and the time is that many jobs
  at the plain claims' rate.

    .venv/bin/python bench/fairness.py                  # 10,000 keys, 1,000,000 backlog
    .venv/bin/python bench/fairness.py --keys 1000 --backlog 100000 --claims 500

The database (``cronqueue_fairness_bench``) is refilled on each run; ``--drop`` drops it
at the end. The server is the one the test suite uses (PGHOST, PGPORT, PGUSER,
PGPASSWORD). Figures go to stdout and ``bench/results/fairness-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from counts import ROOT, drop, server

FAIR, PLAIN = "bench.fair", "bench.plain"
FAIR_QUEUE, PLAIN_QUEUE = "fair", "plain"
BIG = "big"
# The claims leave dead index entries at the head of the claim order, which a worker's own
# vacuum (and autovacuum) removes as they pile up; the timed claims get one every so often.
VACUUM_EVERY = 200


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=10_000, help="tenants, the big one included")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="the big tenant's jobs")
    parser.add_argument("--per-key", type=int, default=3, help="each small tenant's jobs")
    parser.add_argument("--claims", type=int, default=1_000, help="timed claims per queue")
    parser.add_argument("--batch", type=int, default=10, help="jobs per claim (PREFETCH)")
    parser.add_argument("--database", default="cronqueue_fairness_bench")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    return parser.parse_args()


def setup_django(database: str) -> None:
    """The bench project's settings (its jobs, CRONQUEUE at its defaults) on ``database``."""
    import os

    import psycopg

    os.environ["DJANGO_SETTINGS_MODULE"] = "projects.cronqueue.settings"
    os.environ["BENCH_DB"] = "postgres"
    os.environ["BENCH_DB_NAME"] = database
    sys.path.insert(0, str(ROOT))
    with psycopg.connect(dbname="postgres", autocommit=True, **server()) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def define_jobs() -> None:
    from django_cronqueue import jobs

    def handler(tenant: str) -> None: ...

    jobs.job(name=FAIR, queue=FAIR_QUEUE, fair_by="tenant")(handler)
    jobs.job(name=PLAIN, queue=PLAIN_QUEUE)(handler)


FILL_SQL = """
INSERT INTO django_cronqueue_job (
    name, payload, status, queue, priority, attempts, max_attempts, run_at, worker_id,
    last_error, traceback, limit_key, fair_key, created_at
)
SELECT %(name)s, jsonb_build_object('tenant', k), 'pending', %(queue)s, 0, 0, 4, t, '', '',
       '', '', CASE WHEN %(keyed)s THEN k ELSE '' END, now()
FROM (
    SELECT '{big}' AS k, %(start)s::timestamptz + i * interval '1 microsecond' AS t
    FROM generate_series(1, %(backlog)s) AS i
    UNION ALL
    SELECT 'tenant-' || key, %(start)s::timestamptz + interval '1 hour'
           + (key * %(per_key)s + n) * interval '1 microsecond'
    FROM generate_series(1, %(small)s) AS key, generate_series(1, %(per_key)s) AS n
) AS rows(k, t)
""".replace("{big}", BIG)


def fill(args: argparse.Namespace) -> None:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_cronqueue_job, django_cronqueue_fairshare CASCADE")
        # The same instants in both queues: their rows alternate in the claim index's order,
        # as two queues' backlogs side by side do.
        start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
        for name, queue, keyed in ((FAIR, FAIR_QUEUE, True), (PLAIN, PLAIN_QUEUE, False)):
            cursor.execute(
                FILL_SQL,
                {
                    "start": start,
                    "name": name,
                    "queue": queue,
                    "keyed": keyed,
                    "backlog": args.backlog,
                    "small": args.keys - 1,
                    "per_key": args.per_key,
                },
            )
        # What the enqueues' note_enqueued leaves: a key row per tenant.
        cursor.execute(
            "INSERT INTO django_cronqueue_fairshare (queue, fair_key, weight, turn_at, used, "
            "enqueued, idle_checks) SELECT DISTINCT queue, fair_key, 1, "
            "'2000-01-01'::timestamptz, 0, 1, 0 "
            "FROM django_cronqueue_job WHERE queue = %s",
            [FAIR_QUEUE],
        )
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_cronqueue_job")
        cursor.execute("VACUUM ANALYZE django_cronqueue_fairshare")
    rows = 2 * (args.backlog + (args.keys - 1) * args.per_key)
    print(f"filled {rows:,} pending rows in {time.perf_counter() - started:.0f} s", flush=True)


def claim(queue: str, now: dt.datetime, batch: int) -> tuple[float, list[Any]]:
    from django_cronqueue.claiming import claim_due

    fair_queues = (FAIR_QUEUE,) if queue == FAIR_QUEUE else ()
    started = time.perf_counter()
    claimed = claim_due(
        now, queues=[queue], limit=batch, worker_id="bench", fair_queues=fair_queues
    )
    return time.perf_counter() - started, claimed


def time_claims(args: argparse.Namespace, now: dt.datetime) -> dict[str, dict[str, float]]:
    from django.db import connection

    durations: dict[str, list[float]] = {PLAIN_QUEUE: [], FAIR_QUEUE: []}
    for index in range(args.claims):
        if index and index % VACUUM_EVERY == 0:  # as a worker's vacuum would, untimed
            with connection.cursor() as cursor:
                cursor.execute("VACUUM django_cronqueue_job")
        order = (PLAIN_QUEUE, FAIR_QUEUE) if index % 2 else (FAIR_QUEUE, PLAIN_QUEUE)
        for queue in order:
            seconds, claimed = claim(queue, now, args.batch)
            if len(claimed) != args.batch:
                raise RuntimeError(f"{queue}: a claim of {args.batch} got {len(claimed)}")
            durations[queue].append(seconds)
    figures = {}
    for queue, values in durations.items():
        values.sort()
        figures[queue] = {
            "claims_per_second": len(values) / sum(values),
            "p50_ms": 1000 * statistics.median(values),
            "p99_ms": 1000 * values[int(0.99 * (len(values) - 1))],
        }
    return figures


def small_keys_started(args: argparse.Namespace, now: dt.datetime) -> dict[str, float]:
    """Claim the fair queue on until every small key's job has been claimed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM django_cronqueue_job WHERE queue = %s AND payload->>'tenant' <> %s",
            [FAIR_QUEUE, BIG],
        )
        waiting = {row[0] for row in cursor.fetchall()}
    claims = big = 0
    started = time.perf_counter()
    while waiting:
        _, claimed = claim(FAIR_QUEUE, now, args.batch)
        claims += 1
        waiting -= {job.id for job in claimed}
        big += sum(1 for job in claimed if job.payload["tenant"] == BIG)
    return {"claims": claims, "seconds": time.perf_counter() - started, "backlog_jobs_first": big}


def backlog_ahead_in_plain_queue() -> int:
    """The backlog's pending rows claim order puts before the first small key's job."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM django_cronqueue_job b WHERE b.queue = %s "
            "AND b.status = 'pending' AND b.payload->>'tenant' = %s AND b.run_at < "
            "(SELECT MIN(run_at) FROM django_cronqueue_job s WHERE s.queue = %s "
            "AND s.payload->>'tenant' <> %s)",
            [PLAIN_QUEUE, BIG, PLAIN_QUEUE, BIG],
        )
        return int(cursor.fetchone()[0])


def main() -> int:
    args = parse_args()
    setup_django(args.database)
    define_jobs()
    fill(args)
    from django.utils import timezone

    now = timezone.now()
    claims = time_claims(args, now)
    fill(args)  # the small keys from the start again
    small = small_keys_started(args, timezone.now())
    ahead = backlog_ahead_in_plain_queue()
    plain_jobs_per_second = claims[PLAIN_QUEUE]["claims_per_second"] * args.batch
    result = {
        "keys": args.keys,
        "backlog": args.backlog,
        "per_key": args.per_key,
        "batch": args.batch,
        "claims": claims,
        "fair_over_plain_p50": claims[FAIR_QUEUE]["p50_ms"] / claims[PLAIN_QUEUE]["p50_ms"],
        "small_keys_with_turns": small,
        "small_keys_without_turns": {
            "backlog_jobs_first": ahead,
            "seconds_estimated": ahead / plain_jobs_per_second,
        },
    }
    print(report(result))
    out = ROOT / "bench" / "results" / f"fairness-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"figures: {out}")
    if args.drop:
        drop(args.database)
    return 0


def report(result: dict[str, Any]) -> str:
    claims = result["claims"]
    lines = [
        f"{result['keys']:,} keys, a backlog of {result['backlog']:,} due jobs on one, "
        f"{result['per_key']} on each other; claims of {result['batch']}",
        "",
        f"{'claims':<24} {'claims/s':>10} {'p50 ms':>8} {'p99 ms':>8}",
    ]
    for label, queue in (("without fair_by", PLAIN_QUEUE), ("with fair_by", FAIR_QUEUE)):
        figures = claims[queue]
        lines.append(
            f"{label:<24} {figures['claims_per_second']:>10,.0f} {figures['p50_ms']:>8.2f} "
            f"{figures['p99_ms']:>8.2f}"
        )
    lines.append(f"p50 with over without: {result['fair_over_plain_p50']:.2f}x")
    small, plain = result["small_keys_with_turns"], result["small_keys_without_turns"]
    lines += [
        "",
        "every small key's jobs started:",
        f"  with fair_by: after {small['claims']:,} claims, {small['seconds']:.1f} s, "
        f"{small['backlog_jobs_first']:,} backlog jobs claimed first",
        f"  without: behind {plain['backlog_jobs_first']:,} backlog jobs, about "
        f"{plain['seconds_estimated']:.0f} s at the plain claims' rate",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
