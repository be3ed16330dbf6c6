"""What the orchestrator needs to know about a system: plain data, no Django.

Each ``projects/<system>/driver.py`` builds one ``System`` (or one per database for
django-cronqueue) at import time, and holds the Django-side functions that the
``benchlib.driver`` command line calls inside a configured Django process.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Drain:
    """One way of running workers for the drain figure.

    ``role``: ``"default"`` (one process at the system's defaults), ``"one"`` (one
    process, another setting: a candidate for the best one-process figure) or ``"two"``
    (two processes).
    """

    key: str
    label: str
    role: str
    args: tuple[str, ...] = ()
    processes: int = 1
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class System:
    key: str  # "cronqueue", "tasksdb", "cronqueue_sqlite", ...
    label: str  # column header
    distribution: str  # PyPI name, for its version
    module: str  # "projects.cronqueue.driver": the driver module (python -m)
    settings: str  # DJANGO_SETTINGS_MODULE
    vendor: str  # "postgres", "sqlite" or "mariadb"
    database: str  # database name (a file path for SQLite)
    worker: tuple[str, ...]  # manage.py command and arguments of one default worker
    drains: tuple[Drain, ...]
    tables: tuple[str, ...]  # emptied between measurements
    done_sql: str  # one number: jobs finished so far; "{n}" is the number queued
    window_sql: str | None = None  # (jobs finished, seconds from first start to last finish)
    enqueue_modes: tuple[str, ...] = ("single", "transaction")
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def environment(self) -> dict[str, str]:
        return {
            "DJANGO_SETTINGS_MODULE": self.settings,
            "BENCH_DB": self.vendor,
            "BENCH_DB_NAME": self.database,
            **self.env,
        }


def window_sql(vendor: str, table: str, start: str, finish: str, where: str) -> str:
    """Finished jobs and the seconds between the first start and the last finish."""
    if vendor == "postgres":
        span = f"EXTRACT(EPOCH FROM MAX({finish}) - MIN({start}))"
    elif vendor == "mariadb":
        span = f"TIMESTAMPDIFF(MICROSECOND, MIN({start}), MAX({finish})) / 1e6"
    elif vendor == "sqlite":
        span = f"(JULIANDAY(MAX({finish})) - JULIANDAY(MIN({start}))) * 86400.0"
    else:
        raise ValueError(vendor)
    return f"SELECT COUNT(*), {span} FROM {table} WHERE {where}"
