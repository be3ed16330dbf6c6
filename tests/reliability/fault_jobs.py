"""The jobs of the fault-injection run (tests/reliability/faults.py).

Each run records its start and its end as ``SideEffect`` rows, keyed by job and attempt:
``fault-start:<job>:<attempt>:<worker pid>:<claimed at>`` and ``fault-end:<job>:<attempt>``
(``pid``: the process that ran the handler, a child in the process pool). The claim's instant
(the row's ``started_at``, epoch seconds, or ``-`` when the row had moved on to a later
claim) lets the checker tell when another run was allowed to begin. The end is written in
a ``finally`` and retried across a dead connection, so a run without an end was killed.
The workers discover this module through ``CRONQUEUE["DISCOVER"]``, the harness imports it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection
from django.dispatch import receiver

from django_cronqueue import jobs, signals
from django_cronqueue.models import Job
from tests.testapp.models import SideEffect

START = "fault-start"
END = "fault-end"
REFUSED = "fault-refused"
RECOVERED = "fault-recovered"
RETRIES = 40  # far more attempts than the faults can take from one job


def short_wait(attempt: int) -> float:
    return 0.1


def record_start() -> None:
    """The run's start; when the database refuses the handler's first query, that refusal
    (``fault-refused:<job>:<attempt>:<error>``), and the attempt fails."""
    context = jobs.current()
    assert context is not None
    try:
        # The row's claim instant, while the row is still this attempt's: a handler that
        # starts after its lease ran out (its worker stopped) finds the row moved on.
        claimed_at = (
            Job.objects.filter(pk=context.job_id, attempts=context.attempt)
            .values_list("started_at", flat=True)
            .first()
        )
        claimed = f"{claimed_at.timestamp():.3f}" if claimed_at else "-"
        key = f"{START}:{context.job_id}:{context.attempt}:{worker_pid()}:{claimed}"
        SideEffect.objects.create(key=key, pid=os.getpid())
    except DatabaseError as error:
        write_aside(f"{REFUSED}:{context.job_id}:{context.attempt}:{type(error).__name__}")
        raise


def worker_pid() -> int:
    """The ``runjobs`` process this handler runs for: this process, or in the process
    pool the parent of its parent (the forker, a fork of the worker with its command line)."""
    parent = os.getppid()
    if b"runjobs" not in Path(f"/proc/{parent}/cmdline").read_bytes():
        return os.getpid()
    stat = Path(f"/proc/{parent}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def write_aside(key: str) -> None:
    """Written on a connection of its own, opened and closed here: the handler's own
    connection is left as it is, for the pool to renew (or not)."""
    import psycopg

    settings = connection.settings_dict
    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(
                host=settings["HOST"],
                port=settings["PORT"],
                dbname=settings["NAME"],
                user=settings["USER"],
                autocommit=True,
                prepare_threshold=None,
            ) as aside:
                aside.execute(
                    f"INSERT INTO {SideEffect._meta.db_table} (key, pid, created_at) "
                    "VALUES (%s, %s, now())",
                    [key, os.getpid()],
                )
            return
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def record_end(job_id: int, attempt: int) -> None:
    write_surely(f"{END}:{job_id}:{attempt}")


def write_surely(key: str) -> None:
    """Written whatever happens to the connection: a cut session or a restarting server
    makes it retry on a new connection, for up to a minute."""
    deadline = time.monotonic() + 60
    while True:
        try:
            SideEffect.objects.create(key=key, pid=os.getpid())
            return
        except DatabaseError:
            if time.monotonic() > deadline:
                raise
            connection.close()
            time.sleep(0.2)


@jobs.job(name="rel.fault.sync", retries=RETRIES, backoff=short_wait)
def fault_sync(seconds: float) -> None:
    context = jobs.current()
    assert context is not None
    record_start()
    try:
        time.sleep(seconds)
    finally:
        record_end(context.job_id, context.attempt)


@jobs.job(name="rel.fault.async", retries=RETRIES, backoff=short_wait)
async def fault_async(seconds: float) -> None:
    context = jobs.current()
    assert context is not None
    await sync_to_async(record_start)()
    try:
        await asyncio.sleep(seconds)
    finally:
        await sync_to_async(record_end)(context.job_id, context.attempt)


@receiver(signals.job_retrying)
def record_recovery(sender: str, job: Job, exc: BaseException, **kwargs: object) -> None:
    """A job made pending again after its attempt ended (``fault-recovered:<job>:<attempt>``,
    at the database's clock): its lease found expired, or its failure recorded late by its
    worker once it resumed. The instant it came back."""
    if sender in (fault_sync.name, fault_async.name):
        write_aside(f"{RECOVERED}:{job.pk}:{job.attempts}")
