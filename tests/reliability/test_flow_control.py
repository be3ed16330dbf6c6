"""Flow control across 4 real ``runjobs`` processes (SPEC section 9), on PostgreSQL and
MariaDB: per-tenant concurrency never exceeded and reached, a rate limit never exceeded
in any window, and a tenant under its limit served while another is saturated behind a
backlog of thousands of its due rows.

Handlers mark their start and end (``SideEffect`` rows). Each assertion is a guarantee,
not a timing: a cap is shown reached with jobs that hold their slot until the test
releases them, and a rate limit is checked on the claim instants the workers logged
(``JobStart``, and each row's ``started_at``), which is what the limit bounds. A
handler starts some time after its claim (after the jobs claimed with it, on a busy
machine after a pause), so its own start instants may crowd closer than the limit.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict

import pytest
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobStart, Worker
from tests.reliability import jobs as rel
from tests.testapp.models import SideEffect

from .conftest import marks, max_overlap, needs_server, wait_until

pytestmark = [pytest.mark.e2e, needs_server, pytest.mark.django_db(transaction=True)]

WORKERS = 4
SETTINGS = {"POLL_INTERVAL": 0.1}


def start_workers(runjobs) -> list:
    workers = [runjobs.start("--concurrency", "2", settings=SETTINGS) for _ in range(WORKERS)]
    # All four are polling before any work exists, so no early starter takes it all.
    wait_until(lambda: Worker.objects.count() == WORKERS, timeout=60)
    return workers


def stop_workers(runjobs, workers) -> None:
    for worker in workers:
        assert runjobs.stop(worker) == 0, runjobs.log(worker)


def started(prefix: str) -> int:
    return SideEffect.objects.filter(key__startswith=f"start:{prefix}").count()


def release(tenant: str) -> None:
    SideEffect.objects.create(key=f"release:{tenant}")


def intervals_by_tenant() -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    """Each tenant's [start, end] handler intervals; keys are ``<tenant>-<n>``."""
    starts = {key: at for key, _, at in marks("start")}
    ends = {key: at for key, _, at in marks("end")}
    assert starts.keys() == ends.keys()
    by_tenant = defaultdict(list)
    for key, at in starts.items():
        by_tenant[key.split("-")[0]].append((at, ends[key]))
    return by_tenant


def max_in_window(instants, window: dt.timedelta) -> int:
    """The most instants in any half-open window [a, a + window)."""
    instants = sorted(instants)
    most = first = 0
    for last, instant in enumerate(instants):
        while instants[first] <= instant - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def assert_nothing_given_back(runjobs, name: str) -> None:
    """No row of ``name`` was claimed more than once, and no worker gave any back."""
    assert set(Job.objects.filter(name=name).values_list("attempts", flat=True)) <= {0, 1}
    assert "gave back" not in runjobs.logs()


def test_a_per_tenant_cap_of_2_is_reached_and_never_exceeded_across_4_workers(runjobs):
    workers = start_workers(runjobs)
    # Tenants a and b: six jobs each that hold their slot until released. Tenant c: quick
    # jobs, which the 4 slots left free keep claiming all along.
    for tenant in ("a", "b"):
        jobs.enqueue_many(
            rel.tenant_capped,
            [{"tenant": tenant, "key": f"{tenant}-{i}", "hold": True} for i in range(6)],
        )
    jobs.enqueue_many(
        rel.tenant_capped, [{"tenant": "c", "key": f"c-{i}", "seconds": 0.05} for i in range(30)]
    )
    # Reached: two of a's and two of b's run at once (they hold until released)...
    wait_until(lambda: started("a-") == 2 and started("b-") == 2, timeout=60)
    # ... and while they hold, tenant c, under its limit, is served in full.
    wait_until(
        lambda: (
            Job.objects.filter(name="rel.tenant_capped", limit_key="c", status="succeeded").count()
            == 30
        ),
        timeout=60,
    )
    assert started("a-") == 2 and started("b-") == 2  # no third start while two hold
    running = Job.objects.filter(name="rel.tenant_capped", status="running")
    assert sorted(running.values_list("limit_key", flat=True)) == ["a", "a", "b", "b"]
    release("a")
    release("b")
    wait_until(
        lambda: not Job.objects.filter(name="rel.tenant_capped").exclude(status="succeeded"),
        timeout=120,
    )
    stop_workers(runjobs, workers)

    by_tenant = intervals_by_tenant()
    assert {tenant: len(spans) for tenant, spans in by_tenant.items()} == {
        "a": 6,
        "b": 6,
        "c": 30,
    }
    # The guarantee: never more than 2 of a tenant at once (handlers run inside their
    # claims); a's and b's caps were reached, above.
    assert max_overlap(by_tenant["a"]) == 2
    assert max_overlap(by_tenant["b"]) == 2
    assert max_overlap(by_tenant["c"]) <= 2
    assert_nothing_given_back(runjobs, "rel.tenant_capped")


def test_a_per_tenant_rate_limit_is_never_exceeded_in_any_window_across_4_workers(runjobs):
    workers = start_workers(runjobs)
    per_tenant = 25  # 5/s: at least 4 s per tenant
    jobs.enqueue_many(
        rel.tenant_rated,
        [
            {"tenant": tenant, "key": f"{tenant}-{i}"}
            for i in range(per_tenant)
            for tenant in ("r", "s")
        ],
    )
    wait_until(
        lambda: not Job.objects.filter(name="rel.tenant_rated").exclude(status="succeeded"),
        timeout=120,
    )
    stop_workers(runjobs, workers)

    second = dt.timedelta(seconds=1)
    for tenant in ("r", "s"):
        logged = list(
            JobStart.objects.filter(name="rel.tenant_rated", limit_key=tenant).values_list(
                "started_at", flat=True
            )
        )
        claimed = list(
            Job.objects.filter(name="rel.tenant_rated", limit_key=tenant).values_list(
                "started_at", flat=True
            )
        )
        assert len(logged) == len(claimed) == per_tenant
        assert sorted(logged) == sorted(claimed)  # one claim each, each logged
        assert max_in_window(logged, second) <= 5
        # 25 starts, at most 5 in any second: the first and the last are 4 s apart or more.
        assert max(logged) - min(logged) >= 4 * second
    assert {len(spans) for spans in intervals_by_tenant().values()} == {per_tenant}
    assert_nothing_given_back(runjobs, "rel.tenant_rated")


@pytest.mark.parametrize("job", ["rel.tenant_capped", "rel.tenant_hourly"])
def test_a_tenant_under_its_limit_is_served_behind_a_saturated_tenants_backlog(runjobs, job):
    """Tenant a is at its limit (2 held running; or its 3 starts of the hour used up)
    with 3,000 more due rows ahead of everything else in claim order. Tenant b's one
    job, enqueued then, runs at once, while a stays saturated with its backlog intact."""
    workers = start_workers(runjobs)
    backlog = 3000
    first = 2 if job == "rel.tenant_capped" else 3
    earlier = timezone.now() - dt.timedelta(minutes=10)
    jobs.enqueue_many(
        job,
        [{"tenant": "a", "key": f"a-{i}", "hold": True} for i in range(first)]
        if job == "rel.tenant_capped"
        else [{"tenant": "a", "key": f"a-{i}"} for i in range(first)],
        run_at=earlier,
        priority=5,
    )
    wait_until(lambda: started("a-") == first, timeout=60)
    extra = {"hold": True} if job == "rel.tenant_capped" else {}
    jobs.enqueue_many(
        job,
        [{"tenant": "a", "key": f"a-{i}", **extra} for i in range(first, first + backlog)],
        run_at=earlier,
        priority=5,
    )
    enqueued = time.monotonic()
    jobs.enqueue(job, {"tenant": "b", "key": "b-0"})
    wait_until(lambda: started("b-") == 1, timeout=60)
    waited = time.monotonic() - enqueued
    # a is still saturated: none of its backlog was claimed, let alone given back.
    assert started("a-") == first
    pending = Job.objects.filter(name=job, limit_key="a", status="pending", attempts=0)
    assert pending.count() == backlog
    assert_nothing_given_back(runjobs, job)
    # Wind down: drop a's backlog (still saturated, nobody can have claimed from it),
    # let the held jobs end, and stop with nothing in hand.
    assert pending.update(status="cancelled") == backlog
    release("a")
    wait_until(lambda: not Job.objects.filter(name=job, status="running").exists(), timeout=60)
    stop_workers(runjobs, workers)
    print(f"tenant b's job started {waited:.2f} s after it was enqueued")
