"""How long do the counts take beside a long history? Fills PostgreSQL with ROWS finished
jobs (one INSERT ... SELECT generate_series, spread over DAYS days, in a database of its
own) next to a small live backlog (1,000 pending rows, 20 running), then times the
Prometheus ``MetricsView``, the admin dashboard and ``cronqueue_status`` (median of
REPEAT each; with the time its queries took, of one more read) and checks that their
figures agree with an exact ``GROUP BY`` of the table.

    .venv/bin/python bench/counts.py                    # 1,000,000 finished rows
    .venv/bin/python bench/counts.py --rows 20000000 --drop
    .venv/bin/python bench/counts.py --refill           # rebuild the table first

Where the package keeps counts of finished rows (``django_cronqueue.history.counting``), they are
emptied and one housekeeping pass counts the history first, as after the upgrade (timed:
the first pass reads every finished row once; the next ones read only the rows finished
since). Run from an older checkout
(copy this file into its ``bench/``) the same command times that version's queries.

The database (``cronqueue_counts_bench`` unless --database says otherwise) is created if
missing and reused while it holds the requested rows; ``--drop`` drops it at the end.
The server is the one the test suite uses (PGHOST, PGPORT, PGUSER, PGPASSWORD).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

NAMES = 20
QUEUES = ("default", "emails", "reports", "billing")
PENDING = 1_000
RUNNING = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="finished rows")
    parser.add_argument("--days", type=int, default=30, help="the history spans this many days")
    parser.add_argument("--database", default="cronqueue_counts_bench")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads of each")
    parser.add_argument("--refill", action="store_true", help="empty and refill the table")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    return parser.parse_args()


def server() -> dict[str, str]:
    return {
        "host": os.environ.get("PGHOST", "127.0.0.1"),
        "port": os.environ.get("PGPORT", "5432"),
        "user": os.environ.get("PGUSER", "postgres"),
        "password": os.environ.get("PGPASSWORD", ""),
    }


def setup_django(database: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["CRONQUEUE_TEST_DB"] = "postgres"
    os.environ["CRONQUEUE_TEST_DB_EXACT_NAME"] = database
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **server()) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
            print(f"created database {database}")

    import django

    django.setup()
    from django.core.management import call_command

    import django_cronqueue

    print(f"django_cronqueue from {Path(django_cronqueue.__file__).parent}")
    call_command("migrate", verbosity=0, interactive=False)


def drop(database: str) -> None:
    from django.db import connections

    connections.close_all()
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **server()) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(f"dropped database {database}")


FILL_SQL = """
INSERT INTO django_cronqueue_job (
    name, payload, status, queue, priority, attempts, max_attempts, run_at, worker_id,
    last_error, traceback, created_at, started_at, finished_at
)
SELECT
    'bench.job_' || (i % {names}),
    '{{}}'::jsonb,
    s.status,
    (ARRAY[{queues}])[1 + i % {queue_count}],
    0, 1, 4, t, 'bench-worker:' || (i % 8),
    CASE WHEN s.status = 'failed' THEN 'RuntimeError: upstream failure ' || i ELSE '' END,
    '',
    t, t + interval '1 second', t + interval '3 seconds'
FROM generate_series(1, {rows}) AS i,
     LATERAL (SELECT now() - interval '10 minutes'
                     - ({rows} - i) * (interval '{days} days' / {rows}) AS t) AS times,
     LATERAL (SELECT CASE WHEN i % 100 < 90 THEN 'succeeded'
                          WHEN i % 100 < 98 THEN 'failed'
                          ELSE 'cancelled' END AS status) AS s
"""

LIVE_SQL = """
INSERT INTO django_cronqueue_job (
    name, payload, status, queue, priority, attempts, max_attempts, run_at, locked_until,
    lock_token, worker_id, last_error, traceback, created_at, started_at
)
SELECT
    'bench.job_' || (i % {names}), '{{}}'::jsonb,
    CASE WHEN i <= {running} THEN 'running' ELSE 'pending' END,
    (ARRAY[{queues}])[1 + i % {queue_count}],
    0, CASE WHEN i <= {running} THEN 1 ELSE 0 END, 4,
    now() + CASE WHEN i % 2 = 0 THEN interval '1 hour' ELSE interval '0' END,
    CASE WHEN i <= {running} THEN now() + interval '1 hour' END,
    CASE WHEN i <= {running} THEN md5(i::text) END,
    CASE WHEN i <= {running} THEN 'bench-worker:' || (i % 4) ELSE '' END,
    '', '', now(), CASE WHEN i <= {running} THEN now() END
FROM generate_series(1, {live}) AS i
"""


def fill(rows: int, days: int, refill: bool) -> None:
    from django.db import connection

    from django_cronqueue.models import Worker

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_cronqueue_job")
        present = cursor.fetchone()[0]
    if present == rows + PENDING + RUNNING and not refill:
        print(f"reusing {present:,} rows")
        return
    values = {
        "names": NAMES,
        "queues": ", ".join(f"'{q}'" for q in QUEUES),
        "queue_count": len(QUEUES),
        "rows": rows,
        "days": days,
        "running": RUNNING,
        "live": PENDING + RUNNING,
    }
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_cronqueue_job RESTART IDENTITY CASCADE")
        cursor.execute(FILL_SQL.format(**values))
        cursor.execute(LIVE_SQL.format(**values))
    took = time.perf_counter() - start
    print(f"inserted {rows:,} finished rows over {days} days in {took:.1f} s")
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_cronqueue_job")
    print(f"VACUUM ANALYZE in {time.perf_counter() - start:.1f} s")
    from django.utils import timezone

    Worker.objects.all().delete()
    for n in range(4):
        Worker.objects.create(
            id=f"bench-worker:{n}", hostname=f"web-{n}", pid=1000 + n, last_seen=timezone.now()
        )


def count_history() -> None:
    """One housekeeping pass of the counts (when this version keeps them), timed; the
    first one after a fill reads the whole history, the next only what finished since."""
    import django_cronqueue

    if not (Path(django_cronqueue.__file__).parent / "counting.py").exists():
        print("this version keeps no counts of finished rows: every read counts the table")
        return
    from django.utils import timezone

    from django_cronqueue.history import counting
    from django_cronqueue.models import FinishedCount, FinishedCountMark

    FinishedCount.objects.all().delete()  # count from scratch, as after the upgrade
    FinishedCountMark.objects.all().delete()
    for label in ("first housekeeping pass", "next housekeeping pass"):
        start = time.perf_counter()
        counting.count_finished(timezone.now())
        print(f"{label}: {(time.perf_counter() - start) * 1000:,.0f} ms")


def timed(read: Callable[[], Any], repeat: int) -> tuple[float, float, int, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    read()  # warm up (and check it works)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        read()
        times.append((time.perf_counter() - start) * 1000)
    with CaptureQueriesContext(connection) as captured:
        read()
    sql = sum(float(query["time"]) for query in captured.captured_queries) * 1000
    return statistics.median(times), max(times), len(captured), sql


def exact_counts() -> dict[tuple[str, str, str], int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, name, queue, count(*) FROM django_cronqueue_job "
            "GROUP BY status, name, queue"
        )
        return {(status, name, queue): n for status, name, queue, n in cursor.fetchall()}


def check_figures(client: Any) -> None:
    """The figures of the three readers against an exact count of the table."""
    import json

    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client keeps each response's template context

    exact = exact_counts()
    per_status: dict[str, int] = {}
    for (status, _, _), n in exact.items():
        per_status[status] = per_status.get(status, 0) + n
    metrics: dict[str, float] = {}
    for line in client.get("/metrics/").content.decode().splitlines():
        if line.startswith("cronqueue_jobs{"):
            status = line.split('status="')[1].split('"')[0]
            metrics[status] = metrics.get(status, 0) + float(line.rsplit(" ", 1)[1])
    out = io.StringIO()
    call_command("cronqueue_status", "--json", stdout=out)
    status_counts = json.loads(out.getvalue())["counts"]
    response = client.get("/admin/django_cronqueue/job/dashboard/")
    shown = {item["status"]: item["count"] for item in response.context["status_counts"]}
    for status, n in sorted(per_status.items()):
        print(
            f"  {status:10} exact {n:>11,}  metrics {int(metrics.get(status, 0)):>11,}  "
            f"cronqueue_status {status_counts.get(status, 0):>11,}  dashboard {shown[status]:>11}"
        )


def main() -> None:
    args = parse_args()
    setup_django(args.database)
    fill(args.rows, args.days, args.refill)
    count_history()

    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)

    def status() -> None:
        call_command("cronqueue_status", stdout=io.StringIO())

    reads: list[tuple[str, Callable[[], Any]]] = [
        ("MetricsView", lambda: client.get("/metrics/")),
        ("dashboard", lambda: client.get("/admin/django_cronqueue/job/dashboard/")),
        ("cronqueue_status", status),
    ]
    print(f"\n{args.rows:,} finished rows; median and max of {args.repeat}")
    print(f"{'read':20} {'median ms':>10} {'max ms':>8} {'queries':>8} {'of it SQL ms':>13}")
    for label, read in reads:
        median, worst, queries, sql = timed(read, args.repeat)
        print(f"{label:20} {median:10.1f} {worst:8.1f} {queries:8d} {sql:13.1f}")
    print("\nrows per status:")
    check_figures(client)
    if args.drop:
        drop(args.database)


if __name__ == "__main__":
    main()
