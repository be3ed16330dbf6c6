"""Turns hold with flow control, on every vendor (SPEC section 15): in a fair queue the
names with ``limit_by``, ``rate_limit`` or ``concurrency=`` are claimed in their keys'
turns, a key over its limit or paused loses its turn and holds up no other key (and is
not idle for it), the limits hold exactly, weights split the claims, and no claim gives
rows back.

Time is injected (``claim_due(now, ...)``): no test sleeps. Each job's limit is chosen
so that, without turns, the claims would take key A's backlog first."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim, claim_due, claim_request
from django_cronqueue.claiming.fair import SHARE_TABLE
from django_cronqueue.conf import database_alias
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import FairShare, Job, JobStart
from tests.fair_jobs import definitions as fair
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def handles():
    """The fair flow jobs (and the plain fair ones), defined for this test only."""
    defined = {handle.name: handle for handle in [*fair.define(), *fair.define_flow()]}
    yield defined
    for name in (fair.BY_TENANT, fair.BY_REGION, fair.PLAIN, *fair.FLOW):
        registry.unregister(name)


@pytest.fixture
def now():
    return timezone.now() + dt.timedelta(minutes=5)


def backlog(handle, tenant: str, count: int, *, minutes_ago: float = 60, **payload) -> None:
    run_at = timezone.now() - dt.timedelta(minutes=minutes_ago)
    handle.using(run_at=run_at).enqueue_many(
        [{"tenant": tenant, "n": n, **payload} for n in range(count)]
    )


def claim_one_by_one(now, claims: int) -> list[str | None]:
    """The tenants of ``claims`` claims of one job each (None: nothing claimed)."""
    tenants: list[str | None] = []
    for _ in range(claims):
        claimed = claim_due(now, queues=[fair.QUEUE], limit=1, worker_id="w")
        tenants.append(claimed[0].payload["tenant"] if claimed else None)
    assert_nothing_given_back()
    return tenants


def assert_nothing_given_back() -> None:
    """Every row was claimed at most once and, once claimed, stayed claimed."""
    rows = set(Job.objects.values_list("status", "attempts"))
    assert rows <= {("pending", 0), ("running", 1), ("succeeded", 1)}, rows


def running_per_tenant(name: str) -> Counter[str]:
    return Counter(
        Job.objects.filter(name=name, status="running").values_list("limit_key", flat=True)
    )


# --- turns -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # A reaches its limit of 2 at its second job: it then gives nothing, and B, C go on.
        (fair.LIMITED, ["A", "B", "C", "A", "B", None]),
        (fair.RATED, ["A", "B", "C", "A", "B", None]),
        # The name's cap of 3 is shared by every key: filled in turn order.
        (fair.CAPPED, ["A", "B", "C", None, None, None]),
    ],
)
def test_a_backlog_delays_other_keys_by_one_job_per_key_with_limits(handles, now, name, expected):
    backlog(handles[name], "A", 30, minutes_ago=60)
    backlog(handles[name], "B", 2, minutes_ago=30)
    backlog(handles[name], "C", 1, minutes_ago=10)
    assert claim_one_by_one(now, 6) == expected
    assert Job.objects.filter(name=name, status="running").count() == 6 - expected.count(None)


def test_a_batch_spreads_over_the_keys_and_each_limit_key_holds(handles, now):
    regional = handles[fair.REGIONAL]
    # A's rows in claim order share a region five at a time: without the limit a batch
    # would take five of one region.
    run_at = timezone.now() - dt.timedelta(hours=1)
    regional.using(run_at=run_at).enqueue_many(
        [{"tenant": "A", "region": f"a{n // 5}", "n": n} for n in range(40)]
    )
    for tenant in ("B", "C"):
        regional.using(run_at=run_at + dt.timedelta(minutes=1)).enqueue_many(
            [{"tenant": tenant, "region": f"{tenant}{n}", "n": n} for n in range(10)]
        )
    claimed = claim_due(now, queues=[fair.QUEUE], limit=6, worker_id="w")
    assert Counter(job.payload["tenant"] for job in claimed) == {"A": 2, "B": 2, "C": 2}
    for _ in range(10):
        claim_due(now, queues=[fair.QUEUE], limit=6, worker_id="w")
        per_region = running_per_tenant(fair.REGIONAL)
        assert max(per_region.values()) <= 2, per_region
    assert_nothing_given_back()
    # B and C were served in full long before A's backlog was.
    pending = Counter(Job.objects.filter(status="pending").values_list("fair_key", flat=True))
    assert pending["B"] == pending["C"] == 0 and pending["A"] > 0


def test_weights_split_the_claims_of_a_limited_name_in_their_ratio(handles, now):
    regional = handles[fair.REGIONAL]
    run_at = timezone.now() - dt.timedelta(hours=1)
    for tenant in ("heavy", "light"):
        regional.using(run_at=run_at).enqueue_many(
            [{"tenant": tenant, "region": f"{tenant}{n}", "n": n} for n in range(300)]
        )
    jobs.set_weight(fair.QUEUE, "heavy", 3)
    counts = Counter(claim_one_by_one(now, 200))
    assert sum(counts.values()) == 200
    assert counts["light"] and counts["heavy"] / counts["light"] == pytest.approx(3, rel=0.1)


# --- keys over their limits ------------------------------------------------------------


def test_a_saturated_key_loses_its_turn_holds_up_nobody_and_comes_back_with_room(handles, now):
    limited = handles[fair.LIMITED]
    backlog(limited, "A", 10, minutes_ago=60)
    backlog(limited, "B", 10, minutes_ago=30)
    backlog(limited, "C", 10, minutes_ago=10)
    claimed = [claim_due(now, queues=[fair.QUEUE], limit=1, worker_id="w")[0] for _ in range(6)]
    assert [job.payload["tenant"] for job in claimed] == ["A", "B", "C", "A", "B", "C"]
    assert claim_one_by_one(now, 1) == [None]  # each at its limit of 2
    # Saturated is not idle: no key waits for an idle recheck.
    shares = FairShare.objects.filter(queue=fair.QUEUE, fair_key__in="ABC")
    assert [share.idle_until for share in shares] == [None, None, None]
    # A job of B ends. A comes first in turn order but is still saturated: it loses its
    # turn and holds up nobody, B is served.
    lifecycle.complete_success(claimed[1], now=now)
    assert claim_one_by_one(now, 2) == ["B", None]
    # A job of A ends: A has room again and is served by the next claim, not left idle.
    lifecycle.complete_success(claimed[0], now=now)
    assert claim_one_by_one(now, 2) == ["A", None]
    assert running_per_tenant(fair.LIMITED) == {"A": 2, "B": 2, "C": 2}


def test_a_rate_limited_key_is_skipped_until_its_window_has_room(handles, now):
    rated = handles[fair.RATED]
    backlog(rated, "A", 10, minutes_ago=60)
    backlog(rated, "B", 1, minutes_ago=30)
    assert claim_one_by_one(now, 4) == ["A", "B", "A", None]
    later = now + dt.timedelta(minutes=1)  # A's two starts leave the window
    tenants = []
    for _ in range(3):
        claimed = claim_due(later, queues=[fair.QUEUE], limit=1, worker_id="w")
        tenants.append(claimed[0].payload["tenant"] if claimed else None)
    assert tenants == ["A", "A", None]
    starts = sorted(JobStart.objects.filter(limit_key="A").values_list("started_at", flat=True))
    assert len(starts) == 4 and starts[2] - starts[1] >= dt.timedelta(minutes=1)
    assert FairShare.objects.get(queue=fair.QUEUE, fair_key="A").idle_until is None


def test_a_paused_name_s_key_gives_nothing_and_holds_up_nobody(handles, now):
    backlog(handles[fair.RATED], "A", 10, minutes_ago=60)
    backlog(handles[fair.LIMITED], "B", 2, minutes_ago=30)
    jobs.pause(name=fair.RATED)
    assert claim_one_by_one(now, 3) == ["B", "B", None]
    jobs.resume(name=fair.RATED)
    later = now + dt.timedelta(seconds=10)  # past A's idle recheck (a pause is no enqueue)
    claimed = claim_due(later, queues=[fair.QUEUE], limit=1, worker_id="w")
    assert [job.payload["tenant"] for job in claimed] == ["A"]
    assert_nothing_given_back()


# --- many claimers -----------------------------------------------------------------------


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite serialises the claims (BEGIN IMMEDIATE)"
)
def test_concurrent_claimers_keep_every_limit_and_never_deadlock(handles):
    """Four threads claim and complete batches of capped and limited jobs of many keys at
    once: the name locks and the key locks are taken by each round in one sorted pass, so
    no claim deadlocks; a snapshot after each claim never sees a limit exceeded."""
    run_at = timezone.now() - dt.timedelta(hours=1)
    backlog(handles[fair.LIMITED], "A", 30)
    for tenant in ("B", "C", "D"):
        backlog(handles[fair.LIMITED], tenant, 5, minutes_ago=30)
        backlog(handles[fair.CAPPED], tenant, 5, minutes_ago=20)
    handles[fair.REGIONAL].using(run_at=run_at).enqueue_many(
        [{"tenant": t, "region": f"r{n % 4}", "n": n} for t in "AE" for n in range(20)]
    )
    total = Job.objects.count()
    errors: list[BaseException] = []
    seen: list[str] = []

    def claimer(name: str) -> None:
        try:
            misses = 0
            while misses < 20:
                claimed = claim_due(timezone.now(), queues=[fair.QUEUE], limit=3, worker_id=name)
                if not claimed:
                    misses += 1
                    continue
                misses = 0
                seen.extend(violations())
                for job in claimed:
                    lifecycle.complete_success(job, now=timezone.now())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections[database_alias()].close()

    threads = [threading.Thread(target=claimer, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert not seen, seen
    assert Job.objects.filter(status="succeeded", attempts=1).count() == total


def violations() -> list[str]:
    """The limits a snapshot of the running rows exceeds."""
    found = []
    for name, cap in ((fair.LIMITED, 2), (fair.REGIONAL, 2)):
        for key, running in running_per_tenant(name).items():
            if running > cap:
                found.append(f"{name} {key}: {running}")
    capped = Job.objects.filter(name=fair.CAPPED, status="running").count()
    if capped > 3:
        found.append(f"{fair.CAPPED}: {capped}")
    return found


def test_without_fair_queues_the_flow_claims_never_read_the_turns(now):
    """A site without fair queues: the capped and limited claims are those of before."""
    for index in range(3):
        jobs.enqueue(
            test_jobs.per_tenant,
            {"tenant": "a", "key": str(index)},
            run_at=timezone.now() - dt.timedelta(hours=1),
        )
    request = claim_request(now, queues=None, limit=5, worker_id="w")
    assert not request.fair_queues and not request.fair_names
    statements: list[str] = []

    def capture(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        claimed = claim(request, using=database_alias())
    assert len(claimed) == 2
    assert statements and not [sql for sql in statements if SHARE_TABLE in sql]
