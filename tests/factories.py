"""factory-boy factories for the project's models: the one place tests build rows."""

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
