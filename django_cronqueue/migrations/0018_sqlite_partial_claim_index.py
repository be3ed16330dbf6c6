"""SQLite: the claim index covers the pending rows only, as on PostgreSQL (0014).

SQLite uses a partial index only for a query whose WHERE spells the index's condition out
as a literal; every claim statement now does (``status = 'pending' AND blocked = FALSE``,
``claiming.base.due_filter``), so the claim walks an index the size of the backlog
however many finished rows the table keeps. The other indexes stay whole: the ORM's
queries on them bind the status as a parameter, which SQLite cannot match against an
index's condition.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

NAME = "cronqueue_job_claim"
COLUMNS = "status, blocked, priority DESC, run_at, id"


def _recreate(schema_editor: BaseDatabaseSchemaEditor, where: str) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}"')
    schema_editor.execute(f'CREATE INDEX "{NAME}" ON "django_cronqueue_job" ({COLUMNS}){where}')


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _recreate(schema_editor, " WHERE status = 'pending'")


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _recreate(schema_editor, "")


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0017_history_tables")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
