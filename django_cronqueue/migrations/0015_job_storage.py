"""The job table under churn: lease renewals are HOT updates on PostgreSQL, and the table
is vacuumed as often as a queue table needs.

A heartbeat renews the lease of every running job (``locked_until``) every ``LEASE / 3``
seconds. With ``locked_until`` in an index, each renewal wrote a new entry in that index
(and, not being HOT, in every index covering a running row). The index of running rows
now holds their start instead (set by the claim, never by a renewal): a renewal changes
no indexed column, and PostgreSQL can keep the new row version in the same page with no
index entry at all (a heap-only tuple), provided the page has room. ``fillfactor`` leaves
that room: inserts fill a page only so far, the rest is kept for the updates of its rows.

A queue table is mostly dead rows passing through: every claim and every completion
leaves one behind. PostgreSQL's default autovacuum waits for a fifth of the table to be
dead (``autovacuum_vacuum_scale_factor`` 0.2) and sleeps between pages; on a table of a
few thousand live rows and a long history that is either too late or too slow. These
per-table settings vacuum it after a fixed number of dead rows, and at full speed.

PostgreSQL only. MariaDB's InnoDB purges old row versions by itself (no per-table knob),
and SQLite has no MVCC row versions.
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FILLFACTOR = 80
# (setting, value): dead rows are vacuumed after 2,000 of them plus 1% of the table, and
# the statistics the claim's plan depends on refreshed after 2,000 changed rows plus 2%.
AUTOVACUUM = (
    ("autovacuum_vacuum_scale_factor", "0.01"),
    ("autovacuum_vacuum_threshold", "2000"),
    ("autovacuum_vacuum_insert_scale_factor", "0.01"),
    ("autovacuum_vacuum_insert_threshold", "2000"),
    ("autovacuum_analyze_scale_factor", "0.02"),
    ("autovacuum_analyze_threshold", "2000"),
    ("autovacuum_vacuum_cost_delay", "0"),
)
STORAGE = (("fillfactor", str(FILLFACTOR)), *AUTOVACUUM)

# name: (columns, the rows it covers), as 0014 made them
OLD_RUNNING_INDEX = ("cronqueue_job_lease", "status, locked_until", "status = 'running'")
RUNNING_INDEX = ("cronqueue_job_running", "status, started_at", "status = 'running'")


def _postgresql(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _make_partial(
    apps: StateApps, schema_editor: BaseDatabaseSchemaEditor, index: tuple[str, str, str]
) -> None:
    """On PostgreSQL, ``index`` covers running rows only (as 0014 made the others)."""
    if not _postgresql(schema_editor):
        return
    name, columns, condition = index
    quote = schema_editor.quote_name
    table = apps.get_model("django_cronqueue", "Job")._meta.db_table
    schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
    schema_editor.execute(
        f"CREATE INDEX {quote(name)} ON {quote(table)} ({columns}) WHERE {condition}"
    )


def running_index_partial(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _make_partial(apps, schema_editor, RUNNING_INDEX)


def old_lease_index_partial(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _make_partial(apps, schema_editor, OLD_RUNNING_INDEX)


def set_storage(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not _postgresql(schema_editor):
        return
    table = schema_editor.quote_name(apps.get_model("django_cronqueue", "Job")._meta.db_table)
    options = ", ".join(f"{name} = {value}" for name, value in STORAGE)
    schema_editor.execute(f"ALTER TABLE {table} SET ({options})")


def reset_storage(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not _postgresql(schema_editor):
        return
    table = schema_editor.quote_name(apps.get_model("django_cronqueue", "Job")._meta.db_table)
    schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(name for name, _ in STORAGE)})")


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0014_partial_job_indexes")]

    operations = [
        # Backwards, the lease index comes back plain (RemoveIndex reversed): made partial
        # again here, as 0014 left it.
        migrations.RunPython(migrations.RunPython.noop, old_lease_index_partial, elidable=False),
        migrations.RemoveIndex(model_name="job", name="cronqueue_job_lease"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["status", "started_at"], name="cronqueue_job_running"),
        ),
        migrations.RunPython(running_index_partial, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(set_storage, reset_storage, elidable=False),
    ]
