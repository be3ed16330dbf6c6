"""The scheduler's batches (``Scheduler.materialize``): many due schedules in one
transaction, with the guarantees of one schedule at a time: one row per occurrence, a
row read before an edit or by another scheduler creates nothing, a backfilled
occurrence is not created twice, and a database error falls back to one at a time."""

import datetime as dt
import logging
import threading

import pytest
from django.db import IntegrityError, connection, connections, transaction

from django_cronqueue import signals
from django_cronqueue.enqueueing import enqueue
from django_cronqueue.models import CronSchedule, Job
from django_cronqueue.schedules import dynamic, materialize, scheduler
from django_cronqueue.schedules.dynamic import dynamic_target
from django_cronqueue.schedules.materialize import Occurrences
from django_cronqueue.schedules.scheduler import Scheduler
from tests.cron_helpers import UTC

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = "testapp.send_report"
ARMED = dt.datetime(2026, 6, 1, 7, 59, tzinfo=UTC)
EIGHT = dt.datetime(2026, 6, 1, 8, tzinfo=UTC)
NOW = EIGHT + dt.timedelta(seconds=10)


def create_tenants(count):
    for tenant in range(count):
        dynamic.create(
            now=ARMED,
            name=f"reports.tenant-{tenant}",
            job=REPORT,
            payload={"tenant_id": tenant},
            expression="0 8 * * *",
            tz="UTC",
        )


def planned(now=NOW):
    """The batch one scheduler would write, from the rows as read now."""
    maths = Occurrences(now)
    rows = CronSchedule.objects.filter(source="dynamic").order_by("pk")
    return [materialize.plan(dynamic_target(row), row, maths) for row in rows]


def occurrences():
    return sorted(Job.objects.filter(scheduled_for=EIGHT).values_list("schedule", flat=True))


def tenants(*numbers):
    return sorted(f"reports.tenant-{n}" for n in numbers)


def test_many_due_schedules_get_one_row_each_in_batches(monkeypatch):
    monkeypatch.setattr(scheduler, "BATCH_SIZE", 2)
    create_tenants(5)
    assert Scheduler().materialize(NOW) == 5
    assert occurrences() == tenants(0, 1, 2, 3, 4)
    assert Scheduler().materialize(NOW + dt.timedelta(seconds=1)) == 0
    assert set(CronSchedule.objects.values_list("cursor", flat=True)) == {NOW}
    assert set(CronSchedule.objects.values_list("last_occurrence", flat=True)) == {EIGHT}
    assert set(CronSchedule.objects.values_list("next_run", flat=True)) == {
        EIGHT + dt.timedelta(days=1)
    }


def test_a_second_scheduler_with_the_same_reads_creates_nothing():
    create_tenants(3)
    first, second = planned(), planned()
    assert scheduler._materialize_batch(first, NOW) == 3
    assert scheduler._materialize_batch(second, NOW) == 0
    assert occurrences() == tenants(0, 1, 2)


def test_a_schedule_edited_after_it_was_read_is_left_out_of_the_batch():
    create_tenants(3)
    batch = planned()
    dynamic.edit(CronSchedule.objects.get(name="reports.tenant-1"), {"payload": {"tenant_id": 9}})
    assert scheduler._materialize_batch(batch, NOW) == 2
    assert occurrences() == tenants(0, 2)
    assert Scheduler().materialize(NOW + dt.timedelta(seconds=1)) == 1  # read again
    assert Job.objects.get(schedule="reports.tenant-1").payload == {"tenant_id": 9}


def test_an_occurrence_a_backfill_made_is_not_created_again(caplog):
    create_tenants(2)
    CronSchedule.objects.get(name="reports.tenant-0").backfill(EIGHT, EIGHT + dt.timedelta(1))
    with caplog.at_level(logging.INFO, logger="django_cronqueue"):
        assert Scheduler().materialize(NOW) == 1
    assert "fell back" not in caplog.text  # left out of the batch, not refused by the database
    assert occurrences() == tenants(0, 1)


def test_a_database_error_falls_back_to_one_schedule_at_a_time(monkeypatch, caplog):
    create_tenants(3)

    def refuse(rows, using):
        raise IntegrityError("duplicate key value violates unique constraint")

    monkeypatch.setattr(enqueue, "insert_occurrences", refuse)
    with caplog.at_level(logging.INFO, logger="django_cronqueue"):
        assert Scheduler().materialize(NOW) == 3
    assert "a batch of 3 fell back to one at a time" in caplog.text
    assert occurrences() == tenants(0, 1, 2)


def test_a_paused_schedule_in_a_batch_creates_nothing():
    create_tenants(2)
    batch = planned()
    CronSchedule.objects.get(name="reports.tenant-0").pause()
    assert scheduler._materialize_batch(batch, NOW) == 1
    assert occurrences() == tenants(1)


def test_each_occurrence_of_a_batch_is_announced_with_its_saved_row():
    create_tenants(3)
    announced = []

    def receiver(sender, job, schedule, **kwargs):
        announced.append((sender, job.pk, job.schedule, job.payload, schedule.name))

    signals.cron_occurrence_created.connect(receiver)
    try:
        assert Scheduler().materialize(NOW) == 3
    finally:
        signals.cron_occurrence_created.disconnect(receiver)
    saved = {job.pk: job for job in Job.objects.filter(scheduled_for=EIGHT)}
    assert sorted(announced, key=lambda a: a[2]) == [
        (name, pk, name, {"tenant_id": tenant}, name)
        for tenant, name in enumerate(tenants(0, 1, 2))
        for pk in [next(pk for pk, job in saved.items() if job.schedule == name)]
    ]


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite's writer is alone: there is no row to hold"
)
def test_a_schedule_another_scheduler_holds_is_left_to_it_not_waited_for():
    """A scheduler that holds a schedule's row (a worker frozen in its batch) holds up no
    other: the others write every other schedule's occurrences at once (and then return
    expired leases), and the held one's when its row is free again."""
    create_tenants(3)
    held = CronSchedule.objects.get(name="reports.tenant-1")
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(CronSchedule.objects.select_for_update().filter(pk=held.pk))
                locked.set()
                release.wait(20)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        assert Scheduler().materialize(NOW) == 2  # it waited for the row before
        assert occurrences() == tenants(0, 2)
    finally:
        release.set()
        holder.join(60)
    assert Scheduler().materialize(NOW) == 1
    assert occurrences() == tenants(0, 1, 2)
