"""Database faults (SPEC section 5: "it logs, backs off, reconnects and goes on").

A TCP proxy between the workers and the server plays an outage that only the workers
see (connections cut, new ones refused), so these tests run beside other test runs;
pg_terminate_backend kills the workers' PostgreSQL sessions; and one test, marked
``disruptive`` (deselect with ``-m "not disruptive"``), restarts PostgreSQL itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from django.db import DatabaseError, InterfaceError, connection

from django_cronqueue import jobs
from django_cronqueue.models import Job, Worker
from tests.reliability import jobs as rel

from .conftest import free_port, marks, needs_server, port_env, postgres_only, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

UNAVAILABLE = re.compile(r"database unavailable \((\w+): .*\); retrying in ([\d.]+)s")


def settled(count: int) -> bool:
    """Every job succeeded, checked on a connection that may have been cut meanwhile."""
    try:
        return Job.objects.filter(status="succeeded").count() == count
    except (DatabaseError, InterfaceError):
        connection.close()
        return False


def assert_all_ran(count: int) -> None:
    assert Job.objects.filter(status="succeeded").count() == count
    assert not Job.objects.exclude(status="succeeded").exists()  # none lost, none running
    ended = {key for key, _, _ in marks("end")}
    assert ended == {f"j{i}" for i in range(count)}


def enqueue_work(count: int, seconds: float = 0.02) -> None:
    jobs.enqueue_many(rel.tracked, [{"key": f"j{i}", "seconds": seconds} for i in range(count)])


@needs_server
def test_a_worker_started_while_the_database_is_down_waits_retries_and_then_works(runjobs, proxy):
    enqueue_work(3, seconds=0)
    worker = runjobs.start(env=port_env(proxy.port), settings={"POLL_INTERVAL": 0.2})
    wait_until(lambda: len(UNAVAILABLE.findall(runjobs.log(worker))) >= 3, timeout=30)
    assert worker.poll() is None  # waiting, not crashed
    log = runjobs.log(worker)
    delays = [float(delay) for _, delay in UNAVAILABLE.findall(log)]
    assert delays[:3] == [0.5, 1.0, 2.0]  # it backs off, it does not spin
    assert "Traceback" not in log
    assert "Worker" in log and "starting" in log

    proxy.start()  # the database is back
    wait_until(lambda: Job.objects.filter(status="succeeded").count() == 3, timeout=30)
    log = runjobs.log(worker)
    assert "database is reachable again" in log
    assert runjobs.stop(worker) == 0, log
    assert "Traceback" not in runjobs.log(worker)


@needs_server
def test_a_worker_waiting_for_the_database_stops_at_once_on_sigterm(runjobs):
    worker = runjobs.start(env=port_env(free_port()))
    wait_until(lambda: UNAVAILABLE.search(runjobs.log(worker)), timeout=30)
    started = time.monotonic()
    assert runjobs.stop(worker, timeout=10) == 0, runjobs.log(worker)
    assert time.monotonic() - started < 5


@needs_server
def test_an_outage_while_working_is_ridden_out(runjobs, proxy):
    count = 300
    enqueue_work(count)
    proxy.start()
    settings = {"LEASE": 5, "POLL_INTERVAL": 0.2}
    workers = [
        runjobs.start("--concurrency", "2", env=port_env(proxy.port), settings=settings)
        for _ in range(2)
    ]
    wait_until(lambda: len(marks("end")) >= 60, timeout=60)
    proxy.stop()  # the database "goes down" for the workers
    time.sleep(3)
    assert all(worker.poll() is None for worker in workers)
    proxy.start()
    wait_until(lambda: settled(count), timeout=90, interval=0.25)
    assert_all_ran(count)
    for worker in workers:
        log = runjobs.log(worker)
        assert UNAVAILABLE.search(log), log[-3000:]
        assert runjobs.stop(worker) == 0, log[-3000:]


@postgres_only
def test_killed_postgres_sessions_are_reconnected(runjobs):
    count = 300
    enqueue_work(count)
    settings = {"LEASE": 5, "POLL_INTERVAL": 0.2}
    workers = [runjobs.start("--concurrency", "2", settings=settings) for _ in range(2)]
    wait_until(lambda: Worker.objects.count() == 2, timeout=30)
    killed = 0
    for _ in range(5):
        time.sleep(0.8)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            killed += cursor.fetchone()[0]
    assert killed >= 5
    wait_until(lambda: settled(count), timeout=90, interval=0.25)
    assert_all_ran(count)
    for worker in workers:
        log = runjobs.log(worker)
        assert worker.poll() is None, log[-3000:]
        assert UNAVAILABLE.search(log) or "could not record" in log or "raised" in log
        assert runjobs.stop(worker) == 0, log[-3000:]
    # The LISTEN connection was cut too and came back.
    assert "LISTEN connection lost" in runjobs.logs()


# --- restarting PostgreSQL itself ----------------------------------------------------


def postgres_cluster() -> tuple[str, str]:
    versions = sorted(os.listdir("/etc/postgresql")) if Path("/etc/postgresql").is_dir() else []
    if not versions:
        pytest.skip("no local PostgreSQL cluster to restart (/etc/postgresql)")
    return versions[-1], "main"


def wait_for_a_quiet_server(timeout: float = 60.0, quiet_for: float = 5.0) -> None:
    """Restarting the server cuts every client: wait until no other database has been
    in use for ``quiet_for`` seconds (another test run on this machine is idle only
    between two of its tests), or skip. CRONQUEUE_TEST_DISRUPTIVE=force skips the wait."""
    if os.environ.get("CRONQUEUE_TEST_DISRUPTIVE") == "force":
        return
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND datname IS DISTINCT FROM current_database()"
            )
            others = cursor.fetchone()[0]
        if others:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        if quiet_since is not None and time.monotonic() - quiet_since >= quiet_for:
            return
        if time.monotonic() > deadline:
            pytest.skip(
                f"PostgreSQL was not free of other sessions for {quiet_for:g}s within "
                f"{timeout:g}s; not restarting it under them "
                "(CRONQUEUE_TEST_DISRUPTIVE=force restarts anyway)"
            )
        time.sleep(0.2)


@postgres_only
@pytest.mark.disruptive
def test_a_postgres_restart_while_working_is_ridden_out(runjobs):
    version, cluster = postgres_cluster()
    count = 300
    enqueue_work(count)
    settings = {"LEASE": 5, "POLL_INTERVAL": 0.2}
    workers = [runjobs.start("--concurrency", "2", settings=settings) for _ in range(2)]
    wait_until(lambda: len(marks("end")) >= 60, timeout=60)
    wait_for_a_quiet_server()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart"],
        check=True,
        timeout=60,
    )
    connection.close()  # this process's session died with the server
    wait_until(lambda: settled(count), timeout=120, interval=0.25)
    assert_all_ran(count)
    for worker in workers:
        log = runjobs.log(worker)
        assert worker.poll() is None, log[-3000:]
        assert UNAVAILABLE.search(log), log[-3000:]
        assert runjobs.stop(worker) == 0, log[-3000:]
