"""A worker whose host clock is wrong, with real ``runjobs`` processes (issue 11, part 6).

The skewed worker's ``django.utils.timezone.now`` runs ``SKEW`` seconds ahead of the real
clock and the database's (``CRONQUEUE_TEST_CLOCK_SKEW``, see tests/settings.py): by its
own clock, every lease that a normal worker holds expired long ago. A normal worker holds
a job whose handler runs until the test releases it; the skewed worker must never take
that live lease.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_cronqueue import jobs
from django_cronqueue.models import Job, Worker
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import log_records, marks, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE = 3.0  # heartbeats every second
SKEW = 10 * LEASE  # how far the skewed worker's clock runs ahead
SETTINGS = {"LEASE": LEASE, "POLL_INTERVAL": 0.2}
SKEWED = {"CRONQUEUE_TEST_CLOCK_SKEW": str(SKEW)}


def worker_row(process) -> Worker | None:
    return Worker.objects.filter(pid=process.pid).first()


def wait_for_heartbeats(process, count: int) -> None:
    """Until the worker's row has been renewed ``count`` times more; its slots and its
    housekeeping have polled all along (every 0.2 s)."""
    for _ in range(count):
        seen = worker_row(process).last_seen
        wait_until(lambda seen=seen: worker_row(process).last_seen > seen, timeout=30)


@pytest.fixture
def held_job(runjobs):
    """A job held by a normal worker (on queue "held"), its handler running until released."""
    job = jobs.enqueue(rel.held, {"key": "held"}, queue="held")
    holder = runjobs.start("--queue", "held", settings=SETTINGS)
    wait_until(lambda: marks("start"), timeout=30)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == ("running", 1)
    return row, holder


def assert_still_held(held: Job) -> None:
    row = Job.objects.get(pk=held.pk)
    assert (row.status, row.attempts, row.lock_token, row.worker_id) == (
        "running",
        1,
        held.lock_token,
        held.worker_id,
    )


def release_and_finish(runjobs, held: Job, holder) -> None:
    """The handler ends; its first and only run succeeds in the holder."""
    SideEffect.objects.create(key="release:held", pid=0)
    wait_until(lambda: Job.objects.filter(pk=held.pk, status="succeeded").exists(), timeout=30)
    row = Job.objects.get(pk=held.pk)
    assert (row.attempts, row.result) == (1, {"pid": holder.pid})
    assert [key for key, _, _ in marks("start") if key == "held"] == ["held"]
    assert runjobs.stop(holder) == 0, runjobs.log(holder)


def test_a_worker_whose_clock_runs_ahead_by_more_than_a_lease_takes_no_live_lease(
    runjobs, held_job
):
    held, holder = held_job
    # A limit far above the skew: the worker claims, and only its correction protects the lease.
    skewed = runjobs.start(
        "--queue", "probe", settings={**SETTINGS, "MAX_CLOCK_SKEW": 10 * SKEW}, env=SKEWED
    )
    wait_until(lambda: worker_row(skewed), timeout=30)
    probe = jobs.enqueue(rel.tracked, {"key": "probe"}, queue="probe")
    # It claims and runs: its housekeeping (lease recovery included) ran before its first
    # claim, and goes on every poll.
    wait_until(lambda: Job.objects.filter(pk=probe.pk, status="succeeded").exists(), timeout=30)
    wait_for_heartbeats(skewed, 2)

    assert_still_held(held)
    assert worker_row(skewed).clock_offset == pytest.approx(SKEW, abs=2)
    assert worker_row(holder).clock_offset == pytest.approx(0, abs=2)
    assert runjobs.stop(skewed) == 0, runjobs.log(skewed)
    release_and_finish(runjobs, held, holder)


def test_a_worker_whose_clock_is_off_beyond_max_clock_skew_claims_nothing_and_fails_the_check(
    runjobs, held_job, settings
):
    held, holder = held_job
    probe = jobs.enqueue(rel.tracked, {"key": "probe"}, queue="probe")
    # MAX_CLOCK_SKEW is LEASE / 3 = 1 s by default.
    skewed = runjobs.start("--queue", "probe", settings=SETTINGS, env=SKEWED)
    wait_until(lambda: worker_row(skewed), timeout=30)
    wait_for_heartbeats(skewed, 2)

    # Neither the due job of its own queue nor the live lease of the other worker.
    row = Job.objects.get(pk=probe.pk)
    assert (row.status, row.attempts) == ("pending", 0)
    assert_still_held(held)
    # One error for the state change, however many heartbeats measured it since.
    errors = [text for level, text in log_records(runjobs.log(skewed)) if level == "ERROR"]
    assert len(errors) == 1, errors
    assert (
        "s ahead of the database's, more than MAX_CLOCK_SKEW (1s); claiming no jobs" in (errors[0])
    )
    # The health probe fails, naming the worker and its offset.
    settings.CRONQUEUE = {**settings.CRONQUEUE, **SETTINGS}
    stderr = io.StringIO()
    with pytest.raises(CommandError):
        call_command("cronqueue_status", "--check", stdout=io.StringIO(), stderr=stderr)
    [reason] = [line for line in stderr.getvalue().splitlines() if "clock" in line]
    offset = worker_row(skewed).clock_offset
    assert reason == (
        f"FAIL: worker {worker_row(skewed).id}: its host's clock is {offset:.1f}s ahead of the "
        "database's, more than MAX_CLOCK_SKEW (1s), so it claims no jobs; fix the time "
        "synchronisation (NTP) of its host or of the database server."
    )
    assert offset == pytest.approx(SKEW, abs=2)

    assert runjobs.stop(skewed) == 0, runjobs.log(skewed)
    assert Job.objects.get(pk=probe.pk).status == "pending"
    release_and_finish(runjobs, held, holder)
