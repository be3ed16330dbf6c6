"""PostgreSQL: the claim index is the only way a claim can reach the pending rows.

The claim tested ``status = 'pending'``, which the indexes on ``(queue, status)`` and
``(name, status, queue)`` can answer too, read whole for their second column. Small (their
few distinct keys deduplicate), they look cheaper than the claim index once an ANALYZE
saw few pending rows, and the prepared claim keeps that plan as a backlog grows: each
claim then reads every pending row (and while a transaction is held open, every pending
version since it began) and sorts them all, the drain falls to a few dozen jobs a
second and the backlog grows until the next ANALYZE. The claim now compares the status
as an expression, ``status || '' = 'pending'``, that no index on ``status`` can read, and
the claim index's condition is written with the same expression, so that the planner
still proves the claim within it. MariaDB and SQLite keep theirs.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

DROP = 'DROP INDEX IF EXISTS "cronqueue_job_claim"'
BY_STATUS_EXPRESSION = (
    'CREATE INDEX "cronqueue_job_claim" ON "django_cronqueue_job" (priority DESC, run_at, id) '
    "WHERE status || '' = 'pending' AND blocked = FALSE"
)
BY_STATUS = (  # as 0020 made it
    'CREATE INDEX "cronqueue_job_claim" ON "django_cronqueue_job" (priority DESC, run_at, id) '
    "WHERE status = 'pending' AND blocked = FALSE"
)


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(BY_STATUS_EXPRESSION)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
        schema_editor.execute(BY_STATUS)


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0021_finished_index_of_finished_rows")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
