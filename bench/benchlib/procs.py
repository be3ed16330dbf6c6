"""Worker processes: start them, watch them, measure them, and always stop them.

Each worker is started in its own session (process group), so that stopping it also
stops whatever it forked (a django-q2 cluster is a tree of processes): SIGTERM to the
worker itself (it stops its own children; signalling them too would break a cluster's
orderly shutdown), then SIGKILL to the whole group once the worker has exited or the
grace period is over, so that nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

STOP_GRACE = 15.0  # seconds a worker gets to exit after SIGTERM

_live: set[subprocess.Popen] = set()  # every worker not yet stopped, for stop_all()


class Workers:
    """``with Workers(commands, env, log) as workers:`` one process per command."""

    def __init__(self, commands: list[list[str]], *, env: dict[str, str], cwd: Path, log: Path):
        self.commands, self.env, self.cwd, self.log = commands, env, cwd, log
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> Workers:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            for command in self.commands:
                process = subprocess.Popen(
                    command,
                    cwd=self.cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.processes.append(process)
                _live.add(process)
        return self

    def __exit__(self, *exc: object) -> None:
        stop(self.processes)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"worker {' '.join(process.args[-3:])} exited with {process.returncode}; "
                    f"see {self.log}"
                )


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.1, deadline - time.monotonic()))
    for process in processes:
        # The leader may be gone while its children (a cluster's) still run: kill the group.
        _signal_group(process, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
        _live.discard(process)


def stop_all() -> None:
    stop(list(_live))


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)  # the group this process leads (start_new_session)


@dataclass
class Usage:
    cpu_seconds: float  # user + system, summed over the process trees
    rss_bytes: int
    pss_bytes: int  # proportional set size: shared pages split between the sharers
    processes: int


def usage(pids: list[int]) -> Usage:
    """CPU time and memory of these processes and all their descendants."""
    cpu = 0.0
    rss = pss = count = 0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            try:
                times = process.cpu_times()
                memory = process.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            cpu += times.user + times.system
            rss += memory.rss
            pss += getattr(memory, "pss", memory.rss)
            count += 1
    return Usage(cpu, rss, pss, count)
