"""Stranded jobs: due pending jobs whose name no live worker defines, in the read model,
the health check, the worker's warning and the admin."""

import datetime as dt
import logging

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import health, observe
from django_cronqueue.worker.stranded_watch import StrandedWatch
from tests.factories import JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db

LEASE = 30.0


def ago(now, seconds):
    return now - dt.timedelta(seconds=seconds)


@pytest.fixture
def now():
    return timezone.now()


def test_due_pending_jobs_of_names_no_live_worker_defines(now):
    WorkerFactory(job_names=["testapp.record"], last_seen=ago(now, 5))
    WorkerFactory(job_names=["testapp.noop"], last_seen=ago(now, 5))
    WorkerFactory(job_names=["shop.send_receipt"], last_seen=ago(now, 3600))  # dead
    JobFactory(name="testapp.record", run_at=ago(now, 100))
    JobFactory(name="testapp.noop", run_at=ago(now, 100))
    JobFactory(name="shop.send_receipt", run_at=ago(now, 50))
    JobFactory(name="shop.send_receipt", run_at=ago(now, 40))
    JobFactory(name="shop.refund", run_at=ago(now, 70))
    JobFactory(name="shop.later", run_at=now + dt.timedelta(hours=1))  # not due
    JobFactory(name="shop.blocked", run_at=ago(now, 70), blocked=True)  # waits upstream
    JobFactory(name="shop.done", run_at=ago(now, 70), status="succeeded")

    stranded = observe.stranded_names(now, LEASE)

    assert [(s.name, s.count, round(s.waited_seconds)) for s in stranded] == [
        ("shop.refund", 1, 70),
        ("shop.send_receipt", 2, 50),
    ]


@pytest.mark.parametrize("names", [None, "no live worker"])
def test_nothing_is_stranded_without_a_live_worker_that_recorded_its_names(now, names):
    if names is None:
        WorkerFactory(job_names=None, last_seen=ago(now, 5))  # an older version's worker
    else:
        WorkerFactory(job_names=["testapp.noop"], last_seen=ago(now, 3600))
    JobFactory(name="shop.send_receipt", run_at=ago(now, 500))
    assert observe.stranded_names(now, LEASE) == []
    assert observe.defined_names(now, LEASE) is None


def test_check_fails_once_a_stranded_job_waited_longer_than_lease(now, settings):
    settings.CRONQUEUE = {"LEASE": LEASE}
    WorkerFactory(job_names=["testapp.noop"], last_seen=ago(now, 5))
    job = JobFactory(name="shop.send_receipt", run_at=ago(now, LEASE - 5))

    within = health.problems(health.collect(now))
    assert not [p for p in within if "send_receipt" in p]

    job.run_at = ago(now, LEASE + 5)
    job.save(update_fields=["run_at"])
    report = health.collect(now)
    [problem] = [p for p in health.problems(report) if "send_receipt" in p]
    assert "1 due pending job(s) named shop.send_receipt have waited up to 35s" in problem
    assert "no live worker defines that name" in problem
    assert "CRONQUEUE['DISCOVER']" in problem
    assert report.as_dict()["stranded"][0]["name"] == "shop.send_receipt"


def test_the_worker_warns_once_per_name_saying_where_to_define_it(now, caplog):
    WorkerFactory(job_names=["testapp.noop"], last_seen=ago(now, 5))
    JobFactory(name="shop.send_receipt", run_at=ago(now, 10))
    watch = StrandedWatch(interval=0)
    with caplog.at_level(logging.WARNING, logger="django_cronqueue"):
        watch.check(now)
        watch.check(now)
        JobFactory(name="shop.refund", run_at=ago(now, 10))
        watch.check(now)
    warnings = [r for r in caplog.records if getattr(r, "outcome", None) == "stranded"]
    assert [r.job_name for r in warnings] == ["shop.send_receipt", "shop.refund"]
    message = warnings[0].getMessage()
    assert "1 due pending job(s) named 'shop.send_receipt'" in message
    assert "no live worker defines that name" in message
    assert "an installed app's jobs.py" in message
    assert 'add "tasks" to it for tasks.py' in message


def test_the_watch_reads_at_most_once_per_interval(now, django_assert_num_queries):
    watch = StrandedWatch(interval=3600)
    with django_assert_num_queries(1):  # no live worker recorded names: one query
        watch.check(now)
    with django_assert_num_queries(0):
        watch.check(now)


def test_the_admin_marks_stranded_jobs_in_the_list_and_the_detail(admin_client, now):
    WorkerFactory(job_names=["testapp.record"], last_seen=ago(now, 5))
    stranded = JobFactory(name="shop.send_receipt", run_at=ago(now, 10))
    defined = JobFactory(name="testapp.record", run_at=ago(now, 10))
    page = admin_client.get(reverse("admin:django_cronqueue_job_changelist")).content.decode()
    assert page.count("cq-badge-stranded") == 1
    detail = reverse("admin:django_cronqueue_job_change", args=[stranded.pk])
    assert "no worker defines it" in admin_client.get(detail).content.decode()
    detail = reverse("admin:django_cronqueue_job_change", args=[defined.pk])
    assert "no worker defines it" not in admin_client.get(detail).content.decode()
