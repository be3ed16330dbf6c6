"""The queue in a database of its own (``CRONQUEUE["DATABASE"] = "jobs"``, two real
PostgreSQL databases): migrate creates the queue's tables there only, the routing checks
pass (and name the fix when the router is missing), and enqueue, claim, completion, cron
and workflows all happen in ``jobs`` while the handlers write the site's rows to
``default``."""

import datetime as dt
import io
import json

import pytest
from django.apps import apps
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.lifecycle import complete_success
from django_cronqueue.models import Batch, CronSchedule, Job, JobDependency, JobStatus, Worker
from tests.cron_helpers import RUNS, UTC, schedule
from tests.testapp import jobs as test_jobs
from tests.testapp.models import Note, SideEffect

from .conftest import BOTH


def queue_tables():
    return {model._meta.db_table for model in apps.get_app_config("django_cronqueue").get_models()}


def tables(alias):
    with connections[alias].cursor() as cursor:
        return set(connections[alias].introspection.table_names(cursor))


def queue_rows(alias):
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_cronqueue_job")
        return cursor.fetchone()[0]


# --- migrate and the checks ------------------------------------------------------------


@pytest.mark.django_db(databases=BOTH)
def test_migrate_puts_the_queue_tables_in_the_jobs_database_only():
    site, queue, ours = tables("default"), tables("jobs"), queue_tables()
    assert {"django_cronqueue_job", "django_cronqueue_cronschedule"} <= ours
    # Nothing but the queue (and Django's record of the migrations) in its database.
    assert queue == ours | {"django_migrations"}
    assert not ours & site
    assert {"auth_user", "django_session", "testapp_sideeffect"} <= site


def routing_check_ids():
    return sorted(
        message.id
        for message in run_checks()
        if message.id and message.id.startswith("django_cronqueue.")
    )


def test_the_routing_checks_pass_with_the_router():
    assert routing_check_ids() == []


def test_without_the_router_the_checks_name_the_setting_and_the_fix():
    with override_settings(DATABASE_ROUTERS=[]):
        messages = [m for m in run_checks() if m.id and m.id.startswith("django_cronqueue.E04")]
        ids = routing_check_ids()
    assert ids == ["django_cronqueue.E040", "django_cronqueue.W040"]
    [error] = messages
    assert "CRONQUEUE['DATABASE'] is 'jobs'" in error.msg
    assert "'default'" in error.msg
    assert error.hint == (
        'Add "django_cronqueue.routers.CronQueueRouter" to DATABASE_ROUTERS in your settings.'
    )


class NoMigrationsAnywhere:
    def allow_migrate(self, db, app_label, **hints):
        return False


def test_a_router_that_keeps_the_migrations_out_of_the_queue_database_is_an_error():
    routers = [NoMigrationsAnywhere(), "django_cronqueue.routers.CronQueueRouter"]
    with override_settings(DATABASE_ROUTERS=routers):
        [error] = [m for m in run_checks() if m.id and m.id.startswith("django_cronqueue.")]
    assert error.id == "django_cronqueue.E041"
    assert "migrate --database jobs would not create the queue's tables" in error.msg
    assert "CronQueueRouter first" in error.hint


# --- enqueue, claim, complete, tick --------------------------------------------------------


@pytest.mark.django_db(databases=BOTH)
def test_enqueue_claim_and_complete_happen_in_the_jobs_database():
    job = test_jobs.record.enqueue(key="routed")
    assert job._state.db == "jobs"
    assert (queue_rows("jobs"), Job.objects.count()) == (1, 1)

    now = timezone.now()
    [claimed] = claim_due(now, queues=None, limit=1, worker_id="w1")
    assert claimed.id == job.pk
    assert Job.objects.using("jobs").get(pk=job.pk).status == JobStatus.RUNNING
    assert complete_success(claimed, now=now, result={"ok": True})
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, {"ok": True})


@pytest.mark.django_db(databases=BOTH)
def test_a_tick_runs_the_queue_from_jobs_and_the_handler_writes_to_default():
    job = test_jobs.record.enqueue(key="side effect")
    result = jobs.tick()
    assert (result.claimed, result.ran, result.failed) == (1, 1, 0)
    assert Job.objects.using("jobs").get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert SideEffect.objects.using("default").filter(key="side effect").count() == 1


@pytest.mark.django_db(databases=BOTH)
def test_a_plain_enqueue_is_not_rolled_back_with_the_site_data():
    """What a queue database of its own gives up: the site's transaction does not hold
    the job (enqueue_on_commit is what replaces it: test_enqueue_on_commit.py)."""
    with transaction.atomic():
        Note.objects.create(text="order 1")
        test_jobs.record.enqueue(key="order 1")
        transaction.set_rollback(True)
    assert not Note.objects.exists()
    assert Job.objects.filter(payload__key="order 1").count() == 1


@pytest.mark.django_db(databases=BOTH)
def test_cronqueue_status_reads_the_jobs_database():
    test_jobs.record.enqueue(key="waiting")
    out = io.StringIO()
    call_command("cronqueue_status", "--json", stdout=out)
    document = json.loads(out.getvalue())
    assert document["counts"]["pending"] == 1
    assert document["counts_by_name"] == {"testapp.record": {"pending": 1}}


# --- cron and workflows ------------------------------------------------------------------

ARMED = dt.datetime(2026, 6, 1, 7, 59, 30, tzinfo=UTC)


@pytest.mark.django_db(databases=BOTH)
def test_cron_materializes_and_runs_occurrences_in_the_jobs_database():
    with schedule("0 8 * * *", name="tests.queue_db.daily", tz="UTC"):
        jobs.tick(now=ARMED)  # arms the schedule
        result = jobs.tick(now=ARMED + dt.timedelta(minutes=1))
        assert (result.claimed, result.ran) == (1, 1)
        [run] = RUNS
    assert run.scheduled_for == dt.datetime(2026, 6, 1, 8, tzinfo=UTC)
    row = CronSchedule.objects.using("jobs").get(name="tests.queue_db.daily")
    assert row.last_occurrence == run.scheduled_for
    occurrence = Job.objects.using("jobs").get(name="tests.queue_db.daily")
    assert occurrence.status == JobStatus.SUCCEEDED


@pytest.mark.django_db(databases=BOTH)
def test_a_chain_and_a_group_run_in_the_jobs_database():
    first, second = jobs.chain(
        test_jobs.record.s(key="first"), test_jobs.record.s(key="second")
    ).enqueue()
    batch = (
        jobs.group([test_jobs.record.s(key=f"member {n}") for n in range(3)])
        .then(test_jobs.record.s(key="then"))
        .enqueue()
    )
    assert batch._state.db == "jobs"
    assert JobDependency.objects.using("jobs").filter(upstream=first, downstream=second).exists()
    for _ in range(4):
        jobs.tick()
    keys = list(SideEffect.objects.order_by("id").values_list("key", flat=True))
    assert keys.index("first") < keys.index("second")
    assert keys[-1] == "then"
    batch = Batch.objects.get(pk=batch.pk)  # routed to jobs
    assert (batch.size, batch.succeeded, batch.failed) == (3, 3, 0)
    assert batch.finished_at is not None
    assert not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()
    assert not Worker.objects.using("jobs").exists()
