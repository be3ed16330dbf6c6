"""The models' verbs (django_cronqueue.operations.model_methods): Job.retry/cancel/run_now
reach lifecycle, CronSchedule.run_now/backfill/pause/resume reach the scheduler."""

import datetime as dt

import pytest
from django.apps import apps
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import CronSchedule, Job, verbs
from django_cronqueue.operations.model_methods import Verbs
from tests.cron_helpers import schedule
from tests.factories import CronScheduleFactory, JobFactory
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.timezone.utc


class RecordingVerbs:
    """Stands in for Verbs: records what the models asked for."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def verb(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return "done"

        return verb


def test_the_app_attaches_the_verbs_the_models_use():
    assert isinstance(verbs(), Verbs)
    assert verbs() is apps.get_app_config("django_cronqueue").verbs


def test_each_model_verb_asks_the_attached_implementation(monkeypatch):
    recording = RecordingVerbs()
    monkeypatch.setattr(apps.get_app_config("django_cronqueue"), "verbs", recording)
    job, row = Job(pk=1), CronSchedule(pk=2)
    now = timezone.now()
    start, end = now - dt.timedelta(days=1), now
    assert job.retry(now=now) == "done"
    assert job.cancel(reason="why") == "done"
    assert job.run_now() == "done"
    assert row.run_now() == "done"
    assert row.backfill(start, end) == "done"
    assert row.pause() == "done"
    assert row.resume() == "done"
    assert recording.calls == [
        ("retry_job", (job,), {"now": now}),
        ("cancel_job", (job,), {"reason": "why", "by": "", "now": None}),
        ("run_job_now", (job,), {"now": None}),
        ("run_schedule_now", (row,), {}),
        ("backfill_schedule", (row, start, end), {}),
        ("set_schedule_paused", (row, True), {}),
        ("set_schedule_paused", (row, False), {}),
    ]


# --- Job ----------------------------------------------------------------------------


def test_retry_cancel_and_run_now():
    failed = jobs.enqueue(test_jobs.always_fails)
    for _ in range(3):
        jobs.tick()
    failed.refresh_from_db()
    assert failed.status == "failed"
    assert failed.retry() is True
    failed.refresh_from_db()
    assert (failed.status, failed.attempts, failed.finished_at) == ("pending", 0, None)
    assert failed.retry() is False  # pending: nothing to retry

    later = jobs.enqueue(test_jobs.record, {"key": "later"}, delay=dt.timedelta(hours=1))
    assert later.run_now() is True
    later.refresh_from_db()
    assert later.run_at <= timezone.now()

    assert later.cancel(reason="not needed") is True
    later.refresh_from_db()
    assert (later.status, later.last_error) == ("cancelled", "not needed")
    assert later.cancel() is False
    assert later.run_now() is False
    assert later.retry() is True
    assert jobs.tick().claimed == 2


def test_job_verbs_pass_now_through():
    job = JobFactory(run_at=timezone.now() + dt.timedelta(days=1))
    when = timezone.now() - dt.timedelta(minutes=5)
    assert job.run_now(now=when) is True
    assert Job.objects.get(pk=job.pk).run_at == when
    assert job.cancel(now=when) is True
    assert Job.objects.get(pk=job.pk).finished_at == when
    assert job.retry(now=when) is True
    assert Job.objects.get(pk=job.pk).run_at == when


# --- CronSchedule -------------------------------------------------------------------


def test_pause_and_resume_change_the_row_once():
    with schedule("0 3 * * *"):
        row = CronScheduleFactory(name="tests.schedule", expression="0 3 * * *")
        assert row.pause() is True
        assert row.paused is True
        assert CronSchedule.objects.get(pk=row.pk).paused is True
        assert row.pause() is False  # already paused
        assert row.resume() is True
        assert CronSchedule.objects.get(pk=row.pk).paused is False
        assert row.resume() is False


def test_schedule_run_now_enqueues_a_manual_run():
    with schedule("0 3 * * *"):
        row = CronScheduleFactory(name="tests.schedule", expression="0 3 * * *")
        job = row.run_now()
        assert (job.name, job.status, job.scheduled_for) == ("tests.schedule", "pending", None)
        assert Job.objects.get().pk == job.pk


def test_schedule_backfill_creates_the_missing_occurrences():
    with schedule("0 3 * * *"):
        row = CronScheduleFactory(name="tests.schedule", expression="0 3 * * *")
        start = dt.datetime(2026, 1, 1, tzinfo=UTC)
        assert row.backfill(start, start + dt.timedelta(days=3)) == 3
        assert row.backfill(start, start + dt.timedelta(days=3)) == 0
        assert sorted(Job.objects.values_list("scheduled_for", flat=True)) == [
            dt.datetime(2026, 1, day, 3, tzinfo=UTC) for day in (1, 2, 3)
        ]


def test_the_schedule_verbs_of_a_schedule_without_code_raise_unknown_job():
    row = CronScheduleFactory(name="shop.removed_schedule")
    with pytest.raises(jobs.UnknownJob, match=r"shop\.removed_schedule"):
        row.run_now()
    with pytest.raises(jobs.UnknownJob):
        row.backfill(timezone.now() - dt.timedelta(days=1), timezone.now())
    assert not Job.objects.exists()
