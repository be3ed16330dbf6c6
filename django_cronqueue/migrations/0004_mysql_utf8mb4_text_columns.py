"""On MySQL and MariaDB, make every text column of the queue's tables utf8mb4.

Tables created in a utf8mb3 ("utf8") database got utf8mb3 text columns, apart from the
five that 0002 made utf8mb4 and the JSON columns (utf8mb4 text on MariaDB, no character
set on MySQL): a queue name with an emoji could not be enqueued, and a handler's error
holding one could not be recorded. Each text column that is not utf8mb4 yet becomes
utf8mb4, keeping its type, its NULL or NOT NULL, its default and its collation's rules
(utf8mb3_general_ci becomes utf8mb4_general_ci; a collation without a utf8mb4 twin
becomes utf8mb4's default). The tables' default character set follows, so that columns
added later are utf8mb4 too. A table that is utf8mb4 already is not touched (nothing is
rebuilt), so the collations 0002 set stay as they are. Other databases are left alone.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.backends.utils import CursorWrapper
from django.db.migrations.state import StateApps
from django.db.models import NOT_PROVIDED, Field, Model

UTF8MB4 = "utf8mb4"


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for model in apps.get_app_config("django_cronqueue").get_models():
        clauses, params = table_changes(schema_editor, model)
        if clauses:
            table = schema_editor.quote_name(model._meta.db_table)
            schema_editor.execute(f"ALTER TABLE {table} {', '.join(clauses)}", params)


def table_changes(
    schema_editor: BaseDatabaseSchemaEditor, model: type[Model]
) -> tuple[list[str], list[Any]]:
    """The clauses of the ALTER TABLE that makes ``model``'s table utf8mb4, and their
    parameters; none when it is utf8mb4 already."""
    table = model._meta.db_table
    fields = {field.column: field for field in model._meta.local_fields}
    clauses: list[str] = []
    params: list[Any] = []
    with schema_editor.connection.cursor() as cursor:
        for column, column_type, collation, nullable in columns_to_convert(cursor, table):
            field = fields.get(column)
            if field is None:  # not ours: leave it alone
                continue
            definition, definition_params = column_definition(
                schema_editor,
                field,
                f"{schema_editor.quote_name(column)} {column_type}",
                twin_collation(cursor, collation),
                nullable,
            )
            clauses.append(f"MODIFY {definition}")
            params.extend(definition_params)
        table_collation = default_collation_to_convert(cursor, table)
        if table_collation is not None:
            collation = twin_collation(cursor, table_collation)
            clauses.append(f"DEFAULT CHARACTER SET {UTF8MB4} COLLATE {collation}")
    return clauses, params


def columns_to_convert(cursor: CursorWrapper, table: str) -> list[tuple[str, str, str, bool]]:
    """(column, type, collation, nullable) of each text column of ``table`` whose
    character set is not utf8mb4."""
    cursor.execute(
        "SELECT column_name, column_type, collation_name, is_nullable "
        "FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name = %s "
        "AND character_set_name IS NOT NULL AND character_set_name <> %s "
        "ORDER BY ordinal_position",
        [table, UTF8MB4],
    )
    return [(name, kind, collation, nullable == "YES") for name, kind, collation, nullable in cursor]


def default_collation_to_convert(cursor: CursorWrapper, table: str) -> str | None:
    """The default collation of ``table``, if its character set is not utf8mb4."""
    cursor.execute(
        "SELECT c.collation_name FROM information_schema.tables t "
        "JOIN information_schema.collations c ON c.collation_name = t.table_collation "
        "WHERE t.table_schema = DATABASE() AND t.table_name = %s "
        "AND c.character_set_name <> %s",
        [table, UTF8MB4],
    )
    row = cursor.fetchone()
    return None if row is None else str(row[0])


def twin_collation(cursor: CursorWrapper, collation: str) -> str:
    """The utf8mb4 collation with the rules of ``collation`` (utf8mb3_general_ci ->
    utf8mb4_general_ci), or utf8mb4's default collation when there is none."""
    rules = collation.partition("_")[2]
    cursor.execute(
        "SELECT collation_name FROM information_schema.collations "
        "WHERE character_set_name = %s AND collation_name = %s",
        [UTF8MB4, f"{UTF8MB4}_{rules}"],
    )
    row = cursor.fetchone()
    if row is None:
        cursor.execute(
            "SELECT default_collate_name FROM information_schema.character_sets "
            "WHERE character_set_name = %s",
            [UTF8MB4],
        )
        row = cursor.fetchone()
    return str(row[0])


def column_definition(
    schema_editor: BaseDatabaseSchemaEditor,
    field: Field[Any, Any],
    column_and_type: str,
    collation: str,
    nullable: bool,
) -> tuple[str, list[Any]]:
    """``column type CHARACTER SET utf8mb4 COLLATE ... [NOT] NULL [DEFAULT ...] [CHECK ...]``:
    the column as it is, in utf8mb4 (MODIFY drops what it does not restate)."""
    sql = (
        f"{column_and_type} CHARACTER SET {UTF8MB4} COLLATE {collation} "
        f"{'NULL' if nullable else 'NOT NULL'}"
    )
    params: list[Any] = []
    if field.db_default is not NOT_PROVIDED:
        default_sql, default_params = schema_editor.db_default_sql(field)
        sql += f" DEFAULT {default_sql}"
        params.extend(default_params)
    check = field.db_check(schema_editor.connection)
    if check:
        sql += f" CHECK ({check})"
    return sql, params


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back anyway

    dependencies = [("django_cronqueue", "0003_failure_class_and_worker_clock")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False)]
