"""The fair-share jobs of the tests: defined in-process by a fixture (and taken back
after the test, so that no other test's queue takes turns), and at import by the
``tests.fair_jobs`` app that the multi-process test's workers install."""

from __future__ import annotations

import os
import time

from django_cronqueue import jobs
from django_cronqueue.enqueueing.decorators import JobHandle

QUEUE = "fair"
BY_TENANT = "tests.fair.by_tenant"  # fair_by="tenant"
BY_REGION = "tests.fair.by_region"  # fair_by=a callable
PLAIN = "tests.fair.plain"  # in the fair queue, without a key
# Flow control in the fair queue, each keyed by the tenant:
LIMITED = "tests.fair.limited"  # limit_by="tenant", concurrency=2 per tenant
RATED = "tests.fair.rated"  # limit_by="tenant", rate_limit="2/m" per tenant
CAPPED = "tests.fair.capped"  # concurrency=3 for the name
REGIONAL = "tests.fair.regional"  # limit_by="region", concurrency=2 per region; marks its run
FLOW = (LIMITED, RATED, CAPPED, REGIONAL)


def by_tenant(tenant: str, n: int = 0) -> None:
    """A no-op: the tests read the order of the claims."""


def by_region(region: str, n: int = 0) -> None:
    """A no-op keyed by a callable of the payload."""


def plain(n: int = 0) -> None:
    """A job of the fair queue without a fair key."""


def limited(tenant: str, n: int = 0) -> None:
    """A no-op with a per-tenant concurrency limit."""


def rated(tenant: str, n: int = 0) -> None:
    """A no-op with a per-tenant rate limit."""


def capped(tenant: str, n: int = 0) -> None:
    """A no-op whose name has a concurrency cap."""


def regional(tenant: str, region: str, n: int = 0) -> None:
    """Marks its start and end (``SideEffect`` rows ``start:``/``end:<region>|<tenant>-<n>``):
    a run is inside its claim, so runs of a region overlap no more than its running rows."""
    from tests.testapp.models import SideEffect

    key = f"{region}|{tenant}-{n}"
    SideEffect.objects.create(key=f"start:{key}", pid=os.getpid())
    time.sleep(0.01)
    SideEffect.objects.create(key=f"end:{key}", pid=os.getpid())


def region_of(payload: dict) -> str:
    return f"region-{payload['region']}"


def define() -> list[JobHandle]:
    return [
        jobs.job(name=BY_TENANT, queue=QUEUE, fair_by="tenant")(by_tenant),
        jobs.job(name=BY_REGION, queue=QUEUE, fair_by=region_of)(by_region),
        jobs.job(name=PLAIN, queue=QUEUE)(plain),
    ]


def define_flow() -> list[JobHandle]:
    return [
        jobs.job(name=LIMITED, queue=QUEUE, fair_by="tenant", limit_by="tenant", concurrency=2)(
            limited
        ),
        jobs.job(name=RATED, queue=QUEUE, fair_by="tenant", limit_by="tenant", rate_limit="2/m")(
            rated
        ),
        jobs.job(name=CAPPED, queue=QUEUE, fair_by="tenant", concurrency=3)(capped),
        jobs.job(name=REGIONAL, queue=QUEUE, fair_by="tenant", limit_by="region", concurrency=2)(
            regional
        ),
    ]
