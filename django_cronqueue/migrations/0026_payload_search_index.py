"""PostgreSQL: a GIN index on the job payload (``jsonb_path_ops``), which answers the job
list's ``key:value`` search (``payload @? '$."order"."id" ? (@ == 42)'``) without reading
every row. Built ``CONCURRENTLY``, so that enqueues and claims go on while it is made
on a big table. MariaDB and SQLite have no index that serves such a search.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

CREATE = (
    'CREATE INDEX CONCURRENTLY IF NOT EXISTS "cronqueue_job_payload" '
    'ON "django_cronqueue_job" USING gin (payload jsonb_path_ops)'
)
DROP = 'DROP INDEX CONCURRENTLY IF EXISTS "cronqueue_job_payload"'


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("django_cronqueue", "0025_fair_turns_by_id")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
