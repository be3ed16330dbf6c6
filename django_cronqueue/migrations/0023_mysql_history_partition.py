"""MariaDB and MySQL: the job table in two partitions, ``hot`` and ``history``
(``django_cronqueue.history.archive.mysql``).

The table is partitioned by LIST on a new column, ``archived`` (0 for every row here: the
finished rows move to ``history`` in the workers' housekeeping batches, as on
PostgreSQL). InnoDB keeps no foreign key on a partitioned table, so those of the job
table and of the tables that point at it are dropped first, and every unique key takes
the partition column: the primary key becomes ``(id, archived)`` and each unique
constraint of the job table gets ``archived`` as its last column. The ALTER copies the
table once, every row kept; it takes as long as a copy of the table takes. Going back
merges the partitions, restores the keys and the foreign keys, and drops the column.
PostgreSQL and SQLite: nothing.
"""

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "django_cronqueue_job"
# The job table's unique constraints, by name, and their columns (models.Job.Meta).
UNIQUE = {
    "cronqueue_job_unique_active_dedupe": ("name", "active_dedupe_key"),
    "cronqueue_job_unique_schedule_occurrence": ("name", "scheduled_for", "schedule"),
    "cronqueue_job_unique_window_dedupe": ("name", "window_dedupe_key"),
}
# (model, field): the foreign keys of and into the job table.
FOREIGN_KEYS = [
    ("Job", "batch"),
    ("JobDependency", "upstream"),
    ("JobDependency", "downstream"),
    ("Batch", "then_job"),
    ("Batch", "finally_job"),
]


def _unique_keys(with_archived: bool) -> str:
    tail = ", archived" if with_archived else ""
    return ", ".join(
        f"DROP INDEX {name}, ADD UNIQUE INDEX {name} ({', '.join(columns)}{tail})"
        for name, columns in UNIQUE.items()
    )


PARTITIONED = (
    f"ALTER TABLE {TABLE} ADD COLUMN archived tinyint(1) NOT NULL DEFAULT 0, "
    f"DROP PRIMARY KEY, ADD PRIMARY KEY (id, archived), {_unique_keys(True)} "
    "PARTITION BY LIST (archived) "
    "(PARTITION hot VALUES IN (0), PARTITION history VALUES IN (1))"
)
MERGED = (
    f"ALTER TABLE {TABLE} DROP PRIMARY KEY, ADD PRIMARY KEY (id), {_unique_keys(False)}, "
    "DROP COLUMN archived"
)


def _fields(apps: StateApps) -> list[Any]:
    return [
        apps.get_model("django_cronqueue", model)._meta.get_field(field)
        for model, field in FOREIGN_KEYS
    ]


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    for field in _fields(apps):
        table = field.model._meta.db_table
        with connection.cursor() as cursor:
            constraints = connection.introspection.get_constraints(cursor, table)
        for name, constraint in constraints.items():
            if constraint["foreign_key"] and constraint["columns"] == [field.column]:
                schema_editor.execute(f"ALTER TABLE {table} DROP FOREIGN KEY {name}")
    schema_editor.execute(PARTITIONED)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    schema_editor.execute(f"ALTER TABLE {TABLE} REMOVE PARTITIONING")
    schema_editor.execute(MERGED)
    for field in _fields(apps):
        # Named and made as Django's AddField makes a foreign key (a method its stubs lack).
        create = schema_editor._create_fk_sql  # type: ignore[attr-defined]
        schema_editor.execute(create(field.model, field, "_fk_%(to_table)s_%(to_column)s"))


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back anyway
    dependencies = [("django_cronqueue", "0022_claim_index_by_status_expression")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
