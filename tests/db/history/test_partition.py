"""django_cronqueue.history.archive on MariaDB: finished rows move to the job table's history
partition; every reader still sees them, the claim and the completion read the hot
partition only, a retry brings a row back (its dedupe key colliding again), and the
migration keeps every row both ways."""

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.history import archive
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import Job, JobStatus
from django_cronqueue.observe.counts import job_counts, status_totals
from django_cronqueue.running.execution import run_claimed
from django_cronqueue.worker.tick import Housekeeping
from tests.db.history.test_tables import insert_one_row_per_status, one_of_each_run, run_all
from tests.testapp import jobs as test_jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="the history partition is MariaDB's"),
]

TABLE = Job._meta.db_table
HOT, HISTORY = "hot", "history"
COLUMNS = ", ".join(field.column for field in Job._meta.concrete_fields)
BEFORE = ("django_cronqueue", "0022_claim_index_by_status_expression")


def where_rows_are() -> dict[int, str]:
    """id -> the partition that holds the row."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, archived FROM {TABLE}")
        return {pk: HISTORY if archived else HOT for pk, archived in cursor.fetchall()}


def all_rows(columns: str = COLUMNS) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {TABLE} ORDER BY id")
        return cursor.fetchall()


def live_columns() -> str:
    """The job table's columns as the schema migrated to has them (the models may be
    ahead of it)."""
    with connection.cursor() as cursor:
        present = {c.name for c in connection.introspection.get_table_description(cursor, TABLE)}
    return ", ".join(f.column for f in Job._meta.concrete_fields if f.column in present)


def test_finished_rows_move_to_the_history_partition_and_read_as_before():
    now, (done, failed, cancelled, waiting) = one_of_each_run()
    before = all_rows()

    assert archive.archive(now) == 3

    assert where_rows_are() == {
        done.pk: HISTORY,
        failed.pk: HISTORY,
        cancelled.pk: HISTORY,
        waiting.pk: HOT,
    }
    assert all_rows() == before
    assert Job.objects.get(pk=done.pk).result == {"doubled": 14}
    assert Job.objects.filter(status="failed").get().pk == failed.pk
    assert status_totals(job_counts())["succeeded"] == 1
    assert archive.archive(now) == 0  # nothing left to move


def test_the_housekeeping_moves_finished_rows_in_its_tick():
    job = jobs.enqueue(test_jobs.record, {"key": "a"})
    now = timezone.now()
    run_all(now)
    Housekeeping().run(now, materialize=False)
    assert where_rows_are() == {job.pk: HISTORY}


def test_a_retry_is_refused_while_another_job_holds_its_dedupe_key():
    failed = jobs.enqueue(test_jobs.fails_now, {"key": "x"}, dedupe_key="k")
    now = timezone.now()
    run_all(now)
    archive.archive(now)
    holder = jobs.enqueue(
        test_jobs.fails_now, {"key": "y"}, dedupe_key="k", delay=dt.timedelta(hours=1)
    )
    assert holder.pk != failed.pk

    assert not Job.objects.get(pk=failed.pk).retry(now=now)
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
    assert where_rows_are() == {failed.pk: HISTORY, holder.pk: HOT}


def job_table_reads(sql: str) -> list[tuple[set[str], str]]:
    """(partitions, index) of each read of the job table in ``sql``'s plan."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN PARTITIONS {sql}")
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return [
        (set(row["partitions"].split(",")), row["key"])
        for row in rows
        if row["table"] in (TABLE, "j", "r") and row["partitions"]
    ]


def test_the_claim_and_the_completion_read_the_hot_partition_only():
    for n in range(3):
        jobs.enqueue(test_jobs.record, {"key": str(n)})
    now = timezone.now()
    run_all(now)
    assert archive.archive(now) == 3
    jobs.enqueue(test_jobs.record, {"key": "next"})
    later = timezone.now()

    with CaptureQueriesContext(connection) as captured:
        [claimed] = claim_due(later, queues=None, limit=10, worker_id="w")
        run_claimed(claimed, lambda: later)
    reads = {
        query["sql"]: job_table_reads(query["sql"])
        for query in captured.captured_queries
        if TABLE in query["sql"] and query["sql"].lstrip().upper().startswith(("SELECT", "UPDATE"))
    }
    # The claim's SELECT and UPDATE and the completion's UPDATE name the hot partition.
    hot_only = [sql for sql in reads if "PARTITION (hot)" in sql]
    assert len(hot_only) >= 3
    for sql, found in reads.items():
        if sql in hot_only:
            assert found and all(partitions == {HOT} for partitions, _ in found), sql
        else:  # the rest look their rows up by id, never through another index
            assert found and all(index == "PRIMARY" for _, index in found), (sql, found)


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 3600})
def test_the_prune_deletes_from_the_history_partition_and_the_counts_stay_exact():
    old = [jobs.enqueue(test_jobs.record, {"key": str(n)}) for n in range(3)]
    now = timezone.now()
    run_all(now)
    archive.archive(now)
    assert set(where_rows_are().values()) == {HISTORY}
    fresh = jobs.enqueue(test_jobs.record, {"key": "fresh"})
    later = now + dt.timedelta(hours=2)
    run_all(later)

    assert maintenance.prune(later) == 3
    assert set(where_rows_are()) == {fresh.pk}
    assert not Job.objects.filter(pk__in=[job.pk for job in old]).exists()
    assert status_totals(job_counts())["succeeded"] == 1


def foreign_keys() -> set[tuple[str, str]]:
    tables = [TABLE, "django_cronqueue_batch", "django_cronqueue_jobdependency"]
    found = set()
    with connection.cursor() as cursor:
        for table in tables:
            for constraint in connection.introspection.get_constraints(cursor, table).values():
                if constraint["foreign_key"]:
                    found.add((table, constraint["columns"][0]))
    return found


def test_migrating_from_0022_keeps_every_row_and_back_again():
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    links = foreign_keys()
    assert len(links) == 5
    now = timezone.now()
    insert_one_row_per_status(now)
    columns = live_columns()  # those of 0022, which every later schema keeps
    rows = all_rows(columns)

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes("django_cronqueue")
    MigrationExecutor(connection).migrate(leaf)
    assert foreign_keys() == set()
    assert archive.archive(now) == 3
    assert all_rows(columns) == rows
    assert sorted(where_rows_are().values()) == [HISTORY] * 3 + [HOT] * 2

    MigrationExecutor(connection).migrate([BEFORE])
    assert all_rows(columns) == rows
    assert foreign_keys() == links
    MigrationExecutor(connection).migrate(
        MigrationExecutor(connection).loader.graph.leaf_nodes("django_cronqueue")
    )
