"""``observe.storage`` on a real database: the oldest open transaction and the job table's
dead rows (PostgreSQL only), as gauges of ``MetricsView``, lines of ``cronqueue_status``,
and the worker's warnings past ``WARN_TRANSACTION_AGE`` / ``WARN_DEAD_TUPLES``, once per
crossing. The open transaction is held by a second, real connection."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_cronqueue import jobs
from django_cronqueue.models import Job
from django_cronqueue.observe.storage import storage_health
from django_cronqueue.worker.storage_watch import StorageWatch
from tests.testapp import jobs as test_jobs
from tests.urls import METRICS_TOKEN

pytestmark = pytest.mark.django_db(transaction=True)

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="pg_stat_activity and n_dead_tup are PostgreSQL's"
)
HELD_SECONDS = 1.5


@contextmanager
def transaction_held_open() -> Iterator[int]:
    """Another session of the database in a transaction that holds back vacuum: its pid."""
    import psycopg

    with psycopg.connect(**connection.get_connection_params()) as other:
        other.execute("SET application_name = 'held-by-test'")
        other.commit()
        [(pid,)] = other.execute("SELECT pg_backend_pid()").fetchall()
        other.execute("SELECT txid_current()")  # now idle in transaction, with an xid
        try:
            yield pid
        finally:
            other.rollback()


def scrape(client):
    return client.get(reverse("metrics-token"), HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")


def make_dead_rows(count: int) -> None:
    """``count`` dead job rows, in the statistics at once."""
    jobs.enqueue_many(test_jobs.noop.name, [{}] * count)
    Job.objects.all().delete()
    with connection.cursor() as cursor:
        if connection.pg_version >= 150000:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT 1")
    deadline = time.monotonic() + 10
    while storage_health().dead_tuples < count and time.monotonic() < deadline:
        time.sleep(0.2)


@postgresql_only
def test_the_oldest_open_transaction_is_found_with_its_session():
    before = storage_health()
    assert before is not None
    with transaction_held_open() as pid:
        time.sleep(HELD_SECONDS)
        health = storage_health()
    assert health.oldest_transaction is not None
    assert health.oldest_transaction.pid == pid
    assert health.oldest_transaction.state == "idle in transaction"
    assert health.oldest_transaction.application_name == "held-by-test"
    assert health.oldest_transaction_age >= HELD_SECONDS
    after = storage_health()
    assert after.oldest_transaction is None or after.oldest_transaction.pid != pid


@postgresql_only
def test_the_metrics_expose_the_transaction_age_and_the_dead_rows(client):
    make_dead_rows(50)
    with transaction_held_open():
        time.sleep(HELD_SECONDS)
        response = scrape(client)
    assert response.status_code == 200
    found = {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert found["cronqueue_oldest_transaction_age_seconds"] >= HELD_SECONDS
    assert found["cronqueue_job_dead_tuples"] >= 50


@postgresql_only
def test_cronqueue_status_names_the_oldest_transaction_and_the_dead_rows():
    make_dead_rows(50)
    out = io.StringIO()
    with transaction_held_open() as pid:
        time.sleep(HELD_SECONDS)
        call_command("cronqueue_status", stdout=out)
    text = out.getvalue()
    assert "Oldest open transaction on the database: " in text
    assert f"(pid {pid}, idle in transaction, application 'held-by-test')" in text
    [dead_line] = [line for line in text.splitlines() if line.startswith("Dead job rows: ")]
    assert int(dead_line.removeprefix("Dead job rows: ")) >= 50


def storage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and record.name == "django_cronqueue"
    ]


@postgresql_only
def test_the_worker_warns_once_per_crossing_of_the_transaction_age(settings, caplog):
    settings.CRONQUEUE = {"WARN_TRANSACTION_AGE": 1, "WARN_DEAD_TUPLES": None}
    watch = StorageWatch(interval=0)
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        watch.check()
        assert storage_warnings(caplog) == []
        with transaction_held_open() as pid:
            time.sleep(HELD_SECONDS)
            watch.check()
            watch.check()  # still over: not again
        [warning] = storage_warnings(caplog)
        assert f"pid {pid}, idle in transaction" in warning
        assert "WARN_TRANSACTION_AGE" in warning
        watch.check()  # ended: back under
        with transaction_held_open():
            time.sleep(HELD_SECONDS)
            watch.check()  # a second crossing
    assert len(storage_warnings(caplog)) == 2


@postgresql_only
def test_the_worker_warns_once_past_the_dead_rows_threshold(settings, caplog):
    settings.CRONQUEUE = {"WARN_TRANSACTION_AGE": None, "WARN_DEAD_TUPLES": 20}
    watch = StorageWatch(interval=0)
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        watch.check()
        assert storage_warnings(caplog) == []
        make_dead_rows(50)
        watch.check()
        watch.check()
    [warning] = storage_warnings(caplog)
    assert "dead rows (more than WARN_DEAD_TUPLES, 20)" in warning


@postgresql_only
def test_the_watch_reads_at_most_once_per_interval(settings, django_assert_num_queries):
    settings.CRONQUEUE = {"WARN_TRANSACTION_AGE": 1}
    watch = StorageWatch(interval=60)
    with django_assert_num_queries(1):
        watch.check()
        watch.check()


def test_with_both_thresholds_off_the_watch_reads_nothing(settings, django_assert_num_queries):
    settings.CRONQUEUE = {"WARN_TRANSACTION_AGE": None, "WARN_DEAD_TUPLES": None}
    with django_assert_num_queries(0):
        StorageWatch(interval=0).check()


@pytest.mark.skipif(connection.vendor == "postgresql", reason="the figures are PostgreSQL's")
def test_elsewhere_there_are_no_storage_figures(client):
    assert storage_health() is None
    response = scrape(client)
    assert b"cronqueue_oldest_transaction_age_seconds" not in response.content
    assert b"cronqueue_job_dead_tuples" not in response.content
    out = io.StringIO()
    call_command("cronqueue_status", stdout=out)
    assert "Oldest open transaction" not in out.getvalue()
