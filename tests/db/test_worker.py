"""The worker run in-process (``call_command("runjobs", ...)``): it leaves nothing behind.

Real ``runjobs`` processes are tested in tests/e2e and tests/reliability; here the worker
runs in the test's own process, as it does when a test suite or a script calls the
command, and must stop every thread it started and close every connection they opened.
"""

import signal
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from django_cronqueue import jobs
from django_cronqueue.models import Job, Worker
from django_cronqueue.registry import registry
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def database_sessions() -> int | None:
    """Sessions open on the test database (None on SQLite, which has none)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
        elif connection.vendor == "mysql":
            cursor.execute(
                "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
            )
        else:
            return None
        return cursor.fetchone()[0]


@pytest.fixture
def waits_for_a_heartbeat():
    """A job that returns once its worker's heartbeat has beaten (and so connected)."""

    @jobs.job(name="tests.worker.waits_for_a_heartbeat", timeout=30)
    def handler() -> None:
        registered = Worker.objects.get().last_seen
        deadline = time.monotonic() + 20
        while Worker.objects.get().last_seen == registered and time.monotonic() < deadline:
            time.sleep(0.05)

    yield handler
    registry.unregister("tests.worker.waits_for_a_heartbeat")


@pytest.mark.parametrize("mode", ["--burst", "--once"])
def test_an_in_process_run_stops_every_thread_it_started_and_closes_their_sessions(
    mode, waits_for_a_heartbeat
):
    for index in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"k{index}"})
    jobs.enqueue(waits_for_a_heartbeat)
    before_threads = set(threading.enumerate())
    before_sessions = database_sessions()

    with override_settings(CRONQUEUE={"LEASE": 1}):  # a heartbeat every 0.33 s
        call_command("runjobs", mode, "--concurrency", "3")

    assert Job.objects.filter(status="succeeded").count() == 6
    assert not Worker.objects.exists()
    assert database_sessions() == before_sessions
    left = [thread.name for thread in set(threading.enumerate()) - before_threads]
    assert left == []


def test_an_in_process_run_restores_the_callers_signal_handlers_and_connection_settings():
    jobs.enqueue(test_jobs.record, {"key": "k"})
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    settings_dict = connection.settings_dict

    call_command("runjobs", "--burst")

    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    assert connection.settings_dict is settings_dict
