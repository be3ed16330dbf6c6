"""complete_and_claim: a slot's quick successes written with its next claim."""

import pytest
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_request, complete_and_claim
from django_cronqueue.conf import database_alias
from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def request(limit, include_capped=False):
    now = timezone.now()
    return claim_request(
        now, queues=None, limit=limit, worker_id="w", include_capped=include_capped
    )


def test_successes_are_written_and_more_jobs_claimed_in_one_call():
    for i in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"k{i}"})
    first, written = complete_and_claim(
        request(2), [], finished_at=timezone.now(), using=database_alias()
    )
    assert len(first) == 2 and written == set()
    second, written = complete_and_claim(
        request(3), first, finished_at=timezone.now(), using=database_alias()
    )
    assert written == {job.id for job in first}
    assert len(second) == 3
    assert Job.objects.filter(status="succeeded").count() == 2
    assert Job.objects.filter(status="running").count() == 3
    assert {job.id for job in second}.isdisjoint(written)


def test_a_success_whose_lease_was_lost_is_not_written():
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    [claimed] = complete_and_claim(
        request(1), [], finished_at=timezone.now(), using=database_alias()
    )[0]
    Job.objects.filter(pk=job.pk).update(lock_token="someone-else")
    _, written = complete_and_claim(
        request(1), [claimed], finished_at=timezone.now(), using=database_alias()
    )
    assert written == set()
    job.refresh_from_db()
    assert job.status == "running"


def test_successes_are_written_even_when_nothing_is_left_to_claim():
    jobs.enqueue(test_jobs.record, {"key": "k"})
    claimed, _ = complete_and_claim(
        request(5), [], finished_at=timezone.now(), using=database_alias()
    )
    more, written = complete_and_claim(
        request(5), claimed, finished_at=timezone.now(), using=database_alias()
    )
    assert more == [] and written == {claimed[0].id}
    assert Job.objects.get().status == "succeeded"
