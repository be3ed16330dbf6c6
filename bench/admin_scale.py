"""How fast is the job admin on a big table? Fills PostgreSQL with ROWS jobs (one
INSERT ... SELECT generate_series, in a database of its own) and DYNAMIC dynamic cron
schedules (one made by create_dynamic, copied by SQL, one in ten paused), and times the
job list, each filter, a few searches, the schedule list with its pages and filters and
the dashboard and the Prometheus ``MetricsView`` through Django's test client, printing
milliseconds and query counts.

    .venv/bin/python bench/admin_scale.py                # 1,000,000 rows, 100,000 schedules
    .venv/bin/python bench/admin_scale.py --rows 200000 --repeat 7
    .venv/bin/python bench/admin_scale.py --refill       # rebuild the table first
    .venv/bin/python bench/admin_scale.py --only metrics # just the MetricsView

The database (``cronqueue_admin_bench`` unless --database says otherwise) is created
if missing and reused across runs while it holds the requested number of rows. The
server is the one the test suite uses (PGHOST, PGPORT, PGUSER, PGPASSWORD).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NAMES = 20
SCHEDULES = "/admin/django_cronqueue/cronschedule/"
QUEUES = ("default", "emails", "reports", "billing")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database", default="cronqueue_admin_bench")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests per page")
    parser.add_argument("--refill", action="store_true", help="empty and refill the table")
    parser.add_argument("--dynamic", type=int, default=100_000, help="dynamic schedules")
    parser.add_argument("--only", default="", help="time only the pages whose label has this")
    return parser.parse_args()


def setup_django(database: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["CRONQUEUE_TEST_DB"] = "postgres"
    os.environ["CRONQUEUE_TEST_DB_EXACT_NAME"] = database
    import psycopg

    params = {
        "host": os.environ.get("PGHOST", "127.0.0.1"),
        "port": os.environ.get("PGPORT", "5432"),
        "user": os.environ.get("PGUSER", "postgres"),
        "password": os.environ.get("PGPASSWORD", ""),
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
            print(f"created database {database}")

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


FILL_SQL = """
INSERT INTO django_cronqueue_job (
    name, payload, status, queue, priority, attempts, max_attempts, run_at, scheduled_for,
    dedupe_key, active_dedupe_key, locked_until, lock_token, worker_id, last_error, traceback,
    result, created_at, started_at, finished_at
)
SELECT
    CASE WHEN i % 1000 = 999 THEN 'shop.removed_job' ELSE 'bench.job_' || (i % %(names)s) END,
    jsonb_build_object('user_id', i, 'day', to_char(t, 'YYYY-MM-DD')),
    s.status,
    (ARRAY[%(queues)s])[1 + i % %(queue_count)s],
    0,
    CASE s.status WHEN 'pending' THEN 0 WHEN 'failed' THEN 4 ELSE 1 END,
    4,
    CASE s.status WHEN 'pending' THEN t + interval '1 hour' ELSE t END,
    CASE WHEN i % 20 = 0 THEN date_trunc('minute', t) + (i % 60) * interval '1 second' END,
    CASE WHEN i % 10 = 0 THEN 'key-' || i END,
    CASE WHEN i % 10 = 0 AND s.status IN ('pending', 'running') THEN 'key-' || i END,
    CASE WHEN s.status = 'running' THEN now() + interval '30 seconds' END,
    CASE WHEN s.status = 'running' THEN md5(i::text) END,
    CASE WHEN s.status IN ('running', 'succeeded', 'failed')
         THEN 'bench-worker:' || (i % 8) ELSE '' END,
    CASE WHEN s.status = 'failed' THEN 'RuntimeError: upstream failure ' || i ELSE '' END,
    CASE WHEN s.status = 'failed'
         THEN 'Traceback (most recent call last):'
              || repeat(E'\\n  File "app/tasks.py", line 42, in run', 12)
              || E'\\nRuntimeError: upstream failure ' || i
         ELSE '' END,
    NULL,
    t,
    CASE WHEN s.status IN ('running', 'succeeded', 'failed') THEN t + interval '1 second' END,
    CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled') THEN t + interval '3 seconds' END
FROM generate_series(1, %(rows)s) AS i,
     LATERAL (SELECT now() - (%(rows)s - i) * (interval '30 days' / %(rows)s) AS t) AS times,
     LATERAL (SELECT CASE
         WHEN i %% 100 < 88 THEN 'succeeded'
         WHEN i %% 100 < 94 THEN 'failed'
         WHEN i %% 100 < 97 THEN 'pending'
         WHEN i %% 100 < 98 THEN 'running'
         ELSE 'cancelled' END AS status) AS s
"""


def fill(rows: int, refill: bool) -> None:
    from django.db import connection

    from django_cronqueue.models import CronSchedule, Job, Worker

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_cronqueue_job")
        present = cursor.fetchone()[0]
    if present == rows and not refill:
        print(f"reusing {present:,} rows")
        return
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE django_cronqueue_job RESTART IDENTITY CASCADE")
        sql = (
            FILL_SQL.replace("%(names)s", str(NAMES))
            .replace("%(queues)s", ", ".join(f"'{q}'" for q in QUEUES))
            .replace("%(queue_count)s", str(len(QUEUES)))
            .replace("%(rows)s", str(rows))
            .replace("%%", "%")
        )
        cursor.execute(sql)
    print(f"inserted {rows:,} rows in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_cronqueue_job")
    print(f"VACUUM ANALYZE in {time.perf_counter() - start:.1f} s")
    from django.utils import timezone

    now = timezone.now()
    Worker.objects.all().delete()
    for n in range(4):
        Worker.objects.create(
            id=f"bench-worker:{n}", hostname=f"web-{n}", pid=1000 + n, last_seen=now
        )
    CronSchedule.objects.all().delete()
    for n in range(10):
        CronSchedule.objects.create(
            name=f"bench.job_{n}", expression=f"{n} * * * *", tz="Europe/Paris", cursor=now
        )
    print(f"the table: {Job.objects.count():,} rows")


def fill_dynamic(count: int) -> None:
    """``count`` dynamic schedules of testapp.send_report, one in ten paused, all yearly."""
    from django.db import connection

    from django_cronqueue.models import CronSchedule

    dynamic = CronSchedule.objects.filter(source="dynamic")
    if dynamic.count() == count:
        print(f"reusing {count:,} dynamic schedules")
        return
    dynamic.delete()
    if not count:
        return
    CronSchedule.objects.create_dynamic(
        name="tenant-0",
        job="testapp.send_report",
        payload={"tenant_id": 0},
        expression="0 0 1 1 *",
        tz="Europe/Paris",
    )
    table = CronSchedule._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, source, job, payload, expression, tz, options, cursor, "
            "next_run, paused, active, created_at, updated_at) "
            "SELECT 'tenant-' || i, source, job, jsonb_build_object('tenant_id', i), expression, "
            "tz, options, cursor, next_run, i %% 10 = 0, active, created_at, updated_at "
            f"FROM {table}, generate_series(1, %s) AS i WHERE name = 'tenant-0'",
            [count - 1],
        )
        cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"made {count:,} dynamic schedules")


def measure(client, url: str, repeat: int) -> tuple[float, float, int, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)  # warm up (and check it works)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - start) * 1000)
    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    slowest = max(float(query["time"]) for query in captured.captured_queries) * 1000
    return statistics.median(times), max(times), len(captured), slowest


def main() -> None:
    args = parse_args()
    setup_django(args.database)
    fill(args.rows, args.refill)
    fill_dynamic(args.dynamic)

    from django.contrib.auth.models import User
    from django.test import Client

    from django_cronqueue.models import Job

    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    failed = Job.objects.filter(status="failed").order_by("-id")
    some_failed = failed.values_list("id", flat=True)[0]
    base = "/admin/django_cronqueue/job/"
    pages = [
        ("job list, unfiltered", base),
        ("job list, page 2", base + "?p=2"),
        ("job list, page 50", base + "?p=50"),
        ("status = pending", base + "?status=pending"),
        ("status = running", base + "?status=running"),
        ("status = succeeded", base + "?status=succeeded"),
        ("status = failed", base + "?status=failed"),
        ("status = cancelled", base + "?status=cancelled"),
        ("failed in the last 24 h", base + "?failed=24h"),
        ("failed in the last hour", base + "?failed=1h"),
        ("name = bench.job_7", base + "?name=bench.job_7"),
        ("name = shop.removed_job", base + "?name=shop.removed_job"),
        ("queue = emails", base + "?queue=emails"),
        ("queue = emails, status = failed", base + "?queue=emails&status=failed"),
        ("search: a job id", base + f"?q={some_failed}"),
        ("search: a dedupe key", base + "?q=key-500000"),
        ("search: error text (full scan)", base + "?q=failure+123456"),
        ("search: a payload value", base + "?q=user_id%3A123456"),
        ("job detail page", base + f"{some_failed}/change/"),
        ("dashboard", base + "dashboard/"),
        ("cron schedule list", SCHEDULES),
        ("cron schedule list, page 500", SCHEDULES + "?p=500"),
        ("schedules: source = dynamic", SCHEDULES + "?source__exact=dynamic"),
        ("schedules: paused", SCHEDULES + "?paused__exact=1"),
        ("schedules: search tenant-4242", SCHEDULES + "?q=tenant-4242"),
        ("metrics: MetricsView", "/metrics/"),
    ]
    pages = [(label, url) for label, url in pages if args.only in label]
    print(f"\n{Job.objects.count():,} jobs; median and max of {args.repeat} requests")
    print(f"{'page':36} {'median ms':>10} {'max ms':>8} {'queries':>8} {'slowest query ms':>17}")
    for label, url in pages:
        median, worst, queries, slowest = measure(client, url, args.repeat)
        print(f"{label:36} {median:10.1f} {worst:8.1f} {queries:8d} {slowest:17.1f}")


if __name__ == "__main__":
    main()
