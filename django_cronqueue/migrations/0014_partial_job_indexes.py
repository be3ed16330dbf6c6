"""PostgreSQL: the claim, lease, flow and dedupe-key indexes cover only the rows they are
read for.

Every claim moves a row pending -> running and every completion running -> finished;
neither update can be HOT (indexed columns change), so each new row version gets an entry
in every index of the job table. The claim index is read for pending rows only, the lease
and flow indexes for running rows only, the dedupe-key and batch indexes for rows with a
key or a batch only:
made partial (same names, same columns), they take twelve fewer entries over the life of
a job without a dedupe key or a batch (eight of them in its claim and completion), and the claim index
stays the size of the backlog however long the history. Each query that reads one of them
implies its condition, and Django's model state keeps describing them as plain indexes.
MariaDB has no partial indexes and keeps the plain ones; SQLite too, because it uses a
partial index only for a query that spells the index's condition out as a literal, and
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
    # Flow control counts running rows per (name, limit_key).
    "cronqueue_job_flow": ("status, name, limit_key", "status = 'running'"),
    # Looked up by a given key only (the admin's search); most jobs have none.
    "cronqueue_job_dedupe_key": ("dedupe_key", "dedupe_key IS NOT NULL"),
}


def _recreate(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor, partial: bool) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    job = apps.get_model("django_cronqueue", "Job")
    table = job._meta.db_table
    indexes = dict(INDEXES)
    # The index Django made for the foreign key to a workflow's batch (its name is
    # derived from the table's): read by batch only; most jobs belong to none.
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    for name, about in constraints.items():
        if about["index"] and about["columns"] == ["batch_id"] and not about["unique"]:
            indexes[name] = ("batch_id", "batch_id IS NOT NULL")
    for name, (columns, condition) in indexes.items():
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
