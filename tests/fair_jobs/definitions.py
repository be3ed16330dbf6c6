"""The fair-share jobs of the tests: defined in-process by a fixture (and taken back
after the test, so that no other test's queue takes turns), and at import by the
``tests.fair_jobs`` app that the multi-process test's workers install."""

from __future__ import annotations

from django_cronqueue import jobs
from django_cronqueue.enqueueing.decorators import JobHandle

QUEUE = "fair"
BY_TENANT = "tests.fair.by_tenant"  # fair_by="tenant"
BY_REGION = "tests.fair.by_region"  # fair_by=a callable
PLAIN = "tests.fair.plain"  # in the fair queue, without a key


def by_tenant(tenant: str, n: int = 0) -> None:
    """A no-op: the tests read the order of the claims."""


def by_region(region: str, n: int = 0) -> None:
    """A no-op keyed by a callable of the payload."""


def plain(n: int = 0) -> None:
    """A job of the fair queue without a fair key."""


def region_of(payload: dict) -> str:
    return f"region-{payload['region']}"


def define() -> list[JobHandle]:
    return [
        jobs.job(name=BY_TENANT, queue=QUEUE, fair_by="tenant")(by_tenant),
        jobs.job(name=BY_REGION, queue=QUEUE, fair_by=region_of)(by_region),
        jobs.job(name=PLAIN, queue=QUEUE)(plain),
    ]
