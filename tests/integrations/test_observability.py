"""The observability contract of docs/observability.md: structured log records and
signals for every job start, success, retry and failure."""

import datetime as dt
import logging

import pytest
from django.utils import timezone

from django_cronqueue import jobs, signals
from django_cronqueue.definitions.registry import registry
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db

JOB_FIELDS = ("job_id", "job_name", "attempt", "duration", "outcome")


def job_records(caplog, job_id):
    return [record for record in caplog.records if getattr(record, "job_id", None) == job_id]


def test_start_and_success_are_logged_with_structured_fields(caplog):
    caplog.set_level(logging.DEBUG, logger="django_cronqueue")
    job = test_jobs.record.enqueue(key="a")
    jobs.tick()

    started, succeeded = job_records(caplog, job.pk)
    assert (started.levelno, started.job_name, started.attempt) == (
        logging.DEBUG,
        "testapp.record",
        1,
    )
    assert succeeded.levelno == logging.INFO
    assert {field: getattr(succeeded, field) for field in JOB_FIELDS[:3]} == {
        "job_id": job.pk,
        "job_name": "testapp.record",
        "attempt": 1,
    }
    assert succeeded.outcome == "succeeded"
    assert succeeded.duration >= 0


def test_retries_and_the_final_failure_are_logged_with_structured_fields(caplog):
    caplog.set_level(logging.INFO, logger="django_cronqueue")
    job = test_jobs.always_fails.enqueue(reason="no")  # 3 attempts, no backoff
    now = timezone.now()
    for offset in range(3):
        jobs.tick(now=now + dt.timedelta(seconds=offset))

    records = job_records(caplog, job.pk)
    assert [(r.levelno, r.attempt, r.outcome) for r in records] == [
        (logging.WARNING, 1, "retrying"),
        (logging.WARNING, 2, "retrying"),
        (logging.ERROR, 3, "failed"),
    ]
    for record in records:
        assert all(hasattr(record, field) for field in JOB_FIELDS)
        assert record.job_name == "testapp.always_fails"


def test_signals_of_a_job_that_retries_then_fails():
    seen = []

    def receiver(signal, sender, **kwargs):
        seen.append((signal, sender, sorted(kwargs)))

    receivers = {
        "started": signals.job_started,
        "succeeded": signals.job_succeeded,
        "retrying": signals.job_retrying,
        "failed": signals.job_failed,
    }
    connected = []
    for label, signal in receivers.items():

        def handler(sender, _label=label, **kwargs):
            kwargs.pop("signal")
            receiver(_label, sender, **kwargs)

        signal.connect(handler)
        connected.append((signal, handler))
    try:
        job = test_jobs.always_fails.enqueue()
        now = timezone.now()
        for offset in range(3):
            jobs.tick(now=now + dt.timedelta(seconds=offset))
        test_jobs.noop.enqueue()
        jobs.tick(now=now + dt.timedelta(seconds=5))
    finally:
        for signal, handler in connected:
            signal.disconnect(handler)

    assert seen == [
        ("started", "testapp.always_fails", ["job"]),
        ("retrying", "testapp.always_fails", ["exc", "job", "run_at"]),
        ("started", "testapp.always_fails", ["job"]),
        ("retrying", "testapp.always_fails", ["exc", "job", "run_at"]),
        ("started", "testapp.always_fails", ["job"]),
        ("failed", "testapp.always_fails", ["exc", "job"]),
        ("started", "testapp.noop", ["job"]),
        ("succeeded", "testapp.noop", ["duration", "job", "result"]),
    ]
    assert job.pk


@pytest.fixture
def hourly():
    definition = jobs.cron("0 * * * *", tz="UTC", name="observability.hourly")(lambda run: None)
    yield definition
    registry.unregister(definition.name)


def test_cron_occurrence_created_is_sent(hourly):
    created = []

    def receiver(sender, job, schedule, **kwargs):
        created.append((sender, job.scheduled_for, schedule.name))

    signals.cron_occurrence_created.connect(receiver)
    try:
        start = dt.datetime(2026, 1, 1, 10, 30, tzinfo=dt.timezone.utc)
        jobs.tick(now=start)  # arms the schedule
        jobs.tick(now=start + dt.timedelta(minutes=30))
    finally:
        signals.cron_occurrence_created.disconnect(receiver)
    assert created == [
        (
            "observability.hourly",
            dt.datetime(2026, 1, 1, 11, 0, tzinfo=dt.timezone.utc),
            "observability.hourly",
        )
    ]
