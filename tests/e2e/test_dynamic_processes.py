"""Dynamic schedules with real processes: six schedulers create each occurrence exactly
once, and an edit reaches a running ``runjobs`` worker at its next tick."""

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from django_cronqueue.models import CronSchedule, Job, Worker
from django_cronqueue.schedules import dynamic
from tests.testapp.models import SideEffect

from .conftest import ROOT, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

START = dt.datetime(2026, 11, 1, 4, 30, 20, tzinfo=dt.timezone.utc)  # New York's fall-back night
MINUTES = 60
TENANTS = range(1, 5)
REPORT = "testapp.send_report"


def test_six_processes_create_and_run_each_dynamic_occurrence_exactly_once(tmp_path):
    armed = START  # as the code schedules of tick_simulated are armed: 04:31 comes first
    for tenant in TENANTS:  # four schedules of one job, due at the same instants
        dynamic.create(
            now=armed,
            name=f"reports.tenant-{tenant}",
            job=REPORT,
            payload={"tenant_id": tenant},
            expression="* * * * *",
            tz="America/New_York",
        )
    dynamic.create(
        now=armed,
        name="reports.seven",
        job=REPORT,
        payload={"tenant_id": 7, "format": "pdf"},
        expression="*/7 * * * *",
        tz="Australia/Lord_Howe",
        catch_up="all",
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
        # Simulated clocks differ between processes: a long lease keeps one process's
        # "now" from expiring another's claims, which is not what this test is about.
        "CRONQUEUE_TEST_SETTINGS": json.dumps({"LEASE": 6 * 3600}),
    }
    command = [sys.executable, "-m", "tests.e2e.tick_simulated", START.isoformat()]
    subprocess.run([*command, "0", "60"], env=env, cwd=ROOT, check=True, timeout=120)
    processes = [
        subprocess.Popen(
            [*command, str(MINUTES), "20"],
            env=env,
            cwd=ROOT,
            stdout=open(tmp_path / f"ticker-{index}.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for index in range(6)
    ]
    for index, process in enumerate(processes):
        assert process.wait(600) == 0, (tmp_path / f"ticker-{index}.log").read_text()

    for tenant in TENANTS:
        tenant_rows = Job.objects.filter(schedule=f"reports.tenant-{tenant}")
        assert tenant_rows.count() == MINUTES  # 04:31 ... 05:30 UTC, one per minute
        assert tenant_rows.values("scheduled_for").distinct().count() == MINUTES
        assert {row.payload["tenant_id"] for row in tenant_rows} == {tenant}
    seven_rows = Job.objects.filter(schedule="reports.seven")
    assert seven_rows.values("scheduled_for").distinct().count() == seven_rows.count() > 0

    dynamic_rows = Job.objects.filter(name=REPORT)
    assert set(dynamic_rows.values_list("status", flat=True)) == {"succeeded"}
    assert set(dynamic_rows.values_list("attempts", flat=True)) == {1}
    runs = (
        SideEffect.objects.filter(key__startswith="report ").values("key").annotate(n=Count("id"))
    )
    assert runs.count() == dynamic_rows.count() == len(TENANTS) * MINUTES + seven_rows.count()
    assert {row["n"] for row in runs} == {1}


def test_an_edit_takes_effect_at_a_running_workers_next_tick(runjobs):
    schedule = CronSchedule.objects.create_dynamic(
        name="reports.tenant-42",
        job=REPORT,
        payload={"tenant_id": 42},
        expression="0 0 1 1 *",
        tz="UTC",
    )
    worker = runjobs.start("--poll-interval", "0.2")
    wait_until(lambda: Worker.objects.exists())
    time.sleep(1)  # it has ticked, and read the schedule as it was
    # The edit and the clock read after it fall in the same minute: near its end, the edit
    # could land in one minute and the read in the next (the expected occurrence a minute
    # late).
    now = timezone.now()
    if now.second >= 55:
        time.sleep(60.1 - now.second - now.microsecond / 1e6)

    schedule.edit(expression="* * * * *", payload={"tenant_id": 43, "format": "pdf"})
    edited = timezone.now()
    first = edited.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    ran = wait_until(lambda: SideEffect.objects.filter(key__startswith="report ").first(), 90)

    assert worker.poll() is None, runjobs.log(worker)  # the same process, not restarted
    assert ran.pid == worker.pid
    assert ran.key == f"report 43 pdf {first.isoformat()}"
    [job] = Job.objects.filter(schedule="reports.tenant-42")
    assert (job.scheduled_for, job.payload) == (first, {"tenant_id": 43, "format": "pdf"})
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
