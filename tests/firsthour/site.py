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
        vendor: str = "sqlite",
    ) -> None:
        self.db = tmp_path / "db.sqlite3"
        self.vendor = vendor
        server_db = {}
        if vendor != "sqlite":
            # One fresh database per test directory, created by the first Site of the test.
            self.db_name = f"{os.environ.get('CRONQUEUE_TEST_DB_NAME', 'cq')}_firsthour"
            marker = tmp_path / f"{vendor}.created"
            if not marker.exists():
                fresh_database(vendor, self.db_name)
                marker.touch()
            server_db = {
                "FIRSTHOUR_PG" if vendor == "postgres" else "FIRSTHOUR_MARIADB": self.db_name
            }
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.firsthour.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "FIRSTHOUR_DB": str(self.db),
            "FIRSTHOUR_APPS_FIRST": ",".join(apps_first),
            "FIRSTHOUR_CRONQUEUE": json.dumps(cronqueue or {}),
            "FIRSTHOUR_LOGGING": json.dumps(logging) if logging else "",
            **server_db,
        }

    @property
    def described(self) -> str:
        """How the banner names the database."""
        if self.vendor == "sqlite":
            return f"sqlite '{self.db}'"
        return f"{'postgresql' if self.vendor == 'postgres' else 'mysql'} '{self.db_name}'"

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


def fresh_database(vendor: str, name: str) -> None:
    """Drop and create the database ``name`` on the test run's server."""
    if vendor == "postgres":
        host = [
            "-h",
            os.environ.get("PGHOST", "127.0.0.1"),
            "-U",
            os.environ.get("PGUSER", "postgres"),
        ]
        subprocess.run(["dropdb", *host, "--if-exists", "--force", name], check=True)
        subprocess.run(["createdb", *host, name], check=True)
    else:
        sql = f"DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name} CHARACTER SET utf8mb4"
        host = os.environ.get("MYSQL_HOST", "127.0.0.1")
        user = os.environ.get("MYSQL_USER", "root")
        subprocess.run(["mysql", "-h", host, "-u", user, "-e", sql], check=True)
