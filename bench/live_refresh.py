"""What the admin's live refresh costs: the job list's refresh (the page's own URL with
the ``X-CronQueue-Live`` header, as live.js fetches it) against a page load, on
PostgreSQL with ROWS jobs (the table admin_scale.py builds and reuses), and how many open
tabs one database serves at the default rate of one refresh every 5 seconds.

For each page: the median and the worst of REPEAT requests through Django's test client
(server time), the statements a refresh issues and the database's share of its time.
"Tabs per database core" is the refresh period over the database time of one refresh:
how many tabs left open on that page one busy core of the database keeps up with; "tabs
per web worker" is the same over the whole request's time.

    .venv/bin/python bench/live_refresh.py                  # 1,000,000 rows
    .venv/bin/python bench/live_refresh.py --rows 2000 --repeat 3   # a smoke run
    .venv/bin/python bench/live_refresh.py --period 2       # tabs at 2 s

The database (``cronqueue_admin_bench`` unless --database says otherwise) is shared with
admin_scale.py: created if missing, refilled only when it holds another number of rows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import admin_scale

DEFAULT_PERIOD = 5.0  # seconds: live.js's default rate
LIVE = {"HTTP_X_CRONQUEUE_LIVE": "1"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database", default="cronqueue_admin_bench")
    parser.add_argument("--repeat", type=int, default=20, help="timed refreshes per page")
    parser.add_argument("--refill", action="store_true", help="empty and refill the table")
    parser.add_argument("--period", type=float, default=DEFAULT_PERIOD, help="seconds")
    return parser.parse_args()


def timed(client, url: str, repeat: int, headers: dict[str, str]) -> tuple[list[float], int, float]:
    """The request times (ms), the statements of one request and their database time (ms)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url, **headers)  # warm up (and check it works)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        client.get(url, **headers)
        times.append((time.perf_counter() - start) * 1000)
    with CaptureQueriesContext(connection) as captured:
        client.get(url, **headers)
    database_ms = sum(float(query["time"]) for query in captured.captured_queries) * 1000
    return times, len(captured), database_ms


def main() -> None:
    args = parse_args()
    admin_scale.setup_django(args.database)
    admin_scale.fill(args.rows, args.refill)

    from django.contrib.auth.models import User
    from django.test import Client

    from django_cronqueue.models import Job

    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    some_failed = Job.objects.filter(status="failed").order_by("-id").values_list("id", flat=True)
    base = "/admin/django_cronqueue/job/"
    pages = [
        ("job list", base),
        ("job list, status = failed", base + "?status=failed"),
        ("job list, queue = emails, running", base + "?queue=emails&status=running"),
        ("job list, search user_id:4242", base + "?q=user_id%3A4242"),
        ("a job's page", base + f"{some_failed[0]}/change/"),
        ("dashboard", base + "dashboard/"),
    ]
    print(
        f"\n{Job.objects.count():,} jobs; {args.repeat} requests each; a refresh every "
        f"{args.period:g} s"
    )
    header = (
        f"{'page':36} {'load ms':>8} {'refresh ms':>10} {'worst ms':>8} {'stmts':>5} "
        f"{'db ms':>7} {'tabs/db core':>12} {'tabs/web worker':>15}"
    )
    print(header)
    for label, url in pages:
        loads, load_statements, _ = timed(client, url, max(3, args.repeat // 4), {})
        refreshes, statements, database_ms = timed(client, url, args.repeat, LIVE)
        assert statements <= load_statements, (label, statements, load_statements)
        refresh_ms = statistics.median(refreshes)
        per_core = args.period * 1000 / database_ms if database_ms else float("inf")
        per_worker = args.period * 1000 / refresh_ms
        print(
            f"{label:36} {statistics.median(loads):8.1f} {refresh_ms:10.1f} "
            f"{max(refreshes):8.1f} {statements:5d} {database_ms:7.1f} {per_core:12.0f} "
            f"{per_worker:15.0f}"
        )


if __name__ == "__main__":
    main()
