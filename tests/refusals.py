"""A database that refuses some values of a job column, as a limit no check of
django-cronqueue foresaw would: a CHECK constraint (PostgreSQL, MariaDB) or a trigger
(SQLite, which cannot add a constraint to an existing table), on the test database.

``refusing("result", "refuse-me")`` makes every write of a ``result`` whose text holds
``refuse-me`` fail with an IntegrityError, in this process and in the ``runjobs``
processes a test starts, until the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection

from django_cronqueue.models import Job

NAME = "cronqueue_test_refusal"


@contextlib.contextmanager
def refusing(column: str, marker: str) -> Iterator[None]:
    table = Job._meta.db_table
    pattern = f"%{marker}%"
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                f"CREATE TRIGGER {NAME} BEFORE UPDATE OF {column} ON {table} "
                f"WHEN NEW.{column} LIKE '{pattern}' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
            drop = f"DROP TRIGGER {NAME}"
        else:
            text = f"{column}::text" if connection.vendor == "postgresql" else column
            cursor.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {NAME} "
                f"CHECK ({column} IS NULL OR {text} NOT LIKE '{pattern}')"
            )
            drop = f"ALTER TABLE {table} DROP CONSTRAINT {NAME}"
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(drop)
