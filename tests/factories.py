"""factory-boy factories for the project's models: the one place tests build rows."""

import datetime as dt

import factory
from django.utils import timezone

from django_cronqueue.models import CronSchedule, Job, JobStatus, Worker


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    name = "testapp.record"
    payload = factory.Sequence(lambda n: {"key": f"k{n}"})
    status = JobStatus.PENDING
    queue = "default"
    priority = 0
    attempts = 0
    max_attempts = 4
    run_at = factory.LazyFunction(timezone.now)
    created_at = factory.LazyFunction(timezone.now)


class CronScheduleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CronSchedule

    name = factory.Sequence(lambda n: f"tests.schedule_{n}")
    expression = "30 2 * * *"
    tz = "UTC"
    options = factory.LazyFunction(
        lambda: {
            "catch_up": "latest",
            "catch_up_window": 3600.0,
            "max_catch_up": 10,
            "overlap": "allow",
        }
    )
    cursor = factory.LazyFunction(timezone.now)
    paused = False
    active = True


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    id = factory.Sequence(lambda n: f"host-{n}:{1000 + n}:abcd")
    hostname = factory.Sequence(lambda n: f"host-{n}")
    pid = factory.Sequence(lambda n: 1000 + n)
    queues = factory.LazyFunction(list)
    concurrency = 1
    last_seen = factory.LazyFunction(timezone.now)


def dynamic_schedules(
    count, *, first_run, step=dt.timedelta(minutes=1), prefix="dynamic", **fields
):
    """``count`` dynamic schedules of ``testapp.send_report`` in one INSERT, named
    ``<prefix>-0000``..., the n-th next running at ``first_run + n * step``."""
    return CronSchedule.objects.bulk_create(
        CronSchedule(
            name=f"{prefix}-{n:04d}",
            source=CronSchedule.Source.DYNAMIC,
            job="testapp.send_report",
            payload={"tenant_id": n},
            expression="0 8 * * *",
            tz="UTC",
            options={"catch_up": "latest", "catch_up_window": 3600.0, "overlap": "allow"},
            cursor=first_run - step,
            next_run=first_run + n * step,
            **fields,
        )
        for n in range(count)
    )
