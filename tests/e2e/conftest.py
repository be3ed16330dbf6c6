"""Real ``runjobs`` processes against the test database."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


class Runjobs:
    """Starts ``django-admin runjobs`` processes on the database of the running test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.processes: list[subprocess.Popen] = []

    def start(self, *args: str, settings: dict | None = None) -> subprocess.Popen:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(ROOT),
            "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
            "CRONQUEUE_TEST_SETTINGS": json.dumps(settings or {}),
        }
        log = open(self.tmp_path / f"runjobs-{len(self.processes)}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "runjobs", *args],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def log(self, index: int) -> str:
        return (self.tmp_path / f"runjobs-{index}.log").read_text()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def runjobs(tmp_path):
    runner = Runjobs(tmp_path)
    yield runner
    runner.stop_all()


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
