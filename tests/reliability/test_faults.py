"""The fault-injection run (bench/faults.py), short and seeded, once per pool: real
``runjobs`` processes on a PostgreSQL cluster of the run's own, killed, stopped past their
lease and cut from their database, which is restarted; the checker
(tests/reliability/fault_history.py) must find no violation.

The run sets Django up on its own cluster, so it runs in a process of its own. It needs
PostgreSQL's server binaries, so it runs in the PostgreSQL suite only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

from .conftest import postgres_only

pytestmark = [pytest.mark.e2e, postgres_only]

# CI runs these beside the SQLite and MariaDB suites on the same cores: held jobs have come
# back up to 15 s late there (the default grace, for a machine running the run alone or
# beside one other, is 12 s). 20 s still catches a return half a minute late.
SHORT_RUN = ["--jobs", "1000", "--seconds", "30", "--grace", "20"]


@pytest.mark.parametrize(
    ("pool", "seed", "variant"),
    [
        ("threads", 11, []),
        ("processes", 12, []),
        ("asyncio", 13, []),
        ("threads", 14, ["--pgbouncer"]),
    ],
    ids=["threads", "processes", "asyncio", "threads-pgbouncer"],
)
def test_a_short_fault_run_breaks_no_invariant(pool, seed, variant, tmp_path):
    if variant:
        from .pgbouncer import installed

        if not installed():
            pytest.skip("PgBouncer is not installed (scripts/install_debs installs it)")
    command = [sys.executable, "bench/faults.py", "--pool", pool, "--seed", str(seed)]
    command += [*SHORT_RUN, *variant, "--logs", str(tmp_path)]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, f"{output}\n(the workers' logs: {tmp_path}/workers.log)"
    figures = json.loads(finished.stdout.strip().splitlines()[-1])
    assert figures["succeeded"] == figures["jobs"] == 1000, figures
    assert sum(figures["faults"].values()) >= 5, figures  # the faults did hit
