"""factory-boy factories for the project's models: the one place tests build rows."""

import factory
from django.utils import timezone

from django_cronqueue.models import Job, JobStatus


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
