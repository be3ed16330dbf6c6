"""The worker's own vacuum of the job table (``vacuum``) on a real database: it removes
the dead rows once they pass ``DEAD_ROWS``, not while a transaction is held open (it
could remove none), never inside a transaction, and only on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import connection, transaction

from django_cronqueue.db import clock as dbclock
from django_cronqueue.housekeeping import vacuum
from django_cronqueue.models import Job
from django_cronqueue.observe.storage import storage_health
from django_cronqueue.worker import Worker as RunjobsWorker
from tests.db.observe.test_storage_health import (
    make_dead_rows,
    postgresql_only,
    transaction_held_open,
)

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = Job._meta.db_table
LONG = 3600.0


def vacuums() -> int:
    """How many vacuums of the job table, not autovacuum's, have ended (the statistics)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = %s::regclass", [TABLE]
        )
        return int(cursor.fetchone()[0])


def vacuums_after(before: int) -> int:
    """The vacuum count once it passed ``before`` (before PostgreSQL 15 the statistics of
    a vacuum reach the sessions late), or as it stands after ten seconds. A vacuum that
    did not run is asserted with ``vacuums()``: this session's own vacuums are counted at
    once since PostgreSQL 15."""
    deadline = time.monotonic() + 10
    while (count := vacuums()) <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


def housekeep(worker: RunjobsWorker) -> None:
    """One pass of the worker's housekeeping, its clock measured (as its heartbeat does)
    and the job table's health read now."""
    worker.clock.update(dbclock.measure(connection.alias))
    worker.hold.next_check = 0.0
    worker._housekeep()


@postgresql_only
def test_the_vacuum_removes_the_job_table_s_dead_rows():
    make_dead_rows(50)
    before = vacuums()
    assert vacuum.vacuum_job_table() is True
    assert vacuums_after(before) == before + 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_del, n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [TABLE],
        )
        deleted, dead = cursor.fetchone()
    assert deleted >= 50
    assert dead == 0


@postgresql_only
def test_a_worker_vacuums_the_job_table_once_it_has_many_dead_rows(monkeypatch):
    monkeypatch.setattr(vacuum, "DEAD_ROWS", 40)
    monkeypatch.setattr(vacuum, "EVERY", dt.timedelta(0))  # whatever vacuumed before
    monkeypatch.setattr(vacuum, "SHARE", 0)  # "not again" below is EVERY's alone
    worker = RunjobsWorker(poll_interval=LONG)
    before = vacuums()
    housekeep(worker)
    assert vacuums() == before  # few dead rows: left to autovacuum
    make_dead_rows(50)
    housekeep(worker)
    assert vacuums_after(before) == before + 1
    monkeypatch.setattr(vacuum, "EVERY", dt.timedelta(hours=1))
    make_dead_rows(50)
    housekeep(worker)  # vacuumed less than EVERY ago: not again
    assert vacuums() == before + 1


@postgresql_only
def test_a_worker_does_not_vacuum_while_a_transaction_is_held_open(monkeypatch):
    monkeypatch.setattr(vacuum, "DEAD_ROWS", 40)
    monkeypatch.setattr(vacuum, "EVERY", dt.timedelta(0))
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.HELD_AFTER", 0.5)
    worker = RunjobsWorker(poll_interval=LONG)
    before = vacuums()
    with transaction_held_open():
        make_dead_rows(50)
        time.sleep(1.0)
        housekeep(worker)
        assert worker.floors.held is True
    assert vacuums() == before


def test_no_vacuum_inside_a_transaction_nor_elsewhere_than_on_postgresql():
    with transaction.atomic():
        assert vacuum.vacuum_job_table() is False  # VACUUM cannot run in a transaction
    if connection.vendor != "postgresql":
        assert vacuum.vacuum_job_table() is False


@postgresql_only
def test_a_role_that_does_not_own_the_job_table_does_not_try():
    role = "cronqueue_test_not_owner"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP ROLE IF EXISTS {role}")
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT {role} TO CURRENT_USER")
    make_dead_rows(50)
    before = vacuums()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {role}")
            try:
                assert vacuum.vacuum_job_table() is False
            finally:
                cursor.execute("RESET ROLE")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP ROLE {role}")
    assert vacuums() == before


@postgresql_only
def test_a_worker_s_next_vacuum_waits_a_share_of_what_its_last_one_took(monkeypatch):
    """On a table a held transaction left swollen a vacuum takes seconds (it reads every
    index whole): a worker's vacuums are spaced by SHARE times the last one's duration."""
    monkeypatch.setattr(vacuum, "DEAD_ROWS", 40)
    monkeypatch.setattr(vacuum, "EVERY", dt.timedelta(0))
    for share, second_runs in ((0, True), (1_000_000, False)):
        monkeypatch.setattr(vacuum, "SHARE", share)
        vacuums_of_a_worker = vacuum.Vacuums()
        make_dead_rows(50)
        assert vacuums_of_a_worker.check(storage_health(), held=False) is True
        make_dead_rows(50)
        assert vacuums_of_a_worker.check(storage_health(), held=False) is second_runs
