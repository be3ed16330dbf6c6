"""PostgreSQL: the function behind the history tables' trigger (``django_cronqueue.history.archive``).

The history tables themselves are made by the workers' housekeeping as rows come to fill
them, and the finished rows already in the job table move there in its batches: this
migration changes no row and locks the job table for no longer than a function takes to
create. Going back moves every archived row into the job table and drops the history
tables. Other vendors: nothing.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "django_cronqueue_job"
FUNCTION = "django_cronqueue_job_reopen"

# A history table's row given a status that is not finished (a retry) goes back to the
# job table, where the claim reads: deleted from the table it is in, inserted as updated.
CREATE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DELETE FROM %I.%I WHERE id = $1', TG_TABLE_SCHEMA, TG_TABLE_NAME)
        USING NEW.id;
    INSERT INTO {TABLE} SELECT (NEW).*;
    RETURN NULL;
END
$$
"""


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE_FUNCTION, None)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        children = [row[0] for row in cursor.fetchall()]
    for child in children:
        schema_editor.execute(f'INSERT INTO {TABLE} SELECT * FROM ONLY "{child}"')
        schema_editor.execute(f'DROP TABLE "{child}"')
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")


class Migration(migrations.Migration):
    dependencies = [("django_cronqueue", "0016_finished_counts")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
