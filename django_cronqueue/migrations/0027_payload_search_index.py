"""PostgreSQL: a GIN index on the job payload (``jsonb_path_ops``), which answers the job
list's ``key:value`` search (``payload @? '$."order"."id" ? (@ == 42)'``) without reading
every row: on the job table and on each history table that inherits from it (the
archive gives the tables it makes from now on the same index). Built ``CONCURRENTLY``,
so that enqueues, claims and the archive go on while it is made on a big table.
MariaDB and SQLite have no index that serves such a search.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

JOB_TABLE = "django_cronqueue_job"
SUFFIX = "_payload"


def tables(schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
    """The job table and its history tables."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass ORDER BY 1",
            [JOB_TABLE],
        )
        return [JOB_TABLE, *(row[0] for row in cursor.fetchall())]


def index_name(table: str) -> str:
    # The job table's is named as the others of its table are: cronqueue_job_...
    return "cronqueue_job_payload" if table == JOB_TABLE else table + SUFFIX


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for table in tables(schema_editor):
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(index_name(table))} "
            f"ON {quote(table)} USING gin (payload jsonb_path_ops)"
        )


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for table in tables(schema_editor):
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(index_name(table))}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("django_cronqueue", "0026_job_attempts")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
