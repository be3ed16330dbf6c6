"""Runs ``python -m django <command>`` on the first-hour site (tests/firsthour)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.processes import ROOT


class Site:
    def __init__(
        self,
        tmp_path: Path,
        *,
        apps_first: tuple[str, ...] = (),
        cronqueue: dict[str, Any] | None = None,
        logging: dict[str, Any] | None = None,
    ) -> None:
        self.db = tmp_path / "db.sqlite3"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.firsthour.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "FIRSTHOUR_DB": str(self.db),
            "FIRSTHOUR_APPS_FIRST": ",".join(apps_first),
            "FIRSTHOUR_CRONQUEUE": json.dumps(cronqueue or {}),
            "FIRSTHOUR_LOGGING": json.dumps(logging) if logging else "",
        }

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "django", *args],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def shell(self, code: str) -> str:
        """Run ``code`` in ``manage.py shell``; returns its stdout."""
        done = self.manage("shell", "-c", code)
        assert done.returncode == 0, done.stderr
        return done.stdout
