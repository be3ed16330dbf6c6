"""Eager mode (django_cronqueue.enqueueing.eager): with CRONQUEUE["EAGER"] (or testing.eager()),
an enqueue writes the row and runs its handler at once, through the worker's code."""

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from django_cronqueue import jobs, signals, testing
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job
from tests.cron_helpers import RUNS, schedule
from tests.factories import CronScheduleFactory
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


def test_enqueue_is_not_eager_by_default():
    job = jobs.enqueue(test_jobs.record, {"key": "a"})
    assert job.status == "pending"
    assert not SideEffect.objects.exists()


def test_eager_enqueue_runs_the_handler_at_once_and_records_the_outcome():
    succeeded = []

    def receiver(sender, **kwargs):
        succeeded.append(sender)

    signals.job_succeeded.connect(receiver)
    try:
        with testing.eager():
            job = jobs.enqueue(test_jobs.record, {"key": "now"}, delay=3600)
            value = test_jobs.returns_value.enqueue(value=21)
    finally:
        signals.job_succeeded.disconnect(receiver)
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["now"]
    assert (job.status, job.attempts, job.finished_at is not None) == ("succeeded", 1, True)
    assert job.worker_id.startswith("eager:")
    assert (value.status, value.result) == ("succeeded", {"doubled": 42})
    assert Job.objects.get(pk=job.pk).status == "succeeded"
    assert succeeded == ["testapp.record", "testapp.returns_value"]
    testing.assert_enqueued(test_jobs.record, {"key": "now"}, count=1)


def test_eager_failure_runs_every_attempt_then_fails():
    with testing.eager():
        job = jobs.enqueue(test_jobs.always_fails, {"reason": "nope"})
    assert (job.status, job.attempts, job.max_attempts) == ("failed", 3, 3)
    assert job.last_error == "RuntimeError: nope"
    assert "RuntimeError: nope" in job.traceback


def test_eager_mode_calls_on_failed():
    test_jobs.FAILURES_SEEN.clear()
    with testing.eager():
        job = test_jobs.fails_with_hook.enqueue()
    assert job.status == "failed"
    seen = list(test_jobs.FAILURES_SEEN)
    assert seen == [(job.pk, "ValueError")]


def test_eager_mode_still_checks_the_payload():
    with testing.eager(), pytest.raises(jobs.InvalidPayload, match="set"):
        jobs.enqueue(test_jobs.record, {"key": {1, 2}})
    assert not Job.objects.exists()


def test_eager_enqueue_many_runs_every_job():
    with testing.eager():
        rows = jobs.enqueue_many(test_jobs.record, [{"key": "a"}, {"key": "b"}])
    assert [row.status for row in rows] == ["succeeded", "succeeded"]
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["a", "b"]


def test_eager_dedupe_key_is_free_again_once_the_job_ran():
    with testing.eager():
        first = jobs.enqueue(test_jobs.record, {"key": "a"}, dedupe_key="k")
        second = jobs.enqueue(test_jobs.record, {"key": "a"}, dedupe_key="k")
    assert first.pk != second.pk
    assert SideEffect.objects.count() == 2


def test_eager_job_inside_a_rolled_back_transaction_leaves_nothing():
    with testing.eager(), transaction.atomic():
        jobs.enqueue(test_jobs.record, {"key": "a"})
        assert SideEffect.objects.count() == 1  # it ran inside the transaction
        transaction.set_rollback(True)
    assert not Job.objects.exists()
    assert not SideEffect.objects.exists()


def test_eager_mode_by_setting(settings):
    settings.CRONQUEUE = {**settings.CRONQUEUE, "EAGER": True}
    job = jobs.enqueue(test_jobs.record, {"key": "setting"})
    assert job.status == "succeeded"


def test_a_job_that_fails_then_succeeds_ends_succeeded_after_two_attempts():
    calls = []

    @jobs.job(name="eager.flaky_once", retries=3, backoff=lambda attempt: 3600)
    def flaky_once(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")
        return key

    try:
        with testing.eager():
            job = flaky_once.enqueue(key="k")
    finally:
        registry.unregister("eager.flaky_once")
    assert calls == ["k", "k"]  # the hour of backoff is not waited for
    assert (job.status, job.attempts, job.result) == ("succeeded", 2, "k")
    assert job.last_error == "RuntimeError: first attempt fails"


def test_a_job_enqueued_by_an_eager_job_runs_inline_too():
    @jobs.job(name="eager.parent")
    def parent(key: str) -> None:
        test_jobs.record.enqueue(key=f"{key}-child")
        SideEffect.objects.create(key=key)

    try:
        with testing.eager():
            job = parent.enqueue(key="p")
    finally:
        registry.unregister("eager.parent")
    assert job.status == "succeeded"
    assert list(SideEffect.objects.order_by("id").values_list("key", flat=True)) == [
        "p-child",
        "p",
    ]
    assert Job.objects.get(name="testapp.record").status == "succeeded"


def test_an_eager_manual_run_of_a_cron_schedule_runs_its_handler():
    with schedule("0 3 * * *", name="eager.nightly", tz="Europe/Paris"):
        row = CronScheduleFactory(name="eager.nightly", expression="0 3 * * *", tz="Europe/Paris")
        before = timezone.now()
        with testing.eager():
            job = row.run_now()
        assert job.status == "succeeded"
        [run] = RUNS
        assert run.job_id == job.pk
        assert run.catch_up is False
        assert run.scheduled_for.tzinfo.key == "Europe/Paris"
        assert before - dt.timedelta(seconds=1) <= run.scheduled_for <= timezone.now()
