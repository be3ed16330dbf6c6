"""Real ``runjobs`` processes on the test database, shared by the end-to-end tiers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


class Runjobs:
    """Starts ``python -m django runjobs`` processes on the test database."""

    def __init__(self, tmp_path: Path, settings_module: str = "tests.settings") -> None:
        self.tmp_path = tmp_path
        self.settings_module = settings_module
        self.processes: list[subprocess.Popen] = []

    def start(
        self,
        *args: str,
        settings: dict | None = None,
        env: dict[str, str] | None = None,
        command: str = "runjobs",
        module: str = "django",
        new_session: bool = False,
    ) -> subprocess.Popen:
        full_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": self.settings_module,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
            "CRONQUEUE_TEST_SETTINGS": json.dumps(settings or {}),
            **(env or {}),
        }
        index = len(self.processes)
        log = open(self.tmp_path / f"runjobs-{index}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", module, command, *args],
            env=full_env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,  # a process group of its own: signals reach its children
        )
        process.index = index  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def log(self, process: subprocess.Popen | int) -> str:
        index = process if isinstance(process, int) else process.index  # type: ignore[attr-defined]
        return (self.tmp_path / f"runjobs-{index}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(self.log(index) for index in range(len(self.processes)))

    def stop(self, process: subprocess.Popen, timeout: float = 30) -> int:
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout)

    def dump_stacks(self) -> None:
        """Every live process writes its threads' stacks to its log (see tests/settings.py)."""
        alive = [process for process in self.processes if process.poll() is None]
        for process in alive:
            process.send_signal(signal.SIGUSR2)
        if alive:
            time.sleep(1)

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
