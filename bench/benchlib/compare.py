"""Two versions of django-cronqueue side by side: ``python bench/run.py --compare A B``.

Each side is a git commit (or ``.`` for the working tree as it is), exported to
``bench/.compare/<commit>/`` and put first on the ``PYTHONPATH`` of every process that
measures it, with its own PostgreSQL database migrated by its own migrations. The sides
then take turns: every drain of a round is measured for A and for B one right after the
other, and the order flips every round (A B, B A, A B ...), so that a machine that
drifts (a neighbour's load, a checkpoint, thermal throttling) weighs on both alike.
The figures are the medians over the rounds and the change from A to B.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import BENCH_DIR, REPO_DIR, RESULTS_DIR, db, measure
from .spec import System

EXPORT_DIR = BENCH_DIR / ".compare"
WORKING_TREE = "."
BURST_REPEATS = 3  # each start-up figure, per side and round (median)
TIMEOUT = 120.0  # seconds for one start-up command


@dataclasses.dataclass(frozen=True)
class Side:
    label: str  # "A" or "B"
    ref: str  # as given: a commit, a branch, "." (the working tree)
    commit: str  # the full hash ("" for the working tree)
    code_dir: Path  # holds the django_cronqueue package of this side
    system: System

    @property
    def title(self) -> str:
        if not self.commit:
            return f"{self.label}: working tree"
        return f"{self.label}: {self.commit[:9]}" + (
            f" ({self.ref})" if not self.commit.startswith(self.ref) else ""
        )


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"bench: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def export(ref: str) -> tuple[str, Path]:
    """The commit ``ref`` names and a directory holding its ``django_cronqueue``."""
    if ref == WORKING_TREE:
        return "", REPO_DIR
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    target = EXPORT_DIR / commit
    if not (target / "django_cronqueue" / "__init__.py").exists():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO_DIR), "archive", commit, "django_cronqueue"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return commit, target


def make_side(label: str, ref: str, base: System, drain_keys: list[str]) -> Side:
    commit, code_dir = export(ref)
    drains = tuple(d for d in base.drains if d.key in drain_keys)
    missing = set(drain_keys) - {d.key for d in drains}
    if missing:
        known = ", ".join(d.key for d in base.drains)
        raise SystemExit(f"bench: unknown drain(s) {', '.join(sorted(missing))} (known: {known})")
    system = dataclasses.replace(
        base,
        key=f"cronqueue_{label.lower()}",
        label=f"cronqueue {label}",
        database=f"bench_compare_{label.lower()}",
        drains=drains,
        env={**base.env, "PYTHONPATH": f"{code_dir}{os.pathsep}{BENCH_DIR}"},
    )
    return Side(label, ref, commit, code_dir, system)


def app_tables(system: System) -> tuple[str, ...]:
    """The app's tables in this side's database (each version has its own schema)."""
    connection = db.Database("postgres", system.database)
    try:
        cursor = connection.connection.cursor()
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename LIKE 'django\\_cronqueue\\_%' ORDER BY tablename"
        )
        return tuple(row[0] for row in cursor.fetchall())
    finally:
        connection.close()


def burst_seconds(ctx: measure.Context, system: System) -> float:
    """Wall time of ``runjobs --burst`` with nothing due: start-up plus shut-down."""
    started = time.perf_counter()
    done = _run_blocking([ctx.python, "-m", "django", "runjobs", "--burst"], ctx.env(system))
    if done.returncode:
        raise RuntimeError(f"{system.key} runjobs --burst exited {done.returncode}")
    return time.perf_counter() - started


def _run_blocking(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``command`` in the bench project, its stderr kept, killed after ``TIMEOUT``. Waits
    in one blocking ``waitpid``: ``subprocess.run(timeout=...)`` polls with sleeps of up
    to 50 ms, which rounded every wall time up to the next 50 ms."""
    child = subprocess.Popen(
        command,
        cwd=BENCH_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(TIMEOUT, child.kill)
    watchdog.start()
    try:
        _, stderr = child.communicate()  # no timeout: a blocking read, then waitpid
    finally:
        watchdog.cancel()
    return subprocess.CompletedProcess(command, child.returncode, None, stderr)


def first_job(ctx: measure.Context, system: System) -> dict[str, float]:
    """``runjobs --burst`` with exactly one no-op job due, enqueued before the launch in a
    process of its own through the public API (the driver's ``fill 1``:
    ``jobs.enqueue_many`` of the bench project's ``noop``). After the exit the job's row
    must say it succeeded, or no figure is taken. Two figures of the same run:

    - ``first job``: from the launch until the process exits having run it;
    - ``first job start``: from the launch until the job's ``started_at`` (the worker's
      clock, the same machine's): start-up alone, without the shut-down (a9c6a55's
      ``--burst`` waits up to POLL_INTERVAL, 1 s, in its main loop before it exits).
    """
    database = db.Database("postgres", system.database)
    try:
        database.reset(system.tables)
        ctx.driver(system, "fill", "1")
        launched = time.time()
        started = time.perf_counter()
        done = _run_blocking([ctx.python, "-m", "django", "runjobs", "--burst"], ctx.env(system))
        elapsed = time.perf_counter() - started
        if done.returncode:
            tail = " | ".join(done.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"{system.key} runjobs --burst exited {done.returncode}: {tail}")
        cursor = database.connection.cursor()
        cursor.execute("SELECT status, EXTRACT(EPOCH FROM started_at) FROM django_cronqueue_job")
        rows = cursor.fetchall()
        cursor.close()
        if [row[0] for row in rows] != ["succeeded"]:
            raise RuntimeError(f"{system.key} first job: want one succeeded job, got {rows}")
        database.reset(system.tables)
        return {"first job": elapsed, "first job start": float(rows[0][1]) - launched}
    finally:
        database.close()


def check_seconds(ctx: measure.Context, system: System) -> float:
    """Wall time of ``manage.py check``: what any Django command pays to start."""
    started = time.perf_counter()
    done = _run_blocking([ctx.python, "-m", "django", "check"], ctx.env(system))
    if done.returncode:
        raise RuntimeError(f"{system.key} check exited {done.returncode}: {done.stderr[-500:]}")
    return time.perf_counter() - started


def _one(name: str, measure_one: Any) -> Any:
    return lambda ctx, system: {name: measure_one(ctx, system)}


STARTUP_FIGURES = (  # each measures once and returns {figure name: seconds}
    _one("burst", burst_seconds),  # nothing due
    _one("check", check_seconds),
    first_job,  # one job due: "first job" (to the exit) and "first job start"
)


def run(
    ctx: measure.Context,
    refs: tuple[str, str],
    *,
    rounds: int,
    drain_keys: list[str],
    ceiling: bool,
    startup: bool,
    byte_compiled: bool = False,
) -> int:
    from projects.cronqueue.driver import system as cronqueue_system

    base = cronqueue_system("postgres")
    sides = [make_side(label, ref, base, drain_keys) for label, ref in zip("AB", refs, strict=True)]
    for index, side in enumerate(sides):
        db.recreate("postgres", side.system.database)
        ctx.driver(side.system, "migrate")
        sides[index] = dataclasses.replace(
            side, system=dataclasses.replace(side.system, tables=app_tables(side.system))
        )
    if ceiling:
        db.recreate("postgres", measure.CEILING_DB)
    if byte_compiled:  # a process then reads each module's .pyc instead of compiling it
        for side in sides:
            code = side.code_dir / "django_cronqueue"
            subprocess.run([ctx.python, "-m", "compileall", "-q", str(code)], check=True)
    print(
        f"bench: comparing {sides[0].title} and {sides[1].title}; {rounds} round(s) of "
        f"{', '.join(drain_keys)}" + (", the pgbench ceiling" if ceiling else "")
        + (", start-up" if startup else "") + (", byte-compiled" if byte_compiled else ""),
        flush=True,
    )  # fmt: skip
    figures: dict[str, dict[str, list[float]]] = {side.label: {} for side in sides}
    ceilings: dict[str, list[float]] = {}
    started = time.time()
    try:
        for number in range(1, rounds + 1):
            order = sides if number % 2 else sides[::-1]
            for key in drain_keys:
                drain = next(d for d in base.drains if d.key == key)
                for side in order:
                    rate = _measure(ctx, side.system, drain)
                    figures[side.label].setdefault(f"drain {key}", []).append(rate)
                    print(f"  round {number}/{rounds} {side.label} drain {key}: "
                          f"{rate:,.0f} jobs/s", flush=True)  # fmt: skip
            if startup:
                for side in order:
                    for measure_some in STARTUP_FIGURES:
                        runs = [measure_some(ctx, side.system) for _ in range(BURST_REPEATS)]
                        for name in runs[0]:
                            value = statistics.median(run[name] for run in runs)
                            figures[side.label].setdefault(f"{name} seconds", []).append(value)
                            print(f"  round {number}/{rounds} {side.label} {name}: {value:.3f} s",
                                  flush=True)  # fmt: skip
            if ceiling:
                measure.wait_for_quiet(ctx.options.quiet_wait)
                for name, value in measure.measure_ceiling(ctx).items():
                    ceilings.setdefault(name, []).append(value)
                    print(f"  round {number}/{rounds} {name}: {value:,.0f} jobs/s", flush=True)
    finally:
        from . import procs

        procs.stop_all()
        if byte_compiled:  # the next run measures what it is asked to, not these .pyc
            for side in sides:
                for cache in (side.code_dir / "django_cronqueue").rglob("__pycache__"):
                    shutil.rmtree(cache, ignore_errors=True)
    text = table(sides, figures, ceilings)
    print()
    print(text)
    print(f"\n{rounds} round(s), medians, alternating; {(time.time() - started) / 60:.1f} min; "
          f"load (1-min) at the end {os.getloadavg()[0]:.2f}")  # fmt: skip
    out = RESULTS_DIR / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": " ".join(["python bench/run.py", *sys.argv[1:]]),
                "sides": {
                    s.label: {"ref": s.ref, "commit": s.commit or "working tree"} for s in sides
                },
                "rounds": rounds,
                "figures": figures,
                "ceilings": ceilings,
                "table": text,
            },
            indent=2,
        )
    )
    print(f"figures: {out}")
    return 0


def _measure(ctx: measure.Context, system: System, drain: Any) -> float:
    db.checkpoint_postgres()
    if ctx.options.quiet_wait:
        measure.wait_for_quiet(ctx.options.quiet_wait)
    return float(measure.measure_drain(ctx, system, drain)["rate"])


def table(
    sides: list[Side], figures: dict[str, dict[str, list[float]]], ceilings: dict[str, list[float]]
) -> str:
    a, b = (side.label for side in sides)
    lines = [
        f"{sides[0].title}",
        f"{sides[1].title}",
        "",
        f"{'figure':<24} {'A median':>12} {'B median':>12} {'change':>8}   rounds (A | B)",
    ]
    for name in figures[a]:
        values_a, values_b = figures[a][name], figures[b].get(name, [])
        if not values_b:
            continue
        median_a, median_b = statistics.median(values_a), statistics.median(values_b)
        change = (median_b - median_a) / median_a * 100 if median_a else float("nan")
        unit = "s" if name.endswith("seconds") else "/s"
        shown = " ".join(_fmt(v, unit) for v in values_a) + " | "
        shown += " ".join(_fmt(v, unit) for v in values_b)
        lines.append(
            f"{name:<24} {_fmt(median_a, unit):>12} {_fmt(median_b, unit):>12} "
            f"{change:>+7.1f}%   {shown}"
        )
    for side in sides:
        one, two = figures[side.label].get("drain default"), figures[side.label].get("drain 2proc")
        if one and two:
            ratio = statistics.median(two) / statistics.median(one)
            lines.append(f"  {side.label} 2 processes / 1 process: {ratio:.2f}x")
    for name, values in ceilings.items():
        median = statistics.median(values)
        lines.append(f"{name:<24} {_fmt(median, '/s'):>12} (pgbench, same rounds)")
        for side in sides:
            default = figures[side.label].get("drain default")
            if default:
                ratio = statistics.median(default) / median
                lines.append(f"  {side.label} default / {name}: {ratio:.2f}x")
    return "\n".join(lines)


def _fmt(value: float, unit: str) -> str:
    return f"{value:.3f}" if unit == "s" else f"{value:,.0f}"
