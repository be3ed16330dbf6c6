#!/usr/bin/env python3
"""The fault-injection run: real ``runjobs`` processes of one pool work jobs on a PostgreSQL
cluster of the run's own while a seeded schedule of faults hits them (workers killed,
workers stopped past their lease, process-pool children killed, every database session
cut, the server restarted), then a checker reads the recorded history and prints each
violation of the invariants in docs/reliability.md with the faults around it.

Run it from the repository root with the project's virtualenv (PostgreSQL's server
binaries must be installed; the shared server is not touched):

    .venv/bin/python bench/faults.py --pool threads                 # 3,000 jobs, 90 s of faults
    .venv/bin/python bench/faults.py --pool asyncio --seed 7 --jobs 1000 --seconds 30
    .venv/bin/python bench/faults.py --pool processes --pgbouncer   # through PgBouncer

Exits 1 when the checker finds a violation. tests/reliability/test_faults.py runs a short
seeded run per pool in CI; the harness and the checker live in tests/reliability/
(faults.py, fault_history.py, fault_jobs.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reliability.fault_history import GRACE, explain, return_delays  # noqa: E402
from tests.reliability.faults import POOLS, FaultPlan, run_faults, summary  # noqa: E402


def stop_on_sigterm() -> None:
    """SIGTERM ends the run as Ctrl-C does: its workers and its cluster are stopped."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up must not be cut
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main() -> int:
    stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", choices=POOLS, required=True)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=90.0, help="how long faults hit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4, help="slots per worker")
    parser.add_argument("--lease", type=float, default=6.0, help="CRONQUEUE['LEASE']")
    parser.add_argument("--grace", type=float, default=GRACE,
                        help="seconds a busy machine may add to a return")  # fmt: skip
    parser.add_argument("--pgbouncer", action="store_true", help="through PgBouncer")
    parser.add_argument("--no-restarts", action="store_true", help="never restart the server")
    parser.add_argument("--logs", type=Path, help="a folder for the workers' logs")
    options = parser.parse_args()
    plan = FaultPlan(
        pool=options.pool,
        jobs=options.jobs,
        seconds=options.seconds,
        seed=options.seed,
        workers=options.workers,
        concurrency=options.concurrency,
        lease=options.lease,
        grace=options.grace,
        pgbouncer=options.pgbouncer,
        restarts=not options.no_restarts,
        folder=options.logs,
    )
    outcome = run_faults(plan, report=lambda line: print(line, flush=True))
    for violation in outcome.violations:
        print(explain(violation, outcome.history))
    figures = summary(outcome)
    delays = return_delays(outcome.history)
    figures["slowest_return_after_lease"] = round(max(delays), 2) if delays else None
    print(json.dumps(figures))
    return 1 if outcome.violations else 0


if __name__ == "__main__":
    sys.exit(main())
