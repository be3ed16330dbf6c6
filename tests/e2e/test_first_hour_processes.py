"""A real ``runjobs`` process: typed arguments reach the handler as themselves, and the
retry policy (retry_on=, discard_on=, jobs.Discard) decides which failures run again."""

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_worker_gives_the_handler_the_types_it_was_enqueued_with(runjobs):
    test_jobs.records_types.enqueue(
        at=dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.timezone.utc),
        day=dt.date(2026, 2, 28),
        clock=dt.time(8, 15),
        span=dt.timedelta(minutes=90),
        amount=Decimal("12.50"),
        ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        plain=7,
    )
    worker = runjobs.start("--burst")
    assert worker.wait(120) == 0, runjobs.log(0)
    assert set(SideEffect.objects.values_list("key", flat=True)) == {
        "at=datetime:2026-03-01 09:30:00+00:00",
        "day=date:2026-02-28",
        "clock=time:08:15:00",
        "span=timedelta:1:30:00",
        "amount=Decimal:12.50",
        "ref=UUID:12345678-1234-5678-1234-567812345678",
        "plain=int:7",
    }


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_gives_the_handler_a_callers_dicts_that_look_like_tags_as_dicts(runjobs, pool):
    """Each reached the handler as another type, or was refused at enqueue, or (the
    payload itself) crashed the **kwargs handler."""
    test_jobs.records_types.enqueue(
        **{"$date": "2026-01-01"},
        mine={"$date": "2026-01-01"},
        mongo={"$date": "2026-01-01T00:00:00Z"},
        query={"$gt": 5},
        typed={"$date": dt.date(2026, 1, 1)},
    )
    worker = runjobs.start("--burst", "--pool", pool)
    assert worker.wait(120) == 0, runjobs.log(0)
    assert set(SideEffect.objects.values_list("key", flat=True)) == {
        "$date=str:2026-01-01",
        "mine=dict:{'$date': '2026-01-01'}",
        "mongo=dict:{'$date': '2026-01-01T00:00:00Z'}",
        "query=dict:{'$gt': 5}",
        "typed=dict:{'$date': datetime.date(2026, 1, 1)}",
    }, runjobs.log(0)


def test_a_worker_retries_only_what_the_policy_retries(runjobs):
    enqueue = test_jobs.fails_by_policy.enqueue
    retried = enqueue("retried", "ConnectionResetError")  # a ConnectionError: retry_on
    other = enqueue("other", "RuntimeError")  # not in retry_on: failed at once
    discarded = enqueue("discarded", "KeyError")  # a LookupError: discard_on
    gave_up = enqueue("gave_up", "discard")  # jobs.Discard
    worker = runjobs.start("--burst")
    assert worker.wait(120) == 0, runjobs.log(0)
    rows = {job.pk: job for job in Job.objects.all()}
    attempts = {key: SideEffect.objects.filter(key=key).count() for key in
                ("retried", "other", "discarded", "gave_up")}  # fmt: skip
    assert attempts == {"retried": 4, "other": 1, "discarded": 1, "gave_up": 1}
    for job in (retried, other, discarded, gave_up):
        assert rows[job.pk].status == "failed"
    assert rows[gave_up.pk].last_error == "Discard: gave up on gave_up"
    assert rows[other.pk].last_error == "RuntimeError: other"
