"""The orchestrator's own connection to a system's database (no Django here).

It creates the databases, empties the tables between measurements, runs ANALYZE after a
fill, and polls how many jobs are finished while workers drain.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

PG = {
    "host": os.environ.get("PGHOST", "127.0.0.1"),
    "port": int(os.environ.get("PGPORT", "5432")),
    "user": os.environ.get("PGUSER", "postgres"),
    "password": os.environ.get("PGPASSWORD", ""),
}
MYSQL = {
    "host": os.environ.get("MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("MYSQL_PORT", "3306")),
    "user": os.environ.get("MYSQL_USER", "root"),
    "password": os.environ.get("MYSQL_PASSWORD", ""),
}


class Database:
    def __init__(self, vendor: str, name: str) -> None:
        self.vendor, self.name = vendor, name
        if vendor == "postgres":
            import psycopg

            self.connection: Any = psycopg.connect(dbname=name, autocommit=True, **PG)
        elif vendor == "mariadb":
            import MySQLdb

            self.connection = MySQLdb.connect(database=name, charset="utf8mb4", **MYSQL)
            self.connection.autocommit(True)
        elif vendor == "sqlite":
            self.connection = sqlite3.connect(name, isolation_level=None, timeout=20)
        else:
            raise ValueError(vendor)

    def execute(self, sql: str) -> None:
        cursor = self.connection.cursor()
        cursor.execute(sql)
        cursor.close()

    def row(self, sql: str) -> tuple[Any, ...]:
        cursor = self.connection.cursor()
        cursor.execute(sql)
        result = cursor.fetchone()
        cursor.close()
        return tuple(result)

    def scalar(self, sql: str) -> Any:
        return self.row(sql)[0]

    def reset(self, tables: tuple[str, ...]) -> None:
        """Empty the tables (and their indexes): each measurement starts from scratch."""
        if self.vendor == "postgres":
            self.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
        elif self.vendor == "mariadb":
            self.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in tables:
                self.execute(f"TRUNCATE TABLE {table}")
            self.execute("SET FOREIGN_KEY_CHECKS = 1")
        else:
            for table in tables:
                self.execute(f"DELETE FROM {table}")
            self.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def analyze(self, tables: tuple[str, ...]) -> None:
        """Planner statistics for the freshly filled tables, as a live site would have."""
        if self.vendor == "postgres":
            self.execute(f"ANALYZE {', '.join(tables)}")
        elif self.vendor == "mariadb":
            cursor = self.connection.cursor()
            cursor.execute(f"ANALYZE TABLE {', '.join(tables)}")
            cursor.fetchall()  # it answers with a result set
            cursor.close()
        else:
            self.execute("ANALYZE")

    def close(self) -> None:
        self.connection.close()


def recreate(vendor: str, name: str) -> None:
    """Drop and create an empty database (a file, for SQLite)."""
    if vendor == "postgres":
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **PG) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
    elif vendor == "mariadb":
        import MySQLdb

        connection = MySQLdb.connect(charset="utf8mb4", **MYSQL)
        try:
            cursor = connection.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            connection.close()
    else:
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{name}{suffix}").unlink(missing_ok=True)


def checkpoint_postgres() -> None:
    """Flush PostgreSQL's dirty pages now, so that the next measurement does not run into
    a checkpoint that an earlier one's writes brought on (commit-bound figures such as
    single enqueue calls drop by a third during one)."""
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **PG) as connection:
        connection.execute("CHECKPOINT")
