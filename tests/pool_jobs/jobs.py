"""A job only the process pool may run (a sync handler with a soft_timeout: system
check E032 refuses it to the thread pool), in an app of its own that only the
process-pool workers of tests/reliability/test_pools.py install
(``tests.pool_jobs.settings``); the test creates its rows by name."""

from __future__ import annotations

import time

from django_cronqueue import jobs
from tests.reliability.jobs import mark


@jobs.job(name="rel.pool.soft", timeout=10, soft_timeout=1, retries=0)
def soft(key: str) -> None:
    mark("start", key)
    try:
        time.sleep(8)
    except jobs.SoftTimeLimitExceeded:
        mark("cleanup", key)
        raise
