"""The job bodies every system runs, so that all of them run the same code.

``noop`` does nothing. ``record_start`` appends ``"<n> <time.time()>"`` to the file named
by BENCH_LATENCY_FILE (one write with O_APPEND, so lines from several processes do not
mix); the pickup-latency measurement reads it back.
"""

from __future__ import annotations

import os
import time


def noop(n: int) -> None:
    return None


def record_start(n: int) -> None:
    started = time.time()
    path = os.environ.get("BENCH_LATENCY_FILE")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {started:.6f}\n".encode())
    finally:
        os.close(fd)
