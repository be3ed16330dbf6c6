"""Six processes ticking the same simulated two hours create and run every cron
occurrence exactly once."""

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
from django.db import connection
from django.db.models import Count

from django_cronqueue.models import Job
from tests.testapp.models import SideEffect

from .conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

START = dt.datetime(2026, 11, 1, 4, 30, 20, tzinfo=dt.timezone.utc)  # New York's fall-back night
MINUTES = 120


def test_six_processes_create_and_run_each_occurrence_exactly_once(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
        # Simulated clocks differ between processes: a long lease keeps one process's
        # "now" from expiring another's claims, which is not what this test is about.
        "CRONQUEUE_TEST_SETTINGS": json.dumps({"LEASE": 6 * 3600}),
    }
    # Arm both schedules once, so that every process starts from the same cursor.
    arm = [sys.executable, "-m", "tests.e2e.tick_simulated", START.isoformat(), "0", "60"]
    subprocess.run(arm, env=env, cwd=ROOT, check=True, timeout=120)
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e.tick_simulated",
                START.isoformat(),
                str(MINUTES),
                "20",
            ],
            env=env,
            cwd=ROOT,
            stdout=open(tmp_path / f"ticker-{index}.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for index in range(6)
    ]
    for index, process in enumerate(processes):
        assert process.wait(600) == 0, (tmp_path / f"ticker-{index}.log").read_text()

    minute_rows = Job.objects.filter(name="e2e.every_minute")
    assert minute_rows.count() == MINUTES  # 04:31 ... 06:30 UTC, one per minute
    assert minute_rows.values("scheduled_for").distinct().count() == MINUTES
    seven_rows = Job.objects.filter(name="e2e.every_seven")
    assert seven_rows.values("scheduled_for").distinct().count() == seven_rows.count() > 0

    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    runs = SideEffect.objects.values("key").annotate(n=Count("id"))
    assert runs.count() == Job.objects.count()
    assert {row["n"] for row in runs} == {1}
