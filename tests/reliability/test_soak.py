"""The soak, reduced to 5,000 jobs for CI (the full 100,000: ``python bench/soak.py``)."""

from __future__ import annotations

import os

import pytest

from .conftest import postgres_only
from .soak import run_soak

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

COUNT = int(os.environ.get("CRONQUEUE_SOAK_JOBS", "5000"))


@postgres_only
def test_soak_every_job_accounted_for_exactly(runjobs):
    try:
        report = run_soak(
            lambda *args: runjobs.start(*args, settings={"POLL_INTERVAL": 0.2}),
            count=COUNT,
            workers=4,
            concurrency=2,
            timeout=600,
        )
    except Exception:
        runjobs.dump_stacks()
        for index in range(len(runjobs.processes)):  # shown by pytest with the failure
            print(
                f"--- worker {index}, last lines:\n"
                + "\n".join(runjobs.log(index).splitlines()[-30:])
            )
        raise
    print("\n".join(report.lines()))
    assert report.problems() == [], "\n".join(report.lines())
    assert report.succeeded + report.failed == COUNT
    assert report.attempts > COUNT  # the random failures were retried
    # Memory stays flat: no worker grew by more than 20 MB after its warm-up.
    for start, end in zip(report.rss_start_kb, report.rss_end_kb, strict=True):
        assert start > 0, report.lines()
        assert end - start < 20 * 1024, report.lines()
