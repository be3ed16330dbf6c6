"""Churn: sustained enqueue and drain on PostgreSQL, watching the job table's bloat
(``bench/scale.py --only churn`` and ``--only held-transaction``; run it through scale.py).

- A producer process (``enqueue_many``) keeps ``--backlog`` no-op jobs pending (``churn``),
  so that ``--workers`` real ``runjobs --queue default`` processes at their defaults drain
  at the highest rate they hold; it also prunes succeeded rows older than a minute every
  ``--sample`` seconds (``maintenance.prune``: a worker prunes hourly, and a day of history
  would make the table's size measure the history, not the bloat).
- This process probes, every 0.2 s, the claim: it claims 10 jobs (a worker's PREFETCH) as a
  worker does (after its floor while a transaction is held: ``claiming.floor``) and
  completes them, timing the claim statement; and every 10 s (a
  heartbeat's interval at the default LEASE), renewals: it holds 20 claimed jobs of a
  queue no worker reads and renews their leases with the heartbeat's own statement
  (``lifecycle.renew_leases``) in a transaction that then reads
  ``pg_stat_xact_user_tables``: how many of exactly those updates were HOT.
- Every ``--sample`` seconds it reads the job table's ``n_dead_tup``, heap and index sizes,
  autovacuum count and the jobs finished since the last sample.

``held-transaction``: the producer first keeps the backlog topped up for a minute (the
capacity), then enqueues at ``--load`` (0.8) of that rate; at ``--hold-start`` minutes a
second connection runs ``BEGIN; SELECT txid_current()`` and sleeps ``--hold-minutes``. The
drain while held against the drain before, and the seconds the backlog takes to get back to
its level before the hold once it is released, for good: from then on to the end of the run
it stays there ("never" if it is above it at the end). The level is the band the pending
count kept in the minute before the hold, counted once a second: its highest count plus
its spread above its median. A steady queue's count is noise around its median, and the
highest of one minute is exceeded by chance within the next minutes; the spread is the
margin that chance needs, so a count above the band is a backlog, not noise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE = "django_cronqueue_job"
NOOP = "benchjobs.noop"
PROBE_QUEUE = "bench-probe"
PROBE_HELD = 20
PROBE_EVERY = 0.2
RENEW_EVERY = 10.0
RETENTION = 60  # seconds: the producer's SUCCEEDED_RETENTION
CALIBRATION = 60.0  # seconds of topped-up backlog before held-transaction's fixed rate
SETTLE = 30.0  # seconds the fixed rate runs before the level's minute begins
LEVEL_WINDOW = 60  # seconds of pending counts, before the hold, that make its level
SIZE_TARGET = 3.0  # heap + indexes within 3x minute 5
P99_TARGET = 2.0  # claim p99 within 2x minute 5
HOT_TARGET = 0.9
HELD_DRAIN_TARGET = 0.75  # the drain while held >= 75% of before
CLEAR_TARGET_S = 60.0
# The bound on dead rows: autovacuum visits the table once per autovacuum_naptime (60 s,
# stock), and between two visits each job leaves three dead versions in the job table
# (pending and running, then the succeeded row once moved to its history table, or pruned
# where there is none); plus the backlog kept.
DEAD_PER_JOB = 3
NAPTIME_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("churn and held-transaction")
    group.add_argument("--minutes", type=float, default=5.0, help="length of the run")
    group.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    group.add_argument("--workers", type=int, default=2, help="runjobs processes")
    group.add_argument("--backlog", type=int, default=2_000, help="pending jobs kept (churn)")
    group.add_argument("--load", type=float, default=0.8, help="of capacity (held-transaction)")
    group.add_argument("--hold-start", type=float, default=3.0, help="minute the hold begins")
    group.add_argument("--hold-minutes", type=float, default=2.0)
    group.add_argument(
        "--hold-database",
        default="",
        help="hold the transaction in this database of the same server (the site's, when "
        "the queue has a database of its own) instead of the queue's",
    )
    group.add_argument("--producer-child", default="", help=argparse.SUPPRESS)


# --- the producer (a process of its own) ----------------------------------------------


def producer_child(spec: str) -> int:
    """``backlog:N`` keeps N jobs pending; ``rate:R`` enqueues R jobs/s. A thread of its
    own prunes rows past ``RETENTION`` every ``prune_every`` seconds (a prune of a minute's
    rows takes seconds: the enqueues must not wait for it). Runs until killed."""
    import django

    django.setup()
    from django_cronqueue import jobs
    from django_cronqueue.models import Job

    mode, value, prune_every = spec.split(":")
    threading.Thread(target=prune_loop, args=(float(prune_every),), daemon=True).start()
    started = time.monotonic()
    enqueued = 0
    while True:
        time.sleep(0.05)
        if mode == "backlog":
            pending = Job.objects.filter(status="pending", queue="default").count()
            wanted = int(value) - pending
        else:
            wanted = int((time.monotonic() - started) * float(value)) - enqueued
        for start in range(0, max(wanted, 0), 5_000):
            jobs.enqueue_many(NOOP, [{"n": 0}] * min(5_000, wanted - start))
        enqueued += max(wanted, 0)


def prune_loop(every: float) -> None:
    from django.utils import timezone

    from django_cronqueue.housekeeping import maintenance

    while True:
        time.sleep(every)
        maintenance.prune(timezone.now())


def start_producer(spec: str, prune_every: float) -> subprocess.Popen:
    env = {**os.environ, "BENCH_CRONQUEUE": json.dumps({"SUCCEEDED_RETENTION": RETENTION})}
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("scale.py")),
            "--producer-child",
            f"{spec}:{prune_every}",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
    )


# --- probes -----------------------------------------------------------------------------


def xact_updates(cursor: Any) -> tuple[int, int]:
    """(updates, HOT updates) of the job table this backend has not reported yet."""
    cursor.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
        [TABLE],
    )
    [(updated, hot)] = cursor.fetchall()
    return updated, hot


class Probe:
    """The claim and renewal probes of this process."""

    def __init__(self) -> None:
        from django.utils import timezone

        from django_cronqueue import jobs
        from django_cronqueue.claiming import claim_due
        from django_cronqueue.claiming.floor import ClaimFloors
        from django_cronqueue.worker.storage_watch import HoldWatch

        jobs.enqueue_many(NOOP, [{"n": 0}] * PROBE_HELD, queue=PROBE_QUEUE)
        self.held = claim_due(
            timezone.now(), queues=[PROBE_QUEUE], limit=PROBE_HELD, worker_id="bench-renewals"
        )
        # The probe claims as a worker does: after its floor while a transaction is held.
        self.floors = ClaimFloors(full_every=1.0)
        self.hold = HoldWatch(self.floors)
        self.claims: list[float] = []  # ms, since the last sample
        self.renewals = self.hot = 0  # since the last sample
        self.next_renewal = time.monotonic()

    def claim(self) -> None:
        from django.utils import timezone

        from django_cronqueue.claiming import claim, claim_request, complete_successes

        self.hold.check()
        floor = self.floors.take()
        request = claim_request(
            timezone.now(), queues=["default"], limit=10, worker_id="bench-probe", after=floor
        )
        started = time.perf_counter()
        claimed = claim(request, using="default")
        seconds = time.perf_counter() - started
        self.claims.append(seconds * 1000)
        self.floors.advance(floor, claimed, seconds)
        complete_successes(claimed, finished_at=timezone.now(), using="default")

    def renew(self) -> None:
        if time.monotonic() < self.next_renewal:
            return
        self.next_renewal += RENEW_EVERY
        from django.db import connection, transaction
        from django.utils import timezone

        from django_cronqueue import lifecycle

        # The counts read in one transaction before and after the renewal: no flush of
        # this backend's statistics comes between, so the difference is the renewal's.
        with transaction.atomic(), connection.cursor() as cursor:
            before = xact_updates(cursor)
            lifecycle.renew_leases(self.held, until=timezone.now() + dt.timedelta(seconds=30))
            after = xact_updates(cursor)
        self.renewals += after[0] - before[0]
        self.hot += after[1] - before[1]

    def take(self) -> tuple[list[float], int, int]:
        taken = (self.claims, self.renewals, self.hot)
        self.claims, self.renewals, self.hot = [], 0, 0
        return taken


# --- samples ----------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    dead_tuples: int
    heap_mb: float
    indexes_mb: float
    autovacuums: int
    pending: int
    drained_per_s: float
    claim_p50_ms: float
    claim_p99_ms: float
    renewals: int
    hot_ratio: float
    held: bool = False

    @property
    def size_mb(self) -> float:
        return self.heap_mb + self.indexes_mb


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    capacity: float | None = None  # jobs/s, held-transaction's calibration
    rate: float | None = None
    pending_before_hold: int | None = None  # the level: the top of the band of...
    pending_level_window: list[int] = field(default_factory=list)  # ...the minute before
    clear_seconds: float | None = None
    # (seconds after the release, pending), once a second, to the end of the run
    pending_after_release: list[tuple[float, int]] = field(default_factory=list)


def table_figures(sql: Any, pending_count: PendingCount) -> tuple[int, float, float, int, int]:
    [(dead, heap, indexes, vacuums)] = sql(
        "SELECT n_dead_tup, pg_relation_size(relid) / 1048576.0, "
        "pg_indexes_size(relid) / 1048576.0, autovacuum_count "
        "FROM pg_stat_user_tables WHERE relid = %s::regclass",
        (TABLE,),
    )
    return dead, float(heap), float(indexes), vacuums, pending_count(sql)


def finished_since(sql: Any, since: dt.datetime) -> int:
    [(count,)] = sql(
        f"SELECT COUNT(*) FROM {TABLE} WHERE status = 'succeeded' AND finished_at > %s",
        (since,),
    )
    return count


def percentile(values: list[float], rank: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(rank / 100 * len(ordered)) - 1))]


class PendingCount:
    """The pending jobs, counted from the oldest one found last time, by primary key: a
    count through an index on status walked an entry for every version of every job
    since a held transaction began (millions), once a second, and was among the loads
    that made the backlog it measured. Exact here: the bench's jobs never fail, so no
    row becomes pending again below the oldest pending one."""

    def __init__(self) -> None:
        self.oldest = 0

    def __call__(self, sql: Any) -> int:
        [(count, oldest, newest)] = sql(
            f"SELECT COUNT(*) FILTER (WHERE status = 'pending' AND queue = 'default'), "
            "MIN(id) FILTER (WHERE status = 'pending'), MAX(id) "
            f"FROM ONLY {TABLE} WHERE id >= %s",
            (self.oldest,),
        )
        if oldest is not None or newest is not None:
            self.oldest = oldest if oldest is not None else newest
        return count


# --- the run ----------------------------------------------------------------------------


def run(
    mode: str, options: argparse.Namespace, sql: Any, root: Path, database: str
) -> dict[str, Any]:
    held_mode = mode == "held-transaction"
    if held_mode and options.hold_start * 60 < CALIBRATION + SETTLE + LEVEL_WINDOW:
        raise SystemExit(
            f"--hold-start must leave the calibration ({CALIBRATION:.0f} s), {SETTLE:.0f} s "
            f"at the fixed rate and the level's {LEVEL_WINDOW} s: "
            f"{(CALIBRATION + SETTLE + LEVEL_WINDOW) / 60:.1f} minutes at least"
        )
    log_path = root / "bench" / "results" / f"churn-workers-{time.strftime('%Y%m%d-%H%M%S')}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    producer = [start_producer(f"backlog:{options.backlog}", options.sample)]
    workers: list[subprocess.Popen] = []
    try:
        with open(log_path, "ab") as log:
            for _ in range(options.workers):
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "django", "runjobs", "--queue", "default"],
                        cwd=root,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        result = measure(held_mode, options, sql, producer, database)
    finally:
        for worker in workers:
            worker.terminate()  # runjobs stops on SIGTERM: its slots finish, it unregisters
        for worker in workers:
            worker.wait(timeout=60)
        producer[0].kill()
        producer[0].wait()
    return report(mode, options, result)


@dataclass
class Hold:
    """The second connection's transaction, held open from ``start`` to ``end``
    (monotonic seconds)."""

    start: float
    end: float
    database: str
    connection: Any = None

    def step(self, now: float) -> None:
        import psycopg
        from benchlib.db import PG

        if self.connection is None and self.start <= now < self.end:
            self.connection = psycopg.connect(dbname=self.database, **PG)
            self.connection.execute("SELECT txid_current()")  # in a transaction, held open
        elif self.connection is not None and now >= self.end:
            self.release()

    def release(self) -> None:
        if self.connection is not None:
            self.connection.rollback()
            self.connection.close()
            self.connection = None

    def covers(self, start: float, end: float) -> bool:
        return self.start - 2 <= start and end <= self.end + 2


def measure(
    held_mode: bool,
    options: argparse.Namespace,
    sql: Any,
    producer: list[subprocess.Popen],
    database: str,
) -> Run:
    result = Run()
    probe = Probe()
    pending_count = PendingCount()
    start = time.monotonic()
    wall_start = dt.datetime.now(dt.timezone.utc)
    window = (start, wall_start)  # the current sample's start: monotonic, wall clock
    next_sample = start + options.sample
    end = start + options.minutes * 60 + 1  # the last sample is at --minutes
    hold = Hold(start + options.hold_start * 60, 0.0, options.hold_database or database)
    hold.end = hold.start + options.hold_minutes * 60
    pending_seen: list[int] = []
    next_pending = start
    print(f"\n{HEADER}\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        while time.monotonic() < end:
            now = time.monotonic()
            if held_mode:
                if result.rate is None and now - start >= CALIBRATION:
                    result.capacity = finished_since(sql, wall_start) / (now - start)
                    result.rate = options.load * result.capacity
                    producer[0].kill()
                    producer[0].wait()
                    producer[0] = start_producer(f"rate:{result.rate}", options.sample)
                if hold.connection is None and now < hold.end:
                    set_level(result, pending_seen[-LEVEL_WINDOW:])
                hold.step(now)
                if now >= next_pending:  # the backlog, every second
                    next_pending += 1.0
                    pending_seen.append(pending_count(sql))
                    if now >= hold.end:  # cleared once it stays at its level to the end
                        result.pending_after_release.append(
                            (round(now - hold.end, 1), pending_seen[-1])
                        )
                        above = pending_seen[-1] > (result.pending_before_hold or 0)
                        result.clear_seconds = None if above else result.clear_seconds
                        if not above and result.clear_seconds is None:
                            result.clear_seconds = now - hold.end
            probe.claim()
            probe.renew()
            if now >= next_sample:
                wall = dt.datetime.now(dt.timezone.utc)
                held = held_mode and hold.covers(window[0], now)
                result.samples.append(
                    sample(sql, probe, pending_count, now - start, window[1], wall, held)
                )
                print_sample(result.samples[-1])
                next_sample += options.sample
                window = (now, wall)
            time.sleep(PROBE_EVERY)
    finally:
        hold.release()
    return result


def median_and_highest(counts: list[int]) -> tuple[int, int]:
    return (round(statistics.median(counts)), max(counts)) if counts else (0, 0)


def set_level(result: Run, counts: list[int]) -> None:
    """The level the backlog is back to after the hold: the band of ``counts`` (the
    minute before it), its highest count plus its spread above its median."""
    median, highest = median_and_highest(counts)
    result.pending_level_window = counts
    result.pending_before_hold = highest + (highest - median)


def sample(
    sql: Any,
    probe: Probe,
    pending_count: PendingCount,
    seconds: float,
    since: dt.datetime,
    wall: dt.datetime,
    held: bool,
) -> Sample:
    dead, heap, indexes, vacuums, pending = table_figures(sql, pending_count)
    drained = finished_since(sql, since) / (wall - since).total_seconds()
    claims, renewals, hot = probe.take()
    return Sample(
        seconds=seconds,
        dead_tuples=dead,
        heap_mb=heap,
        indexes_mb=indexes,
        autovacuums=vacuums,
        pending=pending,
        drained_per_s=drained,
        claim_p50_ms=percentile(claims, 50),
        claim_p99_ms=percentile(claims, 99),
        renewals=renewals,
        hot_ratio=hot / renewals if renewals else float("nan"),
        held=held,
    )


# --- the report -------------------------------------------------------------------------

HEADER = (
    "| s | dead rows | heap + indexes (MB) | autovacuums | pending | drained (jobs/s) "
    "| claim p50 / p99 (ms) | renewals HOT |"
)


def print_sample(s: Sample) -> None:
    held = " (held)" if s.held else ""
    print(
        f"| {s.seconds:.0f}{held} | {s.dead_tuples:,} | {s.heap_mb:.1f} + {s.indexes_mb:.1f} "
        f"| {s.autovacuums} | {s.pending:,} | {s.drained_per_s:,.0f} "
        f"| {s.claim_p50_ms:.2f} / {s.claim_p99_ms:.2f} | {s.hot_ratio:.0%} of {s.renewals} |",
        flush=True,
    )


def baseline(samples: list[Sample]) -> Sample:
    """The sample nearest minute 5 (the last one of a shorter run)."""
    return min(samples, key=lambda s: abs(s.seconds - 300))


def report(mode: str, options: argparse.Namespace, result: Run) -> dict[str, Any]:
    samples = result.samples
    if not samples:
        raise SystemExit("no sample taken: --minutes shorter than --sample")
    base = baseline(samples)
    later = [s for s in samples if s.seconds >= base.seconds] or [base]
    renewals = sum(s.renewals for s in samples)
    peak = max(s.drained_per_s for s in samples)
    hot = sum(s.hot_ratio * s.renewals for s in samples if s.renewals)
    figures: dict[str, Any] = {
        "mode": mode,
        "hold_database": options.hold_database or "the queue's",
        "minutes": options.minutes,
        "workers": options.workers,
        "sample": options.sample,
        "samples": [vars(s) for s in samples],
        "max_dead_tuples": max(s.dead_tuples for s in samples),
        "dead_bound": DEAD_PER_JOB * peak * NAPTIME_S + options.backlog,
        "baseline_seconds": base.seconds,
        "size_ratio": max(s.size_mb for s in later) / base.size_mb,
        "p99_ratio": max(s.claim_p99_ms for s in later) / base.claim_p99_ms,
        "hot_ratio": hot / renewals if renewals else float("nan"),
        "renewals": renewals,
    }
    checks = [
        (
            "renewals that were HOT",
            f"{figures['hot_ratio']:.1%} of {renewals}",
            f">= {HOT_TARGET:.0%}",
            figures["hot_ratio"] >= HOT_TARGET,
        ),
        (
            "dead rows, most seen",
            f"{figures['max_dead_tuples']:,}",
            f"<= {figures['dead_bound']:,.0f} ({DEAD_PER_JOB} x {peak:,.0f} jobs/s x "
            f"{NAPTIME_S:.0f} s + {options.backlog:,})",
            figures["max_dead_tuples"] <= figures["dead_bound"],
        ),
        (
            f"heap + indexes, largest after s {base.seconds:.0f} / at it",
            f"{figures['size_ratio']:.2f}x ({base.size_mb:.1f} MB at it)",
            f"<= {SIZE_TARGET:.0f}x",
            figures["size_ratio"] <= SIZE_TARGET,
        ),
        (
            f"claim p99, highest after s {base.seconds:.0f} / at it",
            f"{figures['p99_ratio']:.2f}x ({base.claim_p99_ms:.2f} ms at it)",
            f"<= {P99_TARGET:.0f}x",
            figures["p99_ratio"] <= P99_TARGET,
        ),
    ]
    if mode == "held-transaction":
        checks += held_checks(result, figures)
    mark = ["MISSED", "met"]
    print("\n| figure | value | target |\n| --- | ---: | --- |")
    for name, value, target, met in checks:
        print(f"| {name} | {value} | {target}{': ' + mark[met] if target else ''} |")
    figures["verdicts"] = [met for _, _, target, met in checks if target]
    return figures


def held_checks(result: Run, figures: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    held = [s for s in result.samples if s.held]
    # Before the hold, at the fixed rate: the samples after the calibration minute.
    first_held = held[0].seconds if held else float("inf")
    before = [
        s
        for s in result.samples
        if not s.held
        and s.seconds - figures["sample"] >= CALIBRATION - 2
        and s.seconds < first_held
    ]
    during = statistics.mean(s.drained_per_s for s in held) if held else float("nan")
    prior = statistics.mean(s.drained_per_s for s in before) if before else float("nan")
    figures.update(
        capacity=result.capacity,
        rate=result.rate,
        drain_before=prior,
        drain_held=during,
        held_ratio=during / prior,
        pending_before_hold=result.pending_before_hold,
        clear_seconds=result.clear_seconds,
        pending_level_window=result.pending_level_window,
        pending_after_release=result.pending_after_release,
    )
    clear = result.clear_seconds
    level_minute = median_and_highest(result.pending_level_window)
    late = median_and_highest(
        [count for seconds, count in result.pending_after_release if seconds >= CLEAR_TARGET_S]
    )
    return [
        (
            "capacity (calibration) / producer rate (jobs/s)",
            f"{result.capacity or 0:,.0f} / {result.rate or 0:,.0f}",
            "",
            True,
        ),
        (
            "drained while held / before (jobs/s)",
            f"{during:,.0f} / {prior:,.0f} ({figures['held_ratio']:.0%})",
            f">= {HELD_DRAIN_TARGET:.0%}",
            figures["held_ratio"] >= HELD_DRAIN_TARGET,
        ),
        (
            "pending in the minute before the hold: median / highest / level",
            f"{level_minute[0]:,} / {level_minute[1]:,} / {result.pending_before_hold or 0:,}",
            "",
            True,
        ),
        (
            f"pending from {CLEAR_TARGET_S:.0f} s after the release to the end: median / highest",
            f"{late[0]:,} / {late[1]:,}",
            "",
            True,
        ),
        (
            "backlog back to its level before the hold, after release (s)",
            "never" if clear is None else f"{clear:.0f}",
            f"<= {CLEAR_TARGET_S:.0f} s",
            clear is not None and clear <= CLEAR_TARGET_S,
        ),
    ]
