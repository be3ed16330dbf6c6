#!/usr/bin/env python3
"""django-cronqueue and its peers, side by side, on one PostgreSQL: ``python bench/run.py``.

Run it with any Python 3: it makes bench/.venv-peers (Python >= 3.12, for Django 6) with
the peers from PyPI and this checkout of django-cronqueue (editable), re-runs itself
there, recreates the bench_* databases, measures every system ``--runs`` times, prints
the table of medians and writes every figure to bench/results/<timestamp>.json.
See docs/performance.md for what each figure means.

    python bench/run.py                       # everything, median of 3 runs
    python bench/run.py --runs 1 --only cronqueue,ceiling
    python bench/run.py --compare main .      # two versions of django-cronqueue, alternating
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
VENV_DIR = BENCH_DIR / ".venv-peers"
VENV_PYTHON = VENV_DIR / "bin" / "python"
REQUIREMENTS = BENCH_DIR / "requirements-peers.txt"
MYSQLCLIENT = "mysqlclient==2.3.2"  # optional: only for the MariaDB figures
SYSTEM_KEYS = [
    "cronqueue", "tasksdb", "procrastinate", "djangoq",
    "cronqueue_sqlite", "cronqueue_mariadb", "ceiling",
]  # fmt: skip


# --- bootstrap (standard library only: runs under whatever python started us) ----------


def find_python() -> str:
    """A Python >= 3.12: $BENCH_PYTHON, pyenv's newest 3.12/3.13, or one on PATH."""
    if os.environ.get("BENCH_PYTHON"):
        return os.environ["BENCH_PYTHON"]
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        roots.insert(0, out.stdout.strip())
    for minor in ("3.12", "3.13"):
        for root in filter(None, roots):
            found = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python"))
            if found:
                return found[-1]
        if shutil.which(f"python{minor}"):
            return shutil.which(f"python{minor}")  # type: ignore[return-value]
    sys.exit("bench: need Python >= 3.12 for Django 6 (set BENCH_PYTHON=/path/to/python3.12)")


def ensure_venv() -> None:
    """Create or update bench/.venv-peers when the requirements or the package changed."""
    stamp_file = VENV_DIR / ".bench-stamp"
    stamp = hashlib.sha256(
        REQUIREMENTS.read_bytes() + (REPO_DIR / "pyproject.toml").read_bytes()
    ).hexdigest()
    if VENV_PYTHON.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return
    if not VENV_PYTHON.exists():
        python = find_python()
        print(f"bench: creating {VENV_DIR} with {python}", flush=True)
        subprocess.run([python, "-m", "venv", str(VENV_DIR)], check=True)
    pip = [str(VENV_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    print("bench: installing the peers and django-cronqueue (editable) into it", flush=True)
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    subprocess.run([*pip, "-e", str(REPO_DIR)], check=True)
    if subprocess.run([*pip, MYSQLCLIENT]).returncode:
        print("bench: mysqlclient did not build (needs libmariadb-dev, pkg-config); "
              "the MariaDB figures will be skipped", flush=True)  # fmt: skip
    stamp_file.write_text(stamp)


if __name__ == "__main__" and Path(sys.prefix).resolve() != VENV_DIR.resolve():
    ensure_venv()
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])


# --- inside the venv --------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median); 3")
    parser.add_argument(
        "--only", default="", metavar="KEYS",
        help=f"comma-separated subset of: {', '.join(SYSTEM_KEYS)}; 'peers' = the three peers",
    )  # fmt: skip
    parser.add_argument("--skip", default="", metavar="KEYS", help="the same, to leave out")
    parser.add_argument("--drain-jobs", type=int, default=20000)
    parser.add_argument("--drain-seconds", type=float, default=5.0,
                        help="stop a drain this long after its first finished job")  # fmt: skip
    parser.add_argument("--enqueue-jobs", type=int, default=2000)
    parser.add_argument("--enqueue-seconds", type=float, default=3.0,
                        help="stop a one-by-one enqueue mode after this long")  # fmt: skip
    parser.add_argument("--bulk-jobs", type=int, default=20000)
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--ceiling-seconds", type=int, default=5)
    parser.add_argument("--flow-jobs", type=int, default=20000,
                        help="due jobs of the flow-control drain, 90%% over their limit "
                        "(django-cronqueue only; 0: skip it)")  # fmt: skip
    parser.add_argument("--group-jobs", type=int, default=10000,
                        help="members of the workflow drain: a jobs.group of no-op jobs with "
                        "a then callback (django-cronqueue only; 0: skip it)")  # fmt: skip
    parser.add_argument("--quiet-wait", type=float, default=10.0, metavar="S",
                        help="before each measurement, wait up to S seconds for the machine "
                        "to be under 30%% busy (0: don't)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="JSON file (default bench/results/<ts>.json)")
    parser.add_argument("--table", type=Path, metavar="JSON",
                        help="only print the table of an earlier run's JSON file")  # fmt: skip
    compare = parser.add_argument_group(
        "comparing two versions of django-cronqueue (PostgreSQL, side by side, alternating)"
    )
    compare.add_argument("--compare", nargs=2, metavar=("A", "B"),
                         help="two git commits or branches ('.' = the working tree)")  # fmt: skip
    compare.add_argument("--rounds", type=int, default=5, help="alternating rounds (median); 5")
    compare.add_argument("--drains", default="default,2proc", metavar="KEYS",
                         help="default, c2, c4, p50, c2p50, c4p50, 2proc")  # fmt: skip
    compare.add_argument("--ceiling", action="store_true",
                         help="measure the pgbench ceiling in every round (ratios)")  # fmt: skip
    compare.add_argument("--startup", action="store_true",
                         help="time runjobs --burst (nothing due, then one job due: "
                         "start to first job) and manage.py check")  # fmt: skip
    compare.add_argument("--byte-compiled", action="store_true",
                         help="compile both sides' modules to .pyc first, as pip does at "
                         "install (default: as this machine runs them)")  # fmt: skip
    return parser.parse_args()


def selected(args: argparse.Namespace) -> list[str]:
    def expand(text: str) -> set[str]:
        keys = {k.strip() for k in text.split(",") if k.strip()}
        if "peers" in keys:
            keys = (keys - {"peers"}) | {"tasksdb", "procrastinate", "djangoq"}
        unknown = keys - set(SYSTEM_KEYS)
        if unknown:
            sys.exit(f"bench: unknown system(s) {', '.join(sorted(unknown))}")
        return keys

    only = expand(args.only) or set(SYSTEM_KEYS)
    return [k for k in SYSTEM_KEYS if k in only and k not in expand(args.skip)]


def main() -> int:
    import json
    import signal
    import time

    sys.path.insert(0, str(BENCH_DIR))
    from benchlib import RESULTS_DIR, machine, measure, procs, report
    from projects.cronqueue import driver as cronqueue
    from projects.djangoq import driver as djangoq
    from projects.procrastinate import driver as procrastinate
    from projects.tasksdb import driver as tasksdb

    args = parse_args()
    keys = selected(args)
    catalogue = {s.key: s for m in (cronqueue, tasksdb, procrastinate, djangoq) for s in m.SYSTEMS}
    if args.table:
        earlier = json.loads(args.table.read_text())
        measured = [catalogue[k] for k in earlier["systems"] if k in catalogue]
        print(report.table(earlier["medians"], measured))
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = RESULTS_DIR / stamp
    workdir.mkdir(parents=True, exist_ok=True)
    options = measure.Options(
        enqueue_jobs=args.enqueue_jobs, enqueue_seconds=args.enqueue_seconds,
        bulk_jobs=args.bulk_jobs, drain_jobs=args.drain_jobs,
        drain_seconds=args.drain_seconds, latency_jobs=args.latency_jobs,
        idle_seconds=args.idle_seconds, ceiling_seconds=args.ceiling_seconds,
        quiet_wait=args.quiet_wait, flow_jobs=args.flow_jobs, group_jobs=args.group_jobs,
    )  # fmt: skip
    ctx = measure.Context(options, workdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: workers get stopped
    if args.compare:
        from benchlib import compare

        machine.ensure_services(want_mariadb=False)
        return compare.run(
            ctx, tuple(args.compare), rounds=args.rounds,
            drain_keys=[k.strip() for k in args.drains.split(",") if k.strip()],
            ceiling=args.ceiling, startup=args.startup, byte_compiled=args.byte_compiled,
        )  # fmt: skip

    skipped: dict[str, str] = {}
    problem = machine.ensure_services(want_mariadb="cronqueue_mariadb" in keys)
    if problem:
        skipped["cronqueue_mariadb"] = problem
    systems = [catalogue[k] for k in keys if k in catalogue and k not in skipped]
    print(f"bench: {', '.join(s.key for s in systems)}" + (", ceiling" if "ceiling" in keys else "")
          + f"; {args.runs} run(s); logs in {workdir}", flush=True)  # fmt: skip
    for system in systems:
        machine.recreate(system.vendor, system.database)
        ctx.driver(system, "migrate")
    if "ceiling" in keys:
        machine.recreate("postgres", measure.CEILING_DB)

    started = time.time()
    checkout_at_start = machine.checkout()
    rounds: list[dict] = []
    try:
        for run in range(1, args.runs + 1):
            rounds.append(one_round(ctx, systems, "ceiling" in keys, run, args.runs))
    finally:
        procs.stop_all()
    result = report.medians(rounds, systems)
    text = report.table(result, systems)
    meta = machine.describe()
    load = [x["load1"] for r in rounds for s in r.values() for x in s.get("load", [])]
    busy = [x["busy_before"] for r in rounds for s in r.values() for x in s.get("load", [])
            if x.get("busy_before") is not None]  # fmt: skip
    errors = sorted({f"{k}: {e}" for r in rounds for k, s in r.items()
                     for e in s.get("errors", {}).values()})  # fmt: skip
    print()
    print(text)
    print()
    print(f"{args.runs} run(s), medians; {(time.time() - started) / 60:.1f} min; machine load "
          f"(1-min average) {min(load, default=0):.2f}-{max(load, default=0):.2f} during the run; "
          + (f"{sum(b > measure.QUIET_BUSY for b in busy)} of {len(busy)} measurements started "
             f"on a busy machine (> {measure.QUIET_BUSY:.0f}% of all CPUs); " if busy else "")
          + f"{meta['machine']}; PostgreSQL {meta['postgresql']}; "
          f"django-cronqueue {machine.short(checkout_at_start)}")  # fmt: skip
    checkout_at_end = machine.checkout()
    if checkout_at_end != checkout_at_start:
        print("WARNING: the django-cronqueue code changed during the run "
              f"({machine.short(checkout_at_start)} -> {machine.short(checkout_at_end)}); "
              "each run of each cronqueue column records the checkout it measured")  # fmt: skip
    for key, why in skipped.items():
        print(f"skipped {key}: {why}")
    for error in errors:
        print(f"ERROR {error}")
    out = args.out or RESULTS_DIR / f"{stamp}.json"
    payload = {
        "command": " ".join(["python bench/run.py", *sys.argv[1:]]),
        "started": stamp,
        "minutes": (time.time() - started) / 60,
        "options": vars(options),
        "machine": meta,
        "versions": machine.versions(),
        "cronqueue_checkout": {"start": checkout_at_start, "end": checkout_at_end},
        "systems": {s.key: {"label": s.label, "vendor": s.vendor,
                            "drains": {d.key: d.label for d in s.drains}} for s in systems},
        "skipped": skipped,
        "medians": result,
        "runs": rounds,
        "table": text,
    }  # fmt: skip
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"figures: {out}")
    return 1 if errors else 0


def one_round(ctx, systems, ceiling: bool, run: int, runs: int) -> dict:
    """Every measurement of every system once, each system's in turn."""
    import os
    import time

    from benchlib import db, measure

    results: dict[str, dict] = {}

    def attempt(key: str, name: str, action, *args) -> None:
        entry = results.setdefault(key, {"figures": {}, "details": {}, "errors": {}, "load": []})
        db.checkpoint_postgres()
        busy = measure.wait_for_quiet(ctx.options.quiet_wait) if ctx.options.quiet_wait else None
        entry["load"].append({"what": name, "load1": os.getloadavg()[0], "busy_before": busy})
        began = time.monotonic()
        try:
            figures = action(*args)
        except Exception as exc:  # one failure must not sink the whole run
            entry["errors"][name] = f"{type(exc).__name__}: {exc}"
            print(f"  run {run}/{runs} {key} {name}: ERROR {exc}", flush=True)
            return
        entry["details"][name] = figures
        print(f"  run {run}/{runs} {key} {name}: {summary(figures)} "
              f"({time.monotonic() - began:.0f}s)", flush=True)  # fmt: skip
        if name.startswith("drain "):
            entry["figures"][f"drain_{name.split()[1]}"] = figures["rate"]
        else:
            entry["figures"].update(figures)

    from benchlib import machine

    for system in systems:
        if system.distribution == "django-cronqueue":  # the code under test may be changing
            results.setdefault(system.key, {"figures": {}, "details": {}, "errors": {}, "load": []})
            results[system.key]["checkout"] = machine.checkout()
        attempt(system.key, "enqueue", measure.measure_enqueue, ctx, system)
        for drain in system.drains:
            attempt(system.key, f"drain {drain.key}", measure.measure_drain, ctx, system, drain)
        attempt(
            system.key, "idle+latency", measure.measure_idle_and_latency, ctx, system, f"r{run}"
        )
        if system.distribution == "django-cronqueue" and ctx.options.flow_jobs:
            attempt(system.key, "flow", measure.measure_flow, ctx, system)
        if system.distribution == "django-cronqueue" and ctx.options.group_jobs:
            attempt(system.key, "group", measure.measure_group, ctx, system)
    if ceiling:
        attempt("ceiling", "pgbench", measure.measure_ceiling, ctx)
    return results


def summary(figures: dict) -> str:
    shown = []
    for key, value in figures.items():
        if isinstance(value, float):
            shown.append(f"{key}={value:,.1f}")
        elif isinstance(value, (int, bool)):
            shown.append(f"{key}={value}")
    return " ".join(shown)


if __name__ == "__main__":
    sys.exit(main())
