#!/usr/bin/env python3
"""The soak: 100,000 jobs through 4 ``runjobs`` processes on PostgreSQL, 10% of handler
calls failing at random and retried (3 retries, 0.1 s apart), then an exact audit:

- succeeded + failed == enqueued, and no row is left running or pending;
- the sum of ``attempts`` == the handler calls recorded (one ``SideEffect`` row per
  call), in total and job by job;
- each worker's RSS after the first 5% of the jobs and at the end (memory stays flat);
- every worker exits 0 on SIGTERM.

Run it from the repository root with the project's virtualenv; PostgreSQL must be up
(``scripts/test postgres`` starts it). It (re)creates the database ``cronqueue_soak``:

    .venv/bin/python bench/soak.py                    # 100,000 jobs, 4 workers x 2 slots
    .venv/bin/python bench/soak.py --jobs 20000 --workers 2 --failure-rate 0.2

The job (``rel.soak``) and the audit live in tests/reliability/ (jobs.py, soak.py);
tests/reliability/test_soak.py runs the same soak with 5,000 jobs in CI. Exits 1 when
the audit finds a problem.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "cronqueue_soak"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2, help="slots per worker")
    parser.add_argument("--failure-rate", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds")
    options = parser.parse_args()

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.worker_settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB": "postgres",
        "CRONQUEUE_TEST_DB_NAME": DATABASE,
        "CRONQUEUE_SOAK_FAILURE_RATE": str(options.failure_rate),
        "CRONQUEUE_TEST_SETTINGS": json.dumps({"POLL_INTERVAL": 0.2}),
    }
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))

    import django
    import psycopg

    from tests import settings as test_settings

    server = test_settings.DATABASES["default"]
    admin = {key.lower(): server[key] for key in ("USER", "PASSWORD", "HOST", "PORT")}
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{DATABASE}"')

    django.setup()
    from django.core.management import call_command

    from tests.reliability.soak import run_soak

    call_command("migrate", verbosity=0)
    logs = ROOT / "bench" / "results" / "soak"
    logs.mkdir(parents=True, exist_ok=True)
    print(
        f"soak: {options.jobs:,} jobs, {options.workers} workers x {options.concurrency} slots, "
        f"{options.failure_rate:.0%} failing calls; worker logs in {logs}",
        flush=True,
    )
    started: list[subprocess.Popen] = []
    # Stopped with SIGTERM, stop the workers too (the finally below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))

    def start(*args: str) -> subprocess.Popen:
        log = open(logs / f"worker-{len(started)}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "runjobs", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        return process

    try:
        report = run_soak(
            start,
            count=options.jobs,
            workers=options.workers,
            concurrency=options.concurrency,
            timeout=options.timeout,
            progress=lambda line: print(f"  {line}", flush=True),
        )
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
    print("\n".join(report.lines()))
    problems = report.problems()
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("soak passed" if not problems else "soak FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
