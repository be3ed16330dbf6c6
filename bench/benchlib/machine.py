"""The machine, the database servers and the code under test, for the record."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sqlite3
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from . import REPO_DIR
from .db import MYSQL, PG, recreate  # noqa: F401  (re-exported for run.py)

DISTRIBUTIONS = [
    "django-cronqueue", "Django", "psycopg", "psycopg-binary", "django-tasks-db",
    "procrastinate", "django-q2", "mysqlclient", "psutil",
]  # fmt: skip


def _pg_ready() -> bool:
    ready = shutil.which("pg_isready")
    command = [ready or "pg_isready", "-q", "-h", PG["host"], "-p", str(PG["port"])]
    return subprocess.run(command).returncode == 0


def _mariadb_ready() -> bool:
    try:
        import MySQLdb

        MySQLdb.connect(**MYSQL).close()
        return True
    except Exception:
        return False


def ensure_services(*, want_mariadb: bool) -> str | None:
    """Start PostgreSQL (and MariaDB) if they are down, as scripts/test does.

    Returns why MariaDB cannot be used, or None. Exits if PostgreSQL is not there.
    """
    if not _pg_ready() and Path("/etc/postgresql").is_dir():
        version = sorted(os.listdir("/etc/postgresql"))[0]
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"])
        for _ in range(30):
            if _pg_ready():
                break
            time.sleep(1)
    if not _pg_ready():
        raise SystemExit(f"bench: PostgreSQL is not reachable at {PG['host']}:{PG['port']}")
    if not want_mariadb:
        return None
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        return "mysqlclient is not installed in the venv"
    if not _mariadb_ready() and Path("/usr/sbin/mariadbd").exists():
        subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background",
                        "--exec", "/usr/sbin/mariadbd"])  # fmt: skip
        for _ in range(30):
            if _mariadb_ready():
                break
            time.sleep(1)
    return None if _mariadb_ready() else f"MariaDB is not reachable at {MYSQL['host']}"


def describe() -> dict[str, Any]:
    import psutil
    import psycopg

    with psycopg.connect(dbname="postgres", **PG) as connection:
        pg_version = connection.execute("SHOW server_version").fetchone()[0]
        pg_settings = {
            name: connection.execute(f"SHOW {name}").fetchone()[0]
            for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections")
        }
    mariadb = None
    if _mariadb_ready():
        import MySQLdb

        connection = MySQLdb.connect(**MYSQL)
        cursor = connection.cursor()
        cursor.execute("SELECT VERSION()")
        mariadb = cursor.fetchone()[0]
        connection.close()
    with open("/proc/cpuinfo") as cpuinfo:
        models = [
            line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
        ]
    cpu = models[0].strip() if models else platform.processor()
    memory = psutil.virtual_memory().total / 2**30
    return {
        "machine": f"{os.cpu_count()} CPUs ({cpu}), {memory:.1f} GiB",
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": pg_version,
        "postgresql_settings": pg_settings,
        "mariadb": mariadb,
        "sqlite": sqlite3.sqlite_version,
        "loadavg_at_end": os.getloadavg(),
    }


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def checkout() -> dict[str, Any]:
    """Which django-cronqueue code ran: the commit plus a hash of uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True)
        return done.stdout.strip()

    diff = git("diff", "HEAD", "--", "django_cronqueue")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "django_cronqueue")
    return {
        "commit": git("rev-parse", "HEAD"),
        "package_modified": bool(diff or untracked),
        "package_diff_sha256": hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else None,
        "package_untracked": untracked.splitlines(),
    }


def short(checkout: dict[str, Any]) -> str:
    """``1fc2a1e`` or ``1fc2a1e + uncommitted changes``."""
    text = checkout["commit"][:7]
    return text + " + uncommitted changes" if checkout["package_modified"] else text
