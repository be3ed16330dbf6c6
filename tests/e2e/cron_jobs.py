"""Schedules for the multi-process cron test; imported only by its child processes."""

import os

from django_cronqueue import jobs
from tests.testapp.models import SideEffect


@jobs.cron("* * * * *", name="e2e.every_minute", tz="America/New_York")
def every_minute(run: jobs.CronRun) -> None:
    SideEffect.objects.create(key=f"minute {run.scheduled_for.isoformat()}", pid=os.getpid())


@jobs.cron("*/7 * * * *", name="e2e.every_seven", tz="Australia/Lord_Howe", catch_up="all")
def every_seven(run: jobs.CronRun) -> None:
    SideEffect.objects.create(key=f"seven {run.scheduled_for.isoformat()}", pid=os.getpid())
