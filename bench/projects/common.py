"""Settings shared by every benchmark project: what a plain production site has.

DEBUG is off (no query log), CONN_MAX_AGE is Django's default (0: a connection per
request) unless BENCH_CONN_MAX_AGE says otherwise ("none" = persistent), and the database
comes from BENCH_DB / BENCH_DB_NAME, set by bench/run.py.
"""

from __future__ import annotations

import os

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
BASE_APPS = ["django.contrib.contenttypes", "django.contrib.auth"]


def conn_max_age() -> int | None:
    value = os.environ.get("BENCH_CONN_MAX_AGE", "0")
    return None if value.lower() == "none" else int(value)


def database() -> dict:
    vendor = os.environ.get("BENCH_DB", "postgres")
    name = os.environ["BENCH_DB_NAME"]
    if vendor == "postgres":
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": os.environ.get("PGUSER", "postgres"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
            "CONN_MAX_AGE": conn_max_age(),
        }
    if vendor == "mariadb":
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": name,
            "USER": os.environ.get("MYSQL_USER", "root"),
            "PASSWORD": os.environ.get("MYSQL_PASSWORD", ""),
            "HOST": os.environ.get("MYSQL_HOST", "127.0.0.1"),
            "PORT": os.environ.get("MYSQL_PORT", "3306"),
            "OPTIONS": {"charset": "utf8mb4"},
            "CONN_MAX_AGE": conn_max_age(),
        }
    if vendor == "sqlite":
        # What docs/workers.md recommends: WAL and a busy timeout.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
            "CONN_MAX_AGE": conn_max_age(),
        }
    raise ValueError(f"BENCH_DB must be postgres, mariadb or sqlite, got {vendor!r}")
