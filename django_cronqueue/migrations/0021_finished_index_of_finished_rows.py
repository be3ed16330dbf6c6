"""PostgreSQL: the index of finished rows holds finished rows only.

``cronqueue_job_finished`` (status, finished_at) is read for finished rows (the move to
history, pruning, the counts). Whole, it also held an entry for every pending and running
version of every job: while a transaction is held open none of those can be removed, and
with few live pending rows a claim from the head of the queue could plan to read them
through it (``status = 'pending'``, then a sort) and walk millions. Partial on the finished
statuses, it is no longer a way to pending or running rows, and a claim and a completion
each write one index entry fewer. MariaDB and SQLite keep the whole index.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

DROP = 'DROP INDEX IF EXISTS "cronqueue_job_finished"'
OF_FINISHED_ROWS = (
    'CREATE INDEX "cronqueue_job_finished" ON "django_cronqueue_job" (status, finished_at) '
    "WHERE status IN ('succeeded', 'failed', 'cancelled')"
)
WHOLE = 'CREATE INDEX "cronqueue_job_finished" ON "django_cronqueue_job" (status, finished_at)'


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(OF_FINISHED_ROWS)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(WHOLE)


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0020_claim_index_in_claim_order")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
