"""PostgreSQL: the claim and lease indexes cover only the rows they are read for.

Every claim moves a row pending -> running and every completion running -> finished;
neither update can be HOT (indexed columns change), so each new row version gets an entry
in every index of the job table. The claim index is only read for pending rows and the
lease index only for running ones: made partial (same names, same columns), they take an
entry only for those, two fewer index insertions per job run, and stay small however long
the history. Django's model state keeps describing them as plain indexes (the queries are
the same); MariaDB has no partial indexes and keeps the plain ones; SQLite too, because it
uses a partial index only when a query spells out the index's condition as a literal, and
Django binds values as parameters there.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

INDEXES = {
    # name: (columns, the rows it covers)
    "cronqueue_job_claim": ("status, blocked, priority DESC, run_at, id", "status = 'pending'"),
    "cronqueue_job_lease": ("status, locked_until", "status = 'running'"),
}


def _recreate(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor, partial: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = apps.get_model("django_cronqueue", "Job")._meta.db_table
    for name, (columns, condition) in INDEXES.items():
        where = f" WHERE {condition}" if partial else ""
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
        schema_editor.execute(f"CREATE INDEX {quote(name)} ON {quote(table)} ({columns}){where}")


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _recreate(apps, schema_editor, partial=True)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _recreate(apps, schema_editor, partial=False)


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0013_worker_job_names")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
