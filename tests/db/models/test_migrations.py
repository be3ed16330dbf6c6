"""django_cronqueue/migrations: 0004 makes a utf8mb3 database's tables utf8mb4 on MySQL
and MariaDB, and leaves a database that is utf8mb4 already (and other vendors) alone."""

import importlib
import json
import os
import subprocess
import sys

import pytest
from django.db import connection

from django_cronqueue.models import CronSchedule, Job, NameLock, Pause, Worker
from tests.processes import ROOT

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="character sets are MySQL's"),
]

# The columns migration 0002 gave an exact, binary collation.
EXACT_COLUMNS = {
    ("django_cronqueue_job", "name"),
    ("django_cronqueue_job", "dedupe_key"),
    ("django_cronqueue_job", "active_dedupe_key"),
    ("django_cronqueue_namelock", "name"),
    ("django_cronqueue_cronschedule", "name"),
}
# The columns migration 0012 gave the same exact collation (ExactCharField).
LATER_EXACT_COLUMNS = {
    ("django_cronqueue_job", "queue"),
    ("django_cronqueue_job", "window_dedupe_key"),
    ("django_cronqueue_pause", "queue"),
    ("django_cronqueue_pause", "name"),
}

# Runs in a process of its own on the utf8mb3 database: migrates to 0003, to 0004, then to
# the end, then pauses a queue with an emoji reason, enqueues on an emoji queue and ticks a
# handler that raises with an emoji.
SCENARIO = """
import json
import django
django.setup()
from django.core.management import call_command
from django.db import connection

TABLES = r"django\\_cronqueue\\_%"

def columns():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, column_type, character_set_name, collation_name, "
            "is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name LIKE %s "
            "AND character_set_name IS NOT NULL ORDER BY table_name, ordinal_position",
            [TABLES],
        )
        return [list(row) for row in cursor.fetchall()]

def table_charsets():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, table_collation FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name LIKE %s",
            [TABLES],
        )
        return dict(cursor.fetchall())

call_command("migrate", "django_cronqueue", "0003", verbosity=0)
before = columns()
call_command("migrate", "django_cronqueue", "0004", verbosity=0)
after = columns()
call_command("migrate", verbosity=0)
latest = columns()

from django_cronqueue import jobs
from django_cronqueue.models import Job, Pause

jobs.pause(queue="other 🚀", reason="down 🚀")
pause_reason = Pause.objects.get(queue="other 🚀").reason

job = jobs.enqueue(
    "testapp.fails_with_value_error", {"message": "échec 🚀"}, queue="emails 🚀"
)
ticked = jobs.tick(queues=["emails 🚀"])
job.refresh_from_db()
print(json.dumps({
    "before": before,
    "after": after,
    "latest": latest,
    "pause_reason": pause_reason,
    "tables": table_charsets(),
    "failed": ticked.failed,
    "job": [job.queue, job.status, job.last_error, job.exception_class_path],
}))
"""


@pytest.fixture
def utf8mb3_database():
    """A new, empty database whose default character set is utf8mb3; dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_utf8mb3"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb3 COLLATE utf8mb3_general_ci")
    try:
        yield name
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")


def run_scenario(database: str) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": database,
    }
    result = subprocess.run(
        [sys.executable, "-c", SCENARIO],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_utf8mb3_database_is_migrated_to_utf8mb4_and_stores_emoji(utf8mb3_database):
    outcome = run_scenario(utf8mb3_database)

    assert outcome["failed"] == 1
    assert outcome["job"] == ["emails 🚀", "failed", "ValueError: échec 🚀", "builtins.ValueError"]
    assert outcome["pause_reason"] == "down 🚀"
    # Every text column and every table is utf8mb4 after 0004, and stays so: the tables
    # and columns of later migrations too.
    assert {charset for _, _, _, charset, *_ in outcome["after"]} == {"utf8mb4"}
    assert {charset for _, _, _, charset, *_ in outcome["latest"]} == {"utf8mb4"}
    assert Pause._meta.db_table in outcome["tables"]
    assert all(collation.startswith("utf8mb4_") for collation in outcome["tables"].values())
    assert set(outcome["tables"]) >= {
        model._meta.db_table for model in (Job, Worker, NameLock, CronSchedule)
    }
    before = {(table, column): rest for table, column, *rest in outcome["before"]}
    after = {(table, column): rest for table, column, *rest in outcome["after"]}
    assert before.keys() == after.keys()
    for key, (column_type, charset, collation, nullable, default) in before.items():
        # Type, NULL or NOT NULL and default as they were.
        assert (after[key][0], after[key][3], after[key][4]) == (column_type, nullable, default)
        if key in EXACT_COLUMNS or charset == "utf8mb4":
            assert after[key][2] == collation  # 0002's binary collations, the JSON ones
        else:
            assert (collation, after[key][2]) == ("utf8mb3_general_ci", "utf8mb4_general_ci")
    latest = {(table, column): rest for table, column, *rest in outcome["latest"]}
    for key in LATER_EXACT_COLUMNS:  # migration 0012: exact on a converted database too
        assert latest[key][2] == "utf8mb4_nopad_bin"
    assert {key for key, (_, charset, *_) in before.items() if charset == "utf8mb3"} >= {
        ("django_cronqueue_job", "queue"),
        ("django_cronqueue_job", "last_error"),
        ("django_cronqueue_job", "exception_class_path"),
    }  # what there was to convert


def test_a_database_that_is_utf8mb4_already_is_not_altered():
    # The test database is created utf8mb4 (tests/settings.py): nothing to rebuild.
    utf8mb4_migration = importlib.import_module(
        "django_cronqueue.migrations.0004_mysql_utf8mb4_text_columns"
    )
    with connection.schema_editor() as editor:
        for model in (Job, Worker, NameLock, CronSchedule):
            assert utf8mb4_migration.table_changes(editor, model) == ([], [])
