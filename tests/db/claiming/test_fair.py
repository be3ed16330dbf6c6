"""Fair shares on every vendor (SPEC section 15): the fair key stored at enqueue (and
refused there), turns between a queue's keys one claim at a time and within a batch,
weights, idle keys that lose their turn and come back with an enqueue, the queue's jobs
without a key as one key of their own, and the plain queues left as they were.

Time is injected (``claim_due(now, ...)``): no test sleeps."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.claiming.fair import known_fair_queues
from django_cronqueue.conf import database_alias
from django_cronqueue.definitions.registry import registry
from django_cronqueue.exceptions import InvalidPayload
from django_cronqueue.models import FairShare, Job
from tests.fair_jobs import definitions as fair
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def handles():
    """The fair jobs, defined for this test only."""
    by_tenant, by_region, plain = fair.define()
    yield by_tenant, by_region, plain
    for name in (fair.BY_TENANT, fair.BY_REGION, fair.PLAIN):
        registry.unregister(name)


@pytest.fixture
def now():
    return timezone.now() + dt.timedelta(minutes=5)


def backlog(handle, tenant: str, count: int, *, minutes_ago: float = 60) -> None:
    run_at = timezone.now() - dt.timedelta(minutes=minutes_ago)
    handle.using(run_at=run_at).enqueue_many([{"tenant": tenant, "n": n} for n in range(count)])


def claim_one_by_one(now, claims: int, **options) -> list[str]:
    """The fair keys of ``claims`` claims of one job each (None: nothing claimed)."""
    keys = []
    for _ in range(claims):
        claimed = claim_due(now, queues=[fair.QUEUE], limit=1, worker_id="w", **options)
        keys.append(Job.objects.get(pk=claimed[0].id).fair_key if claimed else None)
    return keys


# --- the key ---------------------------------------------------------------------------


def test_the_fair_key_is_stored_from_fair_by_or_using(handles):
    by_tenant, by_region, plain = handles
    assert by_tenant.enqueue(tenant="acme").fair_key == "acme"
    assert by_tenant.enqueue(tenant=42).fair_key == "42"
    assert by_region.enqueue(region="eu").fair_key == "region-eu"
    assert by_tenant.using(fair_key="vip").enqueue(tenant="acme").fair_key == "vip"
    assert plain.enqueue().fair_key == ""
    assert plain.using(fair_key="batch").enqueue().fair_key == "batch"
    assert jobs.enqueue(test_jobs.record, {"key": "a"}).fair_key == ""


def test_each_enqueue_counts_in_its_key_row(handles):
    by_tenant, _, _ = handles
    by_tenant.enqueue(tenant="acme")
    by_tenant.enqueue_many([{"tenant": "acme"}, {"tenant": "globex"}])
    shares = {s.fair_key: s for s in FairShare.objects.filter(queue=fair.QUEUE)}
    assert shares["acme"].enqueued == 2 and shares["globex"].enqueued == 1
    assert shares["acme"].weight == 1 and shares["acme"].idle_until is None


def test_a_payload_without_the_key_is_refused_naming_job_and_key(handles):
    by_tenant, _, _ = handles
    with pytest.raises(InvalidPayload, match=r"tests\.fair\.by_tenant.*'tenant'"):
        jobs.enqueue(fair.BY_TENANT, {"n": 1})
    with pytest.raises(InvalidPayload, match="fair key"):
        by_tenant.enqueue(tenant="")
    with pytest.raises(ValueError, match="fair_key="):
        by_tenant.using(fair_key="").enqueue(tenant="acme")
    assert not Job.objects.exists()


def test_fair_by_must_name_an_argument_of_the_handler():
    def handler(tenant: str) -> None: ...

    with pytest.raises(ImproperlyConfigured, match="fair_by= names 'customer'"):
        jobs.job(name="tests.fair.bad", fair_by="customer")(handler)
    with pytest.raises(ImproperlyConfigured, match="fair_by= must be a payload key"):
        jobs.job(name="tests.fair.bad", fair_by=3)(handler)
    assert "tests.fair.bad" not in registry


# --- turns -------------------------------------------------------------------------------


def test_a_backlog_delays_another_key_s_job_by_one_job_per_key_not_by_the_backlog(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "big", 50, minutes_ago=60)
    backlog(by_tenant, "small", 2, minutes_ago=30)
    backlog(by_tenant, "tiny", 1, minutes_ago=10)
    keys = claim_one_by_one(now, 8)
    assert keys[:3] == ["big", "small", "tiny"]  # in the order their turns came up
    assert keys[3:6] == ["big", "small", "big"]  # tiny is done: it drops out
    assert Counter(keys) == {"big": 5, "small": 2, "tiny": 1}


def test_within_a_key_the_usual_order_holds(handles, now):
    by_tenant, _, _ = handles
    early = timezone.now() - dt.timedelta(hours=1)
    low = by_tenant.using(run_at=early).enqueue(tenant="acme", n=1)
    high = by_tenant.using(run_at=early, priority=5).enqueue(tenant="acme", n=2)
    claimed = claim_due(now, queues=[fair.QUEUE], limit=2, worker_id="w")
    assert [job.id for job in claimed] == [high.pk, low.pk]


def test_a_batch_spreads_over_the_keys(handles, now):
    by_tenant, _, _ = handles
    for tenant in ("a", "b", "c"):
        backlog(by_tenant, tenant, 20)
    claimed = claim_due(now, queues=[fair.QUEUE], limit=6, worker_id="w")
    assert Counter(job.payload["tenant"] for job in claimed) == {"a": 2, "b": 2, "c": 2}


def test_weights_split_1000_claims_in_their_ratio(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "heavy", 1000)
    backlog(by_tenant, "light", 1000)
    backlog(by_tenant, "middle", 1000)
    jobs.set_weight(fair.QUEUE, "heavy", 5)
    jobs.set_weight(fair.QUEUE, "middle", 3)
    counts = Counter(claim_one_by_one(now, 1000))
    assert sum(counts.values()) == 1000
    assert counts["heavy"] / counts["light"] == pytest.approx(5, rel=0.1)
    assert counts["middle"] / counts["light"] == pytest.approx(3, rel=0.1)


def test_weights_hold_in_batches_too(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "heavy", 100)
    backlog(by_tenant, "light", 100)
    jobs.set_weight(fair.QUEUE, "heavy", 3)
    counts: Counter[str] = Counter()
    for _ in range(10):
        claimed = claim_due(now, queues=[fair.QUEUE], limit=4, worker_id="w")
        counts.update(job.payload["tenant"] for job in claimed)
    assert counts == {"heavy": 30, "light": 10}


def test_a_key_without_due_jobs_loses_its_turn_and_holds_up_no_other(handles, now):
    by_tenant, _, _ = handles
    by_tenant.using(run_at=now + dt.timedelta(hours=1)).enqueue(tenant="later", n=0)
    backlog(by_tenant, "due", 3)
    assert claim_one_by_one(now, 4) == ["due", "due", "due", None]
    later = FairShare.objects.get(queue=fair.QUEUE, fair_key="later")
    assert later.idle_until is not None  # read again after its idle time, not every claim


def test_an_idle_key_is_served_first_again_after_an_enqueue(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "big", 20)
    backlog(by_tenant, "returning", 1)
    assert claim_one_by_one(now, 4) == ["big", "returning", "big", "big"]
    assert FairShare.objects.get(fair_key="returning").idle_until is not None
    backlog(by_tenant, "returning", 1)
    assert FairShare.objects.get(fair_key="returning").idle_until is None
    assert claim_one_by_one(now, 2) == ["returning", "big"]


def test_a_key_idle_past_its_recheck_is_read_again_without_an_enqueue(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "big", 20)
    job = by_tenant.using(run_at=now + dt.timedelta(seconds=30)).enqueue(tenant="snoozer")
    assert claim_one_by_one(now, 2) == ["big", "big"]  # snoozer: not due, marked idle
    later = now + dt.timedelta(seconds=31)
    assert claim_one_by_one(later, 1) == ["snoozer"]
    assert Job.objects.get(pk=job.pk).status == "running"


def test_the_queue_s_jobs_without_a_key_are_one_key_of_their_own(handles, now):
    by_tenant, _, plain = handles
    backlog(by_tenant, "big", 20)
    early = timezone.now() - dt.timedelta(minutes=10)
    plain.using(run_at=early).enqueue_many([{"n": n} for n in range(2)])
    queues = known_fair_queues(database_alias(), registry.fair_queues())
    assert queues == (fair.QUEUE,)
    keys = claim_one_by_one(now, 6, fair_queues=queues)
    assert Counter(keys) == {"big": 4, "": 2}
    assert keys.index("") <= 1


def test_a_key_given_with_using_makes_its_queue_fair_for_the_workers(now):
    for tenant, count in (("big", 10), ("small", 1)):
        for n in range(count):
            test_jobs.record.using(
                fair_key=tenant, run_at=timezone.now() - dt.timedelta(hours=1, seconds=-n)
            ).enqueue(key=f"{tenant}-{n}")
    queues = known_fair_queues(database_alias(), registry.fair_queues())
    assert queues == ("default",)
    claimed = [
        claim_due(now, queues=None, limit=1, worker_id="w", fair_queues=queues)[0] for _ in range(2)
    ]
    assert sorted(job.payload["key"] for job in claimed) == ["big-0", "small-0"]


def test_plain_queues_are_claimed_as_before_beside_a_fair_one(handles, now):
    by_tenant, _, _ = handles
    backlog(by_tenant, "big", 30)
    plain_job = jobs.enqueue(test_jobs.record, {"key": "a"}, run_at=timezone.now())
    claimed: list[int] = []
    for _ in range(2):  # the fair and the plain step take turns to go first
        claimed += [job.id for job in claim_due(now, queues=None, limit=1, worker_id="w")]
    assert plain_job.pk in claimed


def test_no_claim_takes_a_job_twice_and_every_job_is_claimed(handles, now):
    by_tenant, by_region, plain = handles
    backlog(by_tenant, "a", 7)
    backlog(by_tenant, "b", 3)
    by_region.enqueue_many([{"region": r} for r in "xyzxx"])
    plain.enqueue_many([{"n": 1}, {"n": 2}])
    queues = known_fair_queues(database_alias(), registry.fair_queues())
    seen: list[int] = []
    for _ in range(20):
        claimed = claim_due(now, queues=[fair.QUEUE], limit=3, worker_id="w", fair_queues=queues)
        seen += [job.id for job in claimed]
    assert sorted(seen) == sorted(Job.objects.values_list("pk", flat=True))


# --- weights -------------------------------------------------------------------------------


def test_set_weight_creates_changes_and_removes_a_weight():
    jobs.set_weight("reports", "acme", 4)
    assert FairShare.objects.get(queue="reports", fair_key="acme").weight == 4
    jobs.set_weight("reports", "acme", 1000)
    assert FairShare.objects.get(queue="reports", fair_key="acme").weight == 1000
    jobs.set_weight("reports", "acme", None)
    assert FairShare.objects.get(queue="reports", fair_key="acme").weight == 1


@pytest.mark.parametrize("weight", [0, 1001, -1, 2.5, "3", True])
def test_set_weight_refuses_a_bad_weight(weight):
    with pytest.raises(ValueError, match="from 1 to 1000"):
        jobs.set_weight("reports", "acme", weight)
    assert not FairShare.objects.exists()


def test_set_weight_refuses_a_bad_queue_or_key():
    with pytest.raises(ValueError, match="queue must be"):
        jobs.set_weight("", "acme", 2)
    with pytest.raises(ValueError, match="fair key"):
        jobs.set_weight("reports", "x" * 201, 2)
    with pytest.raises(ValueError, match="fair key"):
        jobs.set_weight("reports", 7, 2)  # type: ignore[arg-type]
