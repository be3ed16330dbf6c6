"""PostgreSQL: vacuum no longer cuts the job table's empty end (``vacuum_truncate``).

A vacuum that finds empty pages at the end of a table gives them back to the operating
system, and to cut them it takes an ``ACCESS EXCLUSIVE`` lock on the table, which every
claim, completion and enqueue waits behind. On a queue table those pages are filled
again within seconds: the lock buys nothing but a pause of the drain. Kept, the pages are
reused by the next rows; ``VACUUM (TRUNCATE true)`` run by hand still gives them back.

PostgreSQL only; the tables a day of history moves into are dropped whole, not cut.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def _alter(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor, change: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("django_cronqueue", "Job")._meta.db_table)
    schema_editor.execute(f"ALTER TABLE {table} {change}")


def keep_pages(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _alter(apps, schema_editor, "SET (vacuum_truncate = false)")


def cut_pages(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _alter(apps, schema_editor, "RESET (vacuum_truncate)")


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0023_mysql_history_partition")]

    operations = [migrations.RunPython(keep_pages, cut_pages, elidable=False)]
