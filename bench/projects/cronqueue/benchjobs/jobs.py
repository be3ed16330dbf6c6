"""The benchmark's jobs, defined the django-cronqueue way (found as <app>/jobs.py).

``limited`` exists only when ``BENCH_FLOW`` is set (the flow-control drain): the other
measurements run with the registry a site without flow limits has."""

import os

from benchlib.jobs import record_start

from django_cronqueue import jobs

FLOW_RATE = "10/h"
FLOW_RATE_COUNT = 10


@jobs.job
def noop(n: int) -> None:
    """The no-op job every system runs."""


@jobs.job
def record(n: int) -> None:
    """Pickup latency: write down when the handler started."""
    record_start(n)


if os.environ.get("BENCH_FLOW"):

    @jobs.job(limit_by="tenant", rate_limit=FLOW_RATE)
    def limited(n: int, tenant: str) -> None:
        """The flow-control drain's no-op job: at most 10 starts per tenant an hour."""


@jobs.job
def cpu(n: int) -> None:
    """bench/pools.py: about 50 ms of pure-Python work (the GIL held throughout)."""
    deadline_sum = 0
    for i in range(1_000_000):
        deadline_sum += i * i % 7


@jobs.job(timeout=1, retries=0)
def stuck(n: int) -> None:
    """bench/pools.py: a C-level sleep that only a kill ends (the hard limit's latency)."""
    import ctypes
    import ctypes.util

    ctypes.CDLL(ctypes.util.find_library("c")).sleep(1000)


@jobs.job
async def sleeps(n: int) -> None:
    """bench/pools.py: the asyncio pool's job, awaiting one second."""
    import asyncio

    await asyncio.sleep(1)
