"""PostgreSQL: the migration ``*_payload_search_index`` gives the job table and every
history table a GIN index on the payload (the admin's ``key:value`` search), and takes
them away when reversed; the history tables made later get theirs from the archive."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from django_cronqueue.history import archive
from django_cronqueue.history.archive import postgresql as pg_history
from django_cronqueue.models import Job, JobStatus
from tests.factories import JobFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="history tables are PostgreSQL's"),
]


def before_the_index() -> list[tuple[str, str]]:
    """The migrations the payload index's own migration follows (found by name, whatever
    its number)."""
    loader = MigrationExecutor(connection).loader
    [key] = [
        key
        for key in loader.disk_migrations
        if key[0] == "django_cronqueue" and key[1].endswith("_payload_search_index")
    ]
    return list(loader.disk_migrations[key].dependencies)


def payload_indexes() -> dict[str, str]:
    """table -> the name of its GIN index on the payload, among the job tables."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename LIKE %s "
            "AND indexdef LIKE %s",
            [Job._meta.db_table + "%", "%USING gin (payload jsonb_path_ops)%"],
        )
        return dict(cursor.fetchall())


def migrate_to_the_latest() -> None:
    MigrationExecutor(connection).migrate(
        MigrationExecutor(connection).loader.graph.leaf_nodes("django_cronqueue")
    )


def test_the_migration_indexes_the_history_tables_there_are_and_back_again():
    now = timezone.now()
    JobFactory(status=JobStatus.FAILED, finished_at=now, payload={"order": {"id": 1}})
    JobFactory(status=JobStatus.SUCCEEDED, finished_at=now, payload={"order": {"id": 2}})
    assert archive.archive(now) == 2
    tables = {Job._meta.db_table, *pg_history.history_tables(connection)}
    assert pg_history.ENDED_TABLE in tables and len(tables) >= 3  # and a table per day
    assert set(payload_indexes()) == tables
    try:
        MigrationExecutor(connection).migrate(before_the_index())
        assert payload_indexes() == {}
    finally:
        migrate_to_the_latest()
    assert set(payload_indexes()) == tables
    assert payload_indexes()[Job._meta.db_table] == "cronqueue_job_payload"
