"""A real ``runjobs --burst`` process with the queue in ``jobs`` and the site in
``default``: it drains the jobs, a chain and a cron occurrence there, and its handlers
write the site's rows to ``default``."""

import pytest
from django.db.models import Count

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobStatus
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

from .conftest import BOTH

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, databases=BOTH)]


def test_a_burst_worker_drains_the_queue_database(runjobs):
    singles = [test_jobs.record.enqueue(key=f"single {n}") for n in range(20)]
    chain = jobs.chain(test_jobs.record.s(key="first"), test_jobs.record.s(key="second")).enqueue()

    worker = runjobs.start("--burst", "--concurrency", "2")
    assert worker.wait(120) == 0, runjobs.log(worker)

    ids = [job.pk for job in [*singles, *chain]]
    statuses = Job.objects.using("jobs").filter(pk__in=ids).values_list("status", flat=True)
    assert list(statuses) == [JobStatus.SUCCEEDED] * len(ids), runjobs.log(worker)
    assert SideEffect.objects.using("default").count() == len(ids)
    assert not SideEffect.objects.values("key").annotate(n=Count("id")).filter(n__gt=1).exists()
    first, second = (SideEffect.objects.get(key=key) for key in ("first", "second"))
    assert first.pk < second.pk
    assert "(alias 'jobs')" in runjobs.log(worker)  # its banner names the queue's database
