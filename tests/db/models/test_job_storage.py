"""PostgreSQL: a lease renewal can be a HOT update (it writes no indexed column), and
migration 0015 gives the job table its fillfactor and autovacuum settings."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="HOT updates are PostgreSQL's"),
]

LEASE = dt.timedelta(seconds=30)


def indexed_columns() -> set[str]:
    """The job table's columns that some index keys on, includes, or names in its
    expressions or its partial predicate."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.attname, pg_get_expr(i.indexprs, i.indrelid), "
            "pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass",
            [Job._meta.db_table],
        )
        rows = cursor.fetchall()
    every = {field.column for field in Job._meta.concrete_fields}
    named = {column for column, _, _ in rows if column}
    texts = " ".join(
        text for _, expressions, predicate in rows for text in (expressions, predicate) if text
    )
    return named | {column for column in every if re.search(rf"\b{column}\b", texts)}


def renewal_set_columns() -> set[str]:
    """The columns a heartbeat's renewal writes, read off the statement it sends."""
    jobs.enqueue(test_jobs.noop.name, {})
    [job] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    with CaptureQueriesContext(connection) as captured:
        assert lifecycle.renew_leases([job], until=timezone.now() + LEASE) == 1
    [statement] = [query["sql"] for query in captured.captured_queries if "UPDATE" in query["sql"]]
    set_clause = statement.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return set(re.findall(r'"(\w+)"\s*=', set_clause))


def test_a_lease_renewal_writes_no_indexed_column():
    """What makes a renewal a HOT update (no index entry written) that the schema decides:
    no index covers what it writes, and the pages keep room (the fillfactor, below). The
    share of HOT renewals under load is measured by bench/scale.py --only churn."""
    written = renewal_set_columns()
    assert written == {"locked_until"}
    indexed = indexed_columns()
    assert {"status", "run_at", "priority", "started_at"} <= indexed  # it sees the indexes
    assert not written & indexed


def reloptions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [Job._meta.db_table]
        )
        [[options]] = cursor.fetchall()
    return dict(option.split("=", 1) for option in options or [])


def test_the_job_table_keeps_room_for_renewals_and_is_vacuumed_promptly():
    options = reloptions()
    assert int(options["fillfactor"]) < 100
    assert float(options["autovacuum_vacuum_scale_factor"]) < 0.2  # PostgreSQL's default
    assert float(options["autovacuum_analyze_scale_factor"]) < 0.1
    assert float(options["autovacuum_vacuum_insert_scale_factor"]) < 0.2
    assert float(options["autovacuum_vacuum_cost_delay"]) == 0


def test_the_index_of_running_rows_leaves_the_lease_expiry_out():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [Job._meta.db_table])
        definitions = [definition for (definition,) in cursor.fetchall()]
    assert not [definition for definition in definitions if "locked_until" in definition]
