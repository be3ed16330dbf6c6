"""Registering throw-away cron schedules in tests."""

import contextlib
import datetime as dt
from zoneinfo import ZoneInfo

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry

UTC = dt.timezone.utc
RUNS: list[jobs.CronRun] = []


@contextlib.contextmanager
def schedule(expression, name="tests.schedule", **options):
    """Register ``name`` as a cron schedule whose handler appends its CronRun to RUNS."""
    RUNS.clear()

    def handler(run: jobs.CronRun) -> None:
        RUNS.append(run)

    definition = jobs.cron(expression, name=name, **options)(handler)
    try:
        yield definition
    finally:
        registry.unregister(name)


def local(zone: str, *args: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=ZoneInfo(zone), fold=fold)


def minutes(start: dt.datetime, end: dt.datetime, step: int = 1):
    """Every ``step`` minutes from start (inclusive) to end (exclusive), in UTC."""
    now = start.astimezone(UTC)
    while now < end:
        yield now
        now += dt.timedelta(minutes=step)
