import pytest

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_then_tick_runs_it():
    job = jobs.enqueue("testapp.record", {"key": "a"})
    result = jobs.tick()
    assert result == jobs.TickResult(claimed=1, ran=1, failed=0)
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert SideEffect.objects.filter(key="a").count() == 1
    assert Job.objects.count() == 1
