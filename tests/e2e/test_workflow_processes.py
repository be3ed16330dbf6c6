"""Workflows with real ``runjobs`` processes: a group's callback runs exactly once when its
last members finish on different workers, a chain whose worker is killed still completes
in order, and a failure cancels what waited for it."""

import signal

import pytest
from django.db import connection
from django.db.models import Count

from django_cronqueue import jobs
from django_cronqueue.models import Batch, Job
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

from .conftest import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUICK = {"POLL_INTERVAL": 0.2}


def runs_of(key):
    return SideEffect.objects.filter(key=key).count()


def finished(job):
    return Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled"]).exists()


def test_a_group_callback_runs_exactly_once_when_its_members_end_on_four_workers(runjobs):
    size = 1000 if connection.vendor != "sqlite" else 200
    batch = (
        jobs.group([test_jobs.record.s(key=f"member-{n}") for n in range(size)])
        .then(test_jobs.record.s(key="then"))
        .finally_(test_jobs.record.s(key="finally"))
        .enqueue()
    )
    workers = [runjobs.start("--concurrency", "2", settings=QUICK) for _ in range(4)]
    try:
        wait_until(lambda: finished(batch.then_job) and finished(batch.finally_job), timeout=180)
    finally:
        for worker in workers:
            runjobs.stop(worker)
    batch.refresh_from_db()
    assert (batch.size, batch.succeeded, batch.failed) == (size, size, 0)
    assert batch.finished_at is not None
    assert (runs_of("then"), runs_of("finally")) == (1, 1)
    assert SideEffect.objects.count() == size + 2
    assert not SideEffect.objects.values("key").annotate(n=Count("id")).filter(n__gt=1).exists()
    # Which workers ran the members is the scheduler's business; the guarantee is the
    # callbacks' exactly-once, however the members were spread.
    assert Job.objects.get(pk=batch.then_job_id).attempts == 1


def test_a_chain_whose_worker_is_killed_mid_job_completes_in_order(runjobs):
    first, slow, last = jobs.chain(
        test_jobs.record.s(key="first"),
        test_jobs.slow_record.s(key="slow", seconds=2),
        test_jobs.record.s(key="last"),
    ).enqueue()
    settings = {"LEASE": 2, **QUICK}
    doomed = runjobs.start(settings=settings)
    wait_until(lambda: Job.objects.filter(pk=slow.pk, status="running").exists())
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    assert Job.objects.get(pk=last.pk).blocked  # still waiting for the killed job
    rescuer = runjobs.start(settings=settings)
    try:
        wait_until(lambda: finished(last), timeout=60)
    finally:
        runjobs.stop(rescuer)
    assert list(SideEffect.objects.order_by("id").values_list("key", flat=True)) == [
        "first",
        "slow",
        "last",
    ]
    assert [Job.objects.get(pk=job.pk).status for job in (first, slow, last)] == ["succeeded"] * 3
    assert Job.objects.get(pk=slow.pk).attempts == 2


def test_a_failure_cancels_its_downstream_and_a_groups_then(runjobs):
    _, failing, after = jobs.chain(
        test_jobs.record.s(key="a"),
        test_jobs.fails_now.s(key="b"),
        test_jobs.record.s(key="c"),
    ).enqueue()
    batch = (
        jobs.group([test_jobs.record.s(key="m1"), test_jobs.fails_now.s(key="m2")])
        .then(test_jobs.record.s(key="then"))
        .finally_(test_jobs.record.s(key="finally"))
        .enqueue()
    )
    workers = [runjobs.start("--concurrency", "2", settings=QUICK) for _ in range(2)]
    try:
        wait_until(
            lambda: finished(after) and finished(batch.then_job) and finished(batch.finally_job),
            timeout=60,
        )
    finally:
        for worker in workers:
            runjobs.stop(worker)
    after.refresh_from_db()
    assert after.status == "cancelled"
    assert after.last_error == f"upstream job #{failing.pk} (testapp.fails_now) failed"
    then_job = Job.objects.get(pk=batch.then_job_id)
    assert then_job.status == "cancelled"
    assert "(testapp.fails_now) failed" in then_job.last_error
    assert Job.objects.get(pk=batch.finally_job_id).status == "succeeded"
    assert (runs_of("c"), runs_of("then"), runs_of("finally")) == (0, 0, 1)
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed) == (1, 1)
    assert Batch.objects.count() == 1
