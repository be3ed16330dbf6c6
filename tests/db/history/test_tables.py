"""django_cronqueue.history.archive on PostgreSQL: finished rows move to history tables that
inherit from the job table; every reader still sees them, a retry brings a row back, a
day past its retention goes with its table, and the counts stay exact."""

import datetime as dt
import time

import pytest
from django.db import connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.history import archive, counting
from django_cronqueue.history.archive import postgresql as pg_history
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import (
    FINISHED_STATUSES,
    FinishedCount,
    FinishedCountMark,
    FinishedDayCount,
    Job,
    JobStatus,
)
from django_cronqueue.observe.counts import job_counts, status_totals
from django_cronqueue.worker.tick import YIELD_AFTER_HOLD, Housekeeping
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="history tables are PostgreSQL's"),
]

TABLE = Job._meta.db_table


def where_rows_are() -> dict[int, str]:
    """id -> the table that holds the row (the job table or a history table)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, tableoid::regclass::text FROM {TABLE}")
        return {row[0]: row[1].strip('"') for row in cursor.fetchall()}


def dead_rows(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [table])
        row = cursor.fetchone()
    return row[0] if row else 0


def deleted_rows() -> int:
    """Rows deleted from the job table and the history tables there are, so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT COALESCE(SUM(n_tup_del), 0) FROM pg_stat_user_tables WHERE relname = %s "
            "OR relname LIKE %s",
            [TABLE, f"{TABLE}\\_%"],
        )
        return int(cursor.fetchone()[0])


def run_all(now: dt.datetime) -> None:
    while claim := claim_due(now, queues=None, limit=100, worker_id="w"):
        from django_cronqueue.running.execution import run_claimed

        for job in claim:
            run_claimed(job, lambda: now)


def one_of_each_run() -> tuple[dt.datetime, tuple[Job, Job, Job, Job]]:
    """A job succeeded, one failed, one cancelled, and one still waiting, by the instant
    it returns with them."""
    done = jobs.enqueue(test_jobs.returns_value, {"value": 7})
    failed = jobs.enqueue(test_jobs.fails_now, {"key": "k"})
    cancelled = jobs.enqueue(test_jobs.record, {"key": "c"})
    cancelled.cancel()
    waiting = jobs.enqueue(test_jobs.record, {"key": "later"}, delay=dt.timedelta(hours=1))
    now = timezone.now()
    run_all(now)
    return now, (done, failed, cancelled, waiting)


def test_finished_rows_move_to_their_tables_and_read_as_before():
    now, (done, failed, cancelled, waiting) = one_of_each_run()
    before = {job.pk: job for job in Job.objects.all()}

    assert archive.archive(now) == 3

    day = pg_history.day_table(Job.objects.get(pk=done.pk).finished_at.date())
    assert where_rows_are() == {
        done.pk: day,
        failed.pk: pg_history.ENDED_TABLE,
        cancelled.pk: pg_history.ENDED_TABLE,
        waiting.pk: TABLE,
    }
    after = {job.pk: job for job in Job.objects.all()}
    assert after.keys() == before.keys()
    for pk, job in after.items():
        assert [getattr(job, f.attname) for f in Job._meta.concrete_fields] == [
            getattr(before[pk], f.attname) for f in Job._meta.concrete_fields
        ]
    assert Job.objects.get(pk=done.pk).result == {"doubled": 14}
    assert Job.objects.filter(status="failed").get().pk == failed.pk
    assert status_totals(job_counts())["succeeded"] == 1
    assert archive.archive(now) == 0  # nothing left to move


def test_an_update_that_reopens_an_archived_row_moves_it_back():
    job = jobs.enqueue(test_jobs.record, {"key": "a"})
    now = timezone.now()
    run_all(now)
    archive.archive(now)
    assert Job.objects.filter(pk=job.pk).update(status=JobStatus.PENDING, finished_at=None) == 1
    assert where_rows_are()[job.pk] == TABLE
    assert [j.id for j in claim_due(now, queues=None, limit=10, worker_id="w")] == [job.pk]


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 86400})
def test_a_day_past_its_retention_is_dropped_whole_and_leaves_the_counts_exact():
    start = timezone.now().replace(hour=12) - dt.timedelta(days=3)
    days = [start + dt.timedelta(days=n) for n in range(3)]
    kept_failed = jobs.enqueue(test_jobs.fails_now, {"key": "f"}, run_at=days[0])
    run_all(days[0])
    for day in days:
        for n in range(3):
            jobs.enqueue(test_jobs.record, {"key": f"{day:%d}-{n}"}, run_at=day)
        run_all(day)
    archive.archive(days[-1])
    counting.count_finished(timezone.now())
    assert FinishedCount.objects.filter(hour=None, status="succeeded").get().rows == 9

    # The first two days ended more than 86,400 s ago, the last one's rows are younger.
    now = days[-1] + dt.timedelta(hours=23)
    deleted_before = deleted_rows()
    assert maintenance.prune(now) == 6
    tables = pg_history.history_tables(connection)
    assert pg_history.day_table(days[0].date()) not in tables
    assert pg_history.day_table(days[1].date()) not in tables
    assert pg_history.day_table(days[2].date()) in tables
    assert Job.objects.filter(status="succeeded").count() == 3
    assert FinishedCount.objects.filter(hour=None, status="succeeded").get().rows == 3
    assert status_totals(job_counts())["succeeded"] == 3
    assert Job.objects.filter(pk=kept_failed.pk).exists()  # FAILED_RETENTION None: kept
    assert dead_rows(pg_history.day_table(days[2].date())) == 0
    # The six rows went with their tables: no row was deleted one by one (the deletes
    # counted before the prune, of the tables dropped since, are no longer summed).
    assert deleted_rows() <= deleted_before


def counted() -> dict[tuple, int]:
    """The counts in all, per day and per hour, as kept."""
    found = {(c.status, c.name, c.queue, c.hour): c.rows for c in FinishedCount.objects.all()}
    found.update(
        {(c.status, c.name, c.queue, c.day): c.rows for c in FinishedDayCount.objects.all()}
    )
    return found


def counted_from_rows(upto: dt.datetime) -> dict[tuple, int]:
    """The same counts, made from the rows finished up to ``upto``."""
    found: dict[tuple, int] = {}
    rows = Job.objects.filter(status__in=FINISHED_STATUSES, finished_at__lte=upto)
    for status, name, queue, at in rows.values_list("status", "name", "queue", "finished_at"):
        for when in (None, counting.hour_of(at), counting.day_of(at)):
            found[(status, name, queue, when)] = found.get((status, name, queue, when), 0) + 1
    return found


@pytest.mark.parametrize("by_day", [True, False], ids=["counts by day", "counts without days"])
@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "FAILED_RETENTION": None})
def test_a_dropped_day_leaves_the_counts_exact_with_rows_kept_elsewhere_and_uncounted(by_day):
    """Yesterday's day table is dropped; of that day, a chain's rows stay in the job table
    (deleted in batches), a failed row in the ended table (kept), and some rows finished
    after the counts' mark (counted by the pass the prune runs first): the counts (in
    all, per day, per hour) stay those of the rows left, whether the counts were kept by
    day or by an earlier version without the days (counted again by that pass)."""
    yesterday = dt.datetime.combine(
        timezone.now().date() - dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc
    )
    early, late = yesterday + dt.timedelta(minutes=30), yesterday + dt.timedelta(hours=12)
    for n in range(3):
        jobs.enqueue(test_jobs.record, {"key": f"early{n}"}, run_at=early)
    jobs.chain(test_jobs.record.s(key="c1"), test_jobs.record.s(key="c2")).enqueue()
    Job.objects.filter(run_at__gt=early).update(run_at=early)
    failed = jobs.enqueue(test_jobs.fails_now, {"key": "f"}, run_at=early)
    run_all(early)
    for n in range(2):
        jobs.enqueue(test_jobs.record, {"key": f"late{n}"}, run_at=late)
    run_all(late)
    assert archive.archive(late) == 6  # 3 early and 2 late succeeded rows, 1 failed
    counting.count_finished(yesterday + dt.timedelta(hours=6))  # the early ones counted
    mark = FinishedCountMark.objects.get().counted_until
    assert counted() == counted_from_rows(mark)
    assert {key[0] for key in counted()} == {"succeeded", "failed"}
    if not by_day:
        FinishedDayCount.objects.all().delete()
        FinishedCountMark.objects.update(by_day=False)

    # The drop first (the chain's rows are still there), then the rest of the prune.
    assert maintenance._drop_expired_days(timezone.now(), yesterday + dt.timedelta(days=1)) == 5
    assert pg_history.day_table(yesterday.date()) not in pg_history.history_tables(connection)
    assert Job.objects.count() == 3
    mark = FinishedCountMark.objects.get().counted_until  # moved on by the prune's pass
    assert mark > late and FinishedCountMark.objects.get().by_day
    assert counted() == counted_from_rows(mark)
    assert maintenance.prune(timezone.now() + dt.timedelta(hours=1)) == 2
    assert list(Job.objects.values_list("pk", flat=True)) == [failed.pk]
    assert counted() == counted_from_rows(mark)
    counting.count_finished(timezone.now())
    assert counted() == counted_from_rows(timezone.now())
    assert job_counts() == {("failed", "testapp.fails_now", "default"): 1}


def insert_one_row_per_status(now: dt.datetime) -> None:
    """A row in each status, by SQL (the models may be ahead of the schema migrated to)."""
    with connection.cursor() as cursor:
        for n, status in enumerate(["pending", "running", "succeeded", "failed", "cancelled"]):
            finished = now if status in FINISHED_STATUSES else None
            cursor.execute(
                f"INSERT INTO {TABLE} (name, payload, status, queue, priority, attempts, "
                "max_attempts, run_at, dedupe_key, last_error, traceback, worker_id, "
                "exception_class_path, cancel_requested_by, cancel_reason, snoozes, "
                "limit_key, schedule, blocked, waiting_for, has_downstream, traceparent, "
                "created_at, finished_at) VALUES (%s, '{}', %s, 'default', 0, 1, 4, %s, "
                "NULL, '', '', '', '', '', '', 0, '', '', FALSE, 0, FALSE, '', %s, %s)",
                [f"testapp.record{n}", status, now, now, finished],
            )


def test_migrating_from_0016_keeps_every_row_and_back_again():
    executor = MigrationExecutor(connection)
    executor.migrate([("django_cronqueue", "0016_finished_counts")])
    now = timezone.now()
    insert_one_row_per_status(now)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {TABLE} ORDER BY id")
        rows = cursor.fetchall()
        # the columns of 0016, which every later schema keeps (later ones add others)
        columns = ", ".join(column[0] for column in cursor.description)

    MigrationExecutor(connection).migrate(
        MigrationExecutor(connection).loader.graph.leaf_nodes("django_cronqueue")
    )
    assert archive.archive(now) == 3
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {TABLE} ORDER BY id")
        assert cursor.fetchall() == rows
    assert len(set(where_rows_are().values())) == 3

    MigrationExecutor(connection).migrate([("django_cronqueue", "0016_finished_counts")])
    assert pg_history.history_tables(connection) == []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {TABLE} ORDER BY id")
        assert cursor.fetchall() == rows
    MigrationExecutor(connection).migrate(
        MigrationExecutor(connection).loader.graph.leaf_nodes("django_cronqueue")
    )


def relations_scanned(node: dict) -> set[str]:
    found = {node["Relation Name"]} if "Relation Name" in node else set()
    for child in node.get("Plans", []):
        found |= relations_scanned(child)
    return found


def test_the_claim_and_the_completion_never_read_the_history_tables():
    from django_cronqueue.claiming import claim, claim_request, complete_and_claim
    from django_cronqueue.conf import database_alias
    from tests.db.claiming.test_plan import captured_claim_statement, explain

    for n in range(3):
        jobs.enqueue(test_jobs.record, {"key": str(n)})
    now = timezone.now()
    run_all(now)
    jobs.enqueue(test_jobs.record, {"key": "next"})
    jobs.enqueue(test_jobs.record, {"key": "after"})
    assert archive.archive(now) == 3
    assert pg_history.history_tables(connection)

    def request():
        return claim_request(
            timezone.now(), queues=None, limit=10, worker_id="w", include_capped=False
        )

    running = claim(
        claim_request(timezone.now(), queues=None, limit=1, worker_id="w", include_capped=False),
        using=database_alias(),
    )
    for run in (
        lambda: claim(request(), using=database_alias()),
        lambda: complete_and_claim(
            request(), running, finished_at=timezone.now(), using=database_alias()
        ),
    ):
        statement = captured_claim_statement(run)
        assert "ONLY" in statement[0]
        assert relations_scanned(explain(statement)) <= {TABLE, "django_cronqueue_pause"}


def test_a_claim_takes_no_more_rows_than_asked_beside_history_tables():
    """With history tables, a small job table's statistics once made PostgreSQL run the
    claim's subquery again for each row of the table, and a claim of one took them all."""
    from django_cronqueue.claiming import claim, claim_request, complete_and_claim
    from django_cronqueue.conf import database_alias

    for n in range(10):
        jobs.enqueue(test_jobs.record, {"key": str(n)})
    archive.archive(timezone.now())
    assert pg_history.history_tables(connection)

    def request():
        return claim_request(
            timezone.now(), queues=None, limit=1, worker_id="w", include_capped=False
        )

    first = claim(request(), using=database_alias())
    assert len(first) == 1
    claimed, written = complete_and_claim(
        request(), first, finished_at=timezone.now(), using=database_alias()
    )
    assert (len(claimed), written) == (1, {first[0].id})
    assert Job.objects.filter(status="running").count() == 1
    assert Job.objects.filter(status="pending").count() == 8


def test_while_a_transaction_is_held_no_finished_row_moves_to_history():
    """The move would leave two more versions per row that no vacuum may remove yet: the
    housekeeping of a worker that sees a held transaction leaves them for after it."""
    jobs.enqueue(test_jobs.record, {"key": "a"})
    now = timezone.now()
    run_all(now)
    [job_id] = where_rows_are()
    assert Job.objects.get(pk=job_id).status == JobStatus.SUCCEEDED
    housekeeping = Housekeeping()
    housekeeping.run(now, materialize=False, held=True)
    assert where_rows_are() == {job_id: TABLE}
    housekeeping.run(now + dt.timedelta(seconds=10), materialize=False)
    assert where_rows_are()[job_id] != TABLE


def succeeded_rows(count: int, now: dt.datetime) -> None:
    """``count`` rows that succeeded at ``now``, as a drain leaves them (in one statement:
    running that many jobs would take a minute)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (name, payload, status, queue, priority, attempts, "
            "max_attempts, run_at, worker_id, last_error, traceback, created_at, started_at, "
            "finished_at) SELECT %s, '{}'::jsonb, 'succeeded', 'default', 0, 1, 4, %s, '', '', "
            "'', %s, %s, %s FROM generate_series(1, %s)",
            [test_jobs.noop.name, now, now, now, now, count],
        )


def test_after_a_hold_the_move_to_history_starts_again_from_one_batch():
    """However much room the worker had before the hold: millions of rows may wait."""
    now = timezone.now()
    housekeeping = Housekeeping()
    passes = iter(now + dt.timedelta(seconds=10 * n) for n in range(20))
    for _ in range(6):  # room before the hold: a whole pass
        housekeeping.tally.record(10, 0)
        housekeeping.run(next(passes), materialize=False)
    succeeded_rows(3 * archive.ARCHIVE_BATCH, now)
    for _ in range(6):  # a minute held
        housekeeping.tally.record(10, 0)
        housekeeping.run(next(passes), materialize=False, held=True)
    housekeeping.tally.record(10, 0)
    housekeeping.run(next(passes), materialize=False)
    moved = [table for table in where_rows_are().values() if table != TABLE]
    assert len(moved) == 2 * archive.ARCHIVE_BATCH


def test_a_worker_behind_moves_what_it_claimed_and_one_batch_more():
    """After a hold millions of finished rows wait for history: a worker whose every
    claim came back full moves, per pass, the jobs it claimed and one batch of them, so
    that the move takes little from the drain; once a claim comes back short, more."""
    now = timezone.now()
    succeeded_rows(3 * archive.ARCHIVE_BATCH, now)
    housekeeping = Housekeeping()
    for _ in range(100):
        housekeeping.tally.record(10, 10)  # 1,000 jobs claimed, every claim full
    housekeeping.run(now, materialize=False)
    in_job_table = [table for table in where_rows_are().values() if table == TABLE]
    assert len(in_job_table) == 2 * archive.ARCHIVE_BATCH - 1_000

    housekeeping.tally.record(10, 10)
    housekeeping.tally.record(10, 3)  # the queue ran dry: not behind
    housekeeping.run(now + archive.ARCHIVE_EVERY, materialize=False)
    assert TABLE not in set(where_rows_are().values())


def test_after_a_hold_a_worker_behind_leaves_its_rows_until_the_drain_has_room():
    """The backlog the hold left is worked off first: for ``YIELD_AFTER_HOLD`` after it, a
    pass whose every claim came back full moves nothing, not even the jobs it claimed;
    one with room moves again; and once the yield is over, a worker behind owes its
    claimed jobs again."""
    now = timezone.now()
    housekeeping = Housekeeping()
    housekeeping.run(now, materialize=False, held=True)
    succeeded_rows(3 * archive.ARCHIVE_BATCH, now)
    for _ in range(100):
        housekeeping.tally.record(10, 10)
    housekeeping.run(now + archive.ARCHIVE_EVERY, materialize=False)
    assert set(where_rows_are().values()) == {TABLE}

    housekeeping.tally.record(10, 3)  # the queue ran dry: room
    housekeeping.run(now + 2 * archive.ARCHIVE_EVERY, materialize=False)
    moved = 3 + 2 * archive.ARCHIVE_BATCH  # the 3 jobs claimed, and a batch more than before
    assert list(where_rows_are().values()).count(TABLE) == 3 * archive.ARCHIVE_BATCH - moved

    for _ in range(100):
        housekeeping.tally.record(10, 10)
    housekeeping.run(now + YIELD_AFTER_HOLD, materialize=False)
    assert TABLE not in set(where_rows_are().values())


def test_the_move_passes_over_an_older_day_whose_rows_may_not_move_yet():
    """A workflow's rows stay until pruned: the day they finished on does not stop the
    rows of the next days from moving."""
    first, second = jobs.chain(test_jobs.record.s(key="1"), test_jobs.record.s(key="2")).enqueue()
    now = timezone.now()
    run_all(now)
    run_all(now)
    Job.objects.filter(pk__in=[first.pk, second.pk]).update(finished_at=now - dt.timedelta(days=2))
    later = jobs.enqueue(test_jobs.record, {"key": "later"})
    now = timezone.now()
    run_all(now)
    assert archive.archive(now) == 1
    rows = where_rows_are()
    assert (rows[first.pk], rows[second.pk]) == (TABLE, TABLE)
    assert rows[later.pk] == pg_history.day_table(now.astimezone(dt.timezone.utc).date())


def test_a_worker_that_finds_another_making_a_history_table_leaves_it_to_that_one():
    """Two workers making the same day's table at once (two started together, or the
    next day's at midnight): the second neither waits for the first (which may be frozen,
    by SIGSTOP, mid-way: its pass would wait for good) nor fails with "relation ... already
    exists"; its pass moves nothing, and the next one finds the table made."""
    now = timezone.now()
    name = pg_history.day_table(now.astimezone(dt.timezone.utc).date())
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {name}")
    JobFactory(status="succeeded", finished_at=now - dt.timedelta(minutes=1))
    maker = connections.create_connection(connection.alias)
    try:
        with maker.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
            cursor.execute(f"CREATE TABLE {name} () INHERITS ({TABLE})")
            started = time.monotonic()
            assert pg_history.ensure_table(connection, name) is False
            assert archive.archive(now) == 0
            assert time.monotonic() - started < 5  # neither waited on the maker
            cursor.execute("COMMIT")
        assert pg_history.ensure_table(connection, name) is True
        assert archive.archive(now) == 1
        assert name in pg_history.history_tables(connection)
    finally:
        maker.close()
