"""PostgreSQL: a lease renewal is a HOT update (no index entry written), and migration
0015 gives the job table its fillfactor and autovacuum settings."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="HOT updates are PostgreSQL's"),
]

RUNNING = 100
PENDING = 2_000
RENEWALS_EACH = 30
LEASE = dt.timedelta(seconds=30)
BEAT_PAUSE = 0.2


def update_counts() -> tuple[int, int]:
    """(n_tup_upd, n_tup_hot_upd) of the job table, with this backend's own updates in."""
    with connection.cursor() as cursor:
        if connection.pg_version >= 150000:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [Job._meta.db_table],
        )
        [(updated, hot)] = cursor.fetchall()
    return updated, hot


def settled_update_counts(at_least: int) -> tuple[int, int]:
    """The counts once at least ``at_least`` updates are in them (the statistics reach the
    shared counters a moment after the statements)."""
    deadline = time.monotonic() + 10
    counts = update_counts()
    while counts[0] < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
        counts = update_counts()
    return counts


def other_snapshots() -> list[tuple]:
    """Other sessions of this database whose snapshot or transaction holds back the
    pruning of dead row versions (a worker process a test left running, say)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, application_name, left(query, 100) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)"
        )
        return cursor.fetchall()


def wait_for_no_other_snapshot() -> None:
    """A renewal is HOT only if the page has room, which pruning the versions dead to
    every transaction makes: none may be held back by another session."""
    deadline = time.monotonic() + 30
    while (held := other_snapshots()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not held, f"another session holds back pruning: {held}"


def test_lease_renewals_are_hot_updates():
    jobs.enqueue_many(test_jobs.noop.name, [{}] * PENDING)
    now = timezone.now()
    running = claim_due(now, queues=None, limit=RUNNING, worker_id="w")
    assert len(running) == RUNNING
    updated_before, hot_before = settled_update_counts(RUNNING)
    wait_for_no_other_snapshot()
    renewed = 0
    for beat in range(1, RENEWALS_EACH + 1):
        # A heartbeat comes every LEASE / 3 seconds; a pause between beats lets the
        # transactions that began before the last one (on a busy server, in any
        # database) end, so that its versions can be pruned to make room.
        time.sleep(BEAT_PAUSE)
        renewed += lifecycle.renew_leases(
            running, until=now + LEASE + beat * dt.timedelta(seconds=10)
        )
    assert renewed == RUNNING * RENEWALS_EACH
    updated, hot = settled_update_counts(updated_before + renewed)
    assert updated - updated_before == renewed
    assert hot - hot_before >= 0.9 * renewed, f"{hot - hot_before} of {renewed} renewals were HOT"


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
