"""PostgreSQL: the claim statements read the claim index, not the whole table.

A table holding a long history of finished jobs must not slow claiming down: the claim
query's ``status = 'pending'`` prefix and its ``ORDER BY priority DESC, run_at, id`` are
the columns of the ``cronqueue_job_claim`` index, so the planner walks the pending rows in
claim order and stops at the LIMIT, however many finished rows sit beside them.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs, observe
from django_cronqueue.claiming import claim, claim_request, complete_and_claim
from django_cronqueue.conf import database_alias
from django_cronqueue.models import Job, JobStatus
from django_cronqueue.observe.gauges import oldest_due_age
from tests.factories import WorkerFactory
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED_ROWS = 50_000
PENDING_ROWS = 200
CLAIM_INDEX = "cronqueue_job_claim"
RUNNING_INDEX = "cronqueue_job_running"


@pytest.fixture
def history():
    """Many succeeded rows and a few pending ones, analysed, as in a long-lived site."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan check reads PostgreSQL's EXPLAIN")
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        for status, count in (("succeeded", FINISHED_ROWS), ("pending", PENDING_ROWS)):
            cursor.execute(
                f"INSERT INTO {table} (name, payload, status, queue, priority, attempts, "
                "max_attempts, run_at, worker_id, last_error, traceback, created_at, "
                "finished_at) "
                "SELECT %s, '{}'::jsonb, %s, 'default', 0, 1, 4, now() - interval '1 hour', "
                "'', '', '', now() - interval '1 hour', "
                "CASE WHEN %s = 'succeeded' THEN now() ELSE NULL END "
                "FROM generate_series(1, %s)",
                [test_jobs.record.name, status, status, count],
            )
        cursor.execute(f"ANALYZE {table}")


def explain(statement: tuple[str, list]) -> dict:
    sql, params = statement
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        [[plan]] = cursor.fetchall()
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def scans_of_job_table(node: dict) -> list[tuple[str, str | None]]:
    """(node type, index name) of every plan node that reads the jobs table."""
    found = []
    if node.get("Relation Name") == Job._meta.db_table and "Scan" in node["Node Type"]:
        found.append((node["Node Type"], node.get("Index Name")))
    for child in node.get("Plans", []):
        found.extend(scans_of_job_table(child))
    return found


def captured_statements(run) -> list[tuple[str, list]]:
    """The SQL and parameters of every statement that ``run`` executes."""
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        run()
    return statements


def captured_claim_statement(run) -> tuple[str, list]:
    """The SQL and parameters of the one claim statement that ``run`` executes."""
    statements = captured_statements(run)
    [statement] = [(sql, params) for sql, params in statements if "SKIP LOCKED" in sql]
    return statement


def request(limit: int):
    return claim_request(
        timezone.now(), queues=None, limit=limit, worker_id="w", include_capped=False
    )


def test_the_claim_statement_walks_the_claim_index(history):
    statement = captured_claim_statement(lambda: claim(request(10), using=database_alias()))
    scans = scans_of_job_table(explain(statement))
    # The inner SELECT finds the candidates on the claim index; the outer UPDATE then
    # fetches them by primary key. Never a sequential scan of the history.
    assert ("Index Scan", CLAIM_INDEX) in scans or ("Index Only Scan", CLAIM_INDEX) in scans
    assert all(node_type != "Seq Scan" for node_type, _ in scans), scans


def test_complete_and_claim_walks_the_claim_index(history):
    statement = captured_claim_statement(
        lambda: complete_and_claim(
            request(10), [], finished_at=timezone.now(), using=database_alias()
        )
    )
    scans = scans_of_job_table(explain(statement))
    assert ("Index Scan", CLAIM_INDEX) in scans or ("Index Only Scan", CLAIM_INDEX) in scans
    assert all(node_type != "Seq Scan" for node_type, _ in scans), scans


def test_with_pauses_in_force_the_claim_is_still_one_statement_on_the_claim_index(history):
    """Paused queues and names are filtered by the claim statement itself: one
    statement, still walking the claim index, whatever the pause table holds."""
    for index in range(20):
        jobs.pause(queue=f"paused-{index}")
    jobs.pause(name="testapp.noop")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    statement = captured_claim_statement(lambda: claim(request(10), using=database_alias()))
    assert "NOT IN (SELECT p.queue" in statement[0]
    scans = scans_of_job_table(explain(statement))
    assert ("Index Scan", CLAIM_INDEX) in scans or ("Index Only Scan", CLAIM_INDEX) in scans
    assert all(node_type != "Seq Scan" for node_type, _ in scans), scans


def index_definition(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        [[definition]] = cursor.fetchall()
    return definition


def test_the_claim_and_running_indexes_hold_only_the_rows_they_are_read_for(history):
    """Partial: a claim or a completion (neither can be a HOT update) adds no entry to an
    index that does not cover the row's new status."""
    assert index_definition(CLAIM_INDEX).endswith(
        "(priority DESC, run_at, id) "
        "WHERE ((((status)::text || ''::text) = 'pending'::text) AND (blocked = false))"
    )
    assert index_definition(RUNNING_INDEX).endswith("WHERE ((status)::text = 'running'::text)")
    assert index_definition("cronqueue_job_flow").endswith(
        "WHERE ((status)::text = 'running'::text)"
    )
    assert index_definition("cronqueue_job_dedupe_key").endswith("WHERE (dedupe_key IS NOT NULL)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            [Job._meta.db_table, "%(batch_id)%"],
        )
        [[batch_index]] = cursor.fetchall()
    assert batch_index.endswith("WHERE (batch_id IS NOT NULL)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_relation_size(%s::regclass) < pg_relation_size(%s::regclass) / 10",
            [CLAIM_INDEX, "cronqueue_job_finished"],
        )
        [[claim_index_is_small]] = cursor.fetchall()
    assert claim_index_is_small  # 200 pending rows beside 50,000 finished ones


def index_names(node: dict) -> set[str]:
    names = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", []):
        names |= index_names(child)
    return names


def test_a_search_by_dedupe_key_walks_the_dedupe_key_index(history):
    plan = explain(Job.objects.filter(dedupe_key="k").query.sql_with_params())
    assert "cronqueue_job_dedupe_key" in index_names(plan)


def test_the_jobs_of_a_batch_are_read_through_the_batch_index(history):
    plan = explain(Job.objects.filter(batch_id=1).query.sql_with_params())
    assert any(name.startswith("django_cronqueue_job_batch_id") for name in index_names(plan))


def test_the_expired_leases_query_walks_an_index_of_running_rows(history):
    queryset = Job.objects.filter(status=JobStatus.RUNNING, locked_until__lt=timezone.now())
    sql, params = queryset.query.sql_with_params()
    plan = explain((sql, list(params)))
    # With no running row, either index of running rows only is as good: both are empty.
    assert index_names(plan) & {RUNNING_INDEX, "cronqueue_job_flow"}
    assert all(node_type != "Seq Scan" for node_type, _ in scans_of_job_table(plan))


def prepared_claims() -> list[tuple[str, int, int]]:
    """(name, generic plans, custom plans) of this session's prepared claim statements."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ["%SKIP LOCKED%"],
        )
        return list(cursor.fetchall())


def test_a_claim_is_prepared_once_per_connection_and_its_generic_plan_walks_the_claim_index(
    history,
):
    """The worker's claim is prepared once and executed from then on, not parsed again per
    claim. After five custom plans PostgreSQL may run it on one generic plan, which it picks
    by comparing estimated costs (docs/performance.md: 394 of 400 claims did); that plan,
    made without the parameters' values, must still walk the claim index."""
    connection.close()  # a session of its own: nothing prepared yet
    statement = captured_claim_statement(lambda: claim(request(10), using=database_alias()))
    for _ in range(7):
        assert len(claim(request(10), using=database_alias())) == 10
    [(name, generic_plans, custom_plans)] = prepared_claims()
    assert generic_plans + custom_plans == 8 and custom_plans >= 5
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(
                f"EXPLAIN (FORMAT JSON) EXECUTE {name}({', '.join(['%s'] * len(statement[1]))})",
                statement[1],
            )
            [[plan]] = cursor.fetchall()
        finally:
            cursor.execute("RESET plan_cache_mode")
    scans = scans_of_job_table((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    assert ("Index Scan", CLAIM_INDEX) in scans or ("Index Only Scan", CLAIM_INDEX) in scans
    assert all(node_type != "Seq Scan" for node_type, _ in scans), scans


@pytest.mark.parametrize("setting", [{"PREPARED_STATEMENTS": False}, {}])
def test_a_claim_is_not_prepared_when_the_settings_say_a_pooler_may_not_keep_it(
    history, settings, setting
):
    """PREPARED_STATEMENTS=False, or (at its default) Django's DISABLE_SERVER_SIDE_CURSORS,
    which Django asks of sites behind a pooler in transaction mode: nothing is prepared,
    and the site's own queries on that connection are never prepared either way."""
    connection.close()
    settings.CRONQUEUE = setting
    connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = not setting
    try:
        for _ in range(7):
            assert len(claim(request(10), using=database_alias())) == 10
    finally:
        connection.settings_dict.pop("DISABLE_SERVER_SIDE_CURSORS")
    assert prepared_claims() == []


def show_jit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        return cursor.fetchone()[0]


def test_the_session_the_claims_run_on_plans_without_jit(history):
    """A claim's cost estimate passes jit_above_cost once its index is large, and each
    claim then compiled its statement: tens of milliseconds for a claim that runs in
    one. The first prepared claim turns JIT off for its session."""
    connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SET jit = on")
    claim(request(10), using=database_alias())
    assert show_jit() == "off"


def test_behind_a_pooler_the_claims_leave_the_session_settings_alone(history, settings):
    """A pooler in transaction mode hands the server session to other clients: a
    session setting made there would be theirs too."""
    connection.close()
    settings.CRONQUEUE = {"PREPARED_STATEMENTS": True}
    connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET jit = on")
        claim(request(10), using=database_alias())
        assert prepared_claims() != []
        assert show_jit() == "on"
    finally:
        connection.settings_dict.pop("DISABLE_SERVER_SIDE_CURSORS")


def test_the_sites_own_statements_on_a_workers_connection_stay_unprepared(history):
    """Django's default cursor binds on the client and is never prepared; a site with
    OPTIONS server_side_binding gets psycopg's server-binding cursor, which psycopg
    prepares after prepare_threshold runs: the claim's threshold must not reach it."""
    import psycopg

    connection.close()
    claim(request(10), using=database_alias())
    for _ in range(10):
        Job.objects.filter(status=JobStatus.PENDING).count()
        list(Job.objects.raw(f"SELECT id FROM {Job._meta.db_table} WHERE id = %s", [1]))
        with psycopg.Cursor(connection.connection) as server_binding:
            server_binding.execute(f"SELECT id FROM {Job._meta.db_table} WHERE id = %s", [1])
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in cursor.fetchall()]
    assert len(statements) == 1 and "SKIP LOCKED" in statements[0]


def test_a_claim_prepared_before_a_migration_changed_a_returned_column_runs_again(history):
    """A migration that changes the type of a column the claim returns, run while a worker
    holds the claim prepared: PostgreSQL refuses the old plan ("cached plan must not change
    result type"); the claim is prepared anew and runs, with no error."""
    import psycopg

    connection.close()
    assert len(claim(request(10), using=database_alias())) == 10
    params = connection.get_connection_params()
    table = Job._meta.db_table
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute(f"ALTER TABLE {table} ALTER COLUMN traceparent TYPE varchar(300)")
    try:
        assert len(claim(request(10), using=database_alias())) == 10
        [(_, _, custom_plans)] = prepared_claims()
        assert custom_plans == 1  # the one prepared after the change
    finally:
        connection.close()
        with psycopg.connect(**params, autocommit=True) as other:
            field = Job._meta.get_field("traceparent")
            other.execute(
                f"ALTER TABLE {table} ALTER COLUMN traceparent TYPE varchar({field.max_length})"
            )


def test_on_sqlite_the_claim_walks_a_claim_index_of_pending_rows_only():
    """SQLite: the claim index is partial (migration 0018) and the claim uses it."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's partial claim index")
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [CLAIM_INDEX])
        [[definition]] = cursor.fetchall()
    assert definition.endswith("WHERE status = 'pending'")
    from django_cronqueue.claiming.base import ORDER, TABLE, due_filter

    jobs.enqueue(test_jobs.record, {"key": "a"})
    where, params = due_filter(request(10), [test_jobs.record.name])
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN SELECT id FROM {TABLE} WHERE {where} {ORDER}", params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert f"INDEX {CLAIM_INDEX}" in plan, plan


# --- the readers of due pending jobs ------------------------------------------------------
# The stranded-jobs warning (every worker, every LEASE), the oldest-due gauge of the
# metrics and the dashboard's oldest pending job read the due pending rows. Compared by
# the column alone, the status could be read from no index of the job table but by a
# scan of all of it (86 ms on a table of 144 MB after a few minutes of churn, seconds
# after a held transaction), each holding back the cleanup of the claim index meanwhile.


def statements_reading_the_job_table(read) -> list[tuple[str, list]]:
    table = f'FROM "{Job._meta.db_table}"'
    return [(sql, params) for sql, params in captured_statements(read) if table in sql]


def indexes_read(node: dict) -> set[str]:
    found = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", []):
        found |= indexes_read(child)
    return found


DUE_READERS = {
    "stranded names": lambda now: observe.stranded_names(now),
    "oldest due age per queue (metrics)": lambda now: oldest_due_age(now),
    "oldest pending": lambda now: observe.oldest_pending(now),
    "oldest pending a worker may claim": lambda now: observe.oldest_pending(now, skip_paused=True),
    "oldest pending per queue": lambda now: observe.oldest_pending_by_queue(now),
}


@pytest.mark.parametrize("reader", DUE_READERS.values(), ids=DUE_READERS.keys())
def test_the_readers_of_due_jobs_read_the_claim_index_not_the_whole_table(history, reader):
    WorkerFactory(job_names=[test_jobs.noop.name])  # the pending rows' name is stranded
    [statement] = statements_reading_the_job_table(lambda: reader(timezone.now()))
    plan = explain(statement)
    assert CLAIM_INDEX in indexes_read(plan), plan
    assert all(node_type != "Seq Scan" for node_type, _ in scans_of_job_table(plan)), plan


def test_the_move_to_history_finds_its_oldest_day_from_one_entry_of_the_finish_index(history):
    from django_cronqueue.history.archive import postgresql as pg_history

    [statement] = captured_statements(
        lambda: pg_history._oldest_succeeded(connection, pg_history.EARLIEST)
    )
    plan = explain(statement)
    assert scans_of_job_table(plan) == [("Index Only Scan", "cronqueue_job_finished")]
    assert '"Sort"' not in json.dumps(plan)
