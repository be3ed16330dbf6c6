"""On MySQL and MariaDB, compare job names and dedupe keys byte for byte.

Their default collations ignore case and trailing spaces, so "Key" and "key " would
be one dedupe key and a worker's ``name IN (...)`` could claim a row of another job.
A binary NO PAD collation makes these columns compare exactly, as on PostgreSQL and
SQLite. Other databases are left alone.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

COLUMNS = [
    ("django_cronqueue_job", "name", "NOT NULL"),
    ("django_cronqueue_job", "dedupe_key", "NULL"),
    ("django_cronqueue_job", "active_dedupe_key", "NULL"),
    ("django_cronqueue_namelock", "name", "NOT NULL"),
    ("django_cronqueue_cronschedule", "name", "NOT NULL"),
]


def exact_collation(schema_editor: BaseDatabaseSchemaEditor) -> str | None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return None
    is_mariadb = getattr(connection, "mysql_is_mariadb", False)
    return "utf8mb4_nopad_bin" if is_mariadb else "utf8mb4_0900_bin"


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    collation = exact_collation(schema_editor)
    if collation is None:
        return
    for table, column, nullable in COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE {table} MODIFY {column} varchar(200) "
            f"CHARACTER SET utf8mb4 COLLATE {collation} {nullable}"
        )


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back anyway

    dependencies = [("django_cronqueue", "0001_initial")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False)]
