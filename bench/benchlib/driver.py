"""The Django side of a system's driver: ``python -m projects.<system>.driver ACTION``.

Runs inside a process configured with that system's settings and prints one JSON
object on its last line of stdout. A driver module provides:

- ``enqueue_one(i)``: enqueue one no-op job the way a view would;
- ``enqueue_bulk(n)`` (optional): the system's bulk API, n jobs;
- ``enqueue_one_dedupe(i)`` (optional): one job with the system's dedupe/lock key;
- ``fill(n)``: queue n no-op jobs as fast as possible (set-up for the drain);
- ``fill_group(n)`` (optional): queue a group of n no-op members with a then callback;
- ``fill_flow(n)`` (optional): queue n due jobs of which 90% are over their flow limit,
  returning ``{"runnable": ..., "over": ...}`` (set-up for the flow-control drain);
- ``enqueue_record(i)``: enqueue one ``record_start`` job (pickup latency).

Actions: ``migrate``; ``enqueue --single N --transaction N --bulk N --dedupe N``
(jobs/s of each mode); ``fill N``; ``fill-flow N``; ``fill-group N``;
``latency --jobs N --interval S --file F``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from types import ModuleType
from typing import Any

WARMUP = 20


def main(module: ModuleType) -> None:
    parser = argparse.ArgumentParser(prog=module.__name__)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("migrate")
    enqueue = sub.add_parser("enqueue")
    for mode in ("single", "transaction", "bulk", "dedupe"):
        enqueue.add_argument(f"--{mode}", type=int, default=0, metavar="N")
    enqueue.add_argument(
        "--max-seconds",
        type=float,
        default=3.0,
        help="stop a one-by-one mode after this long (the rate is of those done)",
    )
    fill = sub.add_parser("fill")
    fill.add_argument("n", type=int)
    fill_flow = sub.add_parser("fill-flow")
    fill_flow.add_argument("n", type=int)
    fill_group = sub.add_parser("fill-group")
    fill_group.add_argument("n", type=int)
    latency = sub.add_parser("latency")
    latency.add_argument("--jobs", type=int, default=200)
    latency.add_argument("--interval", type=float, default=0.05)
    latency.add_argument("--file", required=True)
    latency.add_argument("--first-id", type=int, default=1)
    latency.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()

    import django

    django.setup()
    if args.action == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        result: dict[str, Any] = {"ok": True}
    elif args.action == "enqueue":
        result = measure_enqueue(module, args)
    elif args.action == "fill":
        started = time.perf_counter()
        module.fill(args.n)
        result = {"n": args.n, "seconds": time.perf_counter() - started}
    elif args.action == "fill-flow":
        started = time.perf_counter()
        result = {**module.fill_flow(args.n), "seconds": time.perf_counter() - started}
    elif args.action == "fill-group":
        started = time.perf_counter()
        module.fill_group(args.n)
        result = {"n": args.n, "seconds": time.perf_counter() - started}
    else:
        result = measure_latency(module, args)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()


def _one_by_one(enqueue: Any, n: int, max_seconds: float, around: Any = None) -> float:
    """Jobs/s of up to ``n`` calls of ``enqueue(i)``, stopping after ``max_seconds``;
    ``around`` (a context manager, e.g. one transaction) is inside the timing."""
    started = time.perf_counter()
    deadline = started + max_seconds
    done = 0
    with around if around is not None else contextlib.nullcontext():
        while done < n:
            enqueue(done)
            done += 1
            if done % 10 == 0 and time.perf_counter() > deadline:
                break
    return done / (time.perf_counter() - started)


def measure_enqueue(module: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """Jobs/s of each mode. The first WARMUP single calls (connection, imports) are untimed."""
    from django.db import transaction

    for i in range(WARMUP):
        module.enqueue_one(-1 - i)
    result: dict[str, Any] = {}
    if args.single:
        result["single"] = _one_by_one(module.enqueue_one, args.single, args.max_seconds)
    if args.transaction:
        result["transaction"] = _one_by_one(
            module.enqueue_one, args.transaction, args.max_seconds, around=transaction.atomic()
        )
    if args.bulk and hasattr(module, "enqueue_bulk"):
        module.enqueue_bulk(100)  # warm the bulk path too
        started = time.perf_counter()
        module.enqueue_bulk(args.bulk)
        result["bulk"] = args.bulk / (time.perf_counter() - started)
    if args.dedupe and hasattr(module, "enqueue_one_dedupe"):
        result["dedupe"] = _one_by_one(module.enqueue_one_dedupe, args.dedupe, args.max_seconds)
    return result


def measure_latency(module: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """Enqueue ``jobs`` record_start jobs ``interval`` apart (autocommit: each is visible
    when enqueue returns) and wait for the worker to have started all of them.

    Latency of a job = its handler's start time - the time its enqueue call returned.
    """
    ids = range(args.first_id, args.first_id + args.jobs)
    enqueued: dict[int, float] = {}
    began = time.monotonic()
    for k, i in enumerate(ids):
        delay = began + k * args.interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        module.enqueue_record(i)
        enqueued[i] = time.time()
    deadline = time.monotonic() + args.timeout
    started: dict[int, float] = {}
    while time.monotonic() < deadline:
        started = _read_starts(args.file, enqueued)
        if len(started) == len(enqueued):
            break
        time.sleep(0.05)
    latencies = sorted((started[i] - enqueued[i]) * 1000 for i in started)
    return {
        "jobs": args.jobs,
        "started": len(latencies),
        "p50_ms": _percentile(latencies, 50),
        "p95_ms": _percentile(latencies, 95),
        "max_ms": latencies[-1] if latencies else None,
        "mean_ms": statistics.fmean(latencies) if latencies else None,
    }


def _read_starts(path: str, wanted: dict[int, float]) -> dict[int, float]:
    if not os.path.exists(path):
        return {}
    starts: dict[int, float] = {}
    with open(path) as lines:
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and int(parts[0]) in wanted:
                starts.setdefault(int(parts[0]), float(parts[1]))
    return starts


def _percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of sorted values."""
    if not values:
        return None
    rank = max(1, -(-len(values) * pct // 100))  # ceil
    return values[int(rank) - 1]
