"""A row (a job's by default) held by another transaction, on a connection of its own,
while the test's own statements wait two seconds for a row lock at most (so that one that
waits fails instead of hanging)."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

from django_cronqueue.models import Job

LOCK_WAIT = {
    "postgresql": "SET lock_timeout = '2s'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 2",
}


@contextmanager
def row_held_elsewhere(pk: int, model: type[Model] = Job) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(LOCK_WAIT[connection.vendor])
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {model._meta.db_table} WHERE id = %s FOR UPDATE", [pk])
        yield
    finally:
        other.rollback()
        other.close()
