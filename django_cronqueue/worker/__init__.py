"""The ``runjobs`` worker: ``Worker`` (``loop``) claims, renews leases (``heartbeat``)
and records outcomes; its pool runs the handlers: slot threads, child processes
(``processes``) or one event loop (``asyncio_pool``)."""

from __future__ import annotations

from typing import Any

from .database import MAX_DB_BACKOFF
from .heartbeat import EXIT_STUCK
from .loop import HELPER_JOIN_TIMEOUT, OUTCOME_WRITE_ATTEMPTS, Worker

__all__ = [
    "EXIT_STUCK",
    "HELPER_JOIN_TIMEOUT",
    "MAX_DB_BACKOFF",
    "OUTCOME_WRITE_ATTEMPTS",
    "Worker",
    "make_worker",
]


def make_worker(
    pool: str,
    *,
    max_jobs_per_child: int | None = None,
    max_memory_per_child: int | None = None,
    **options: Any,
) -> Worker:
    """The worker of ``pool`` (threads, processes or asyncio), with ``Worker``'s options."""
    if pool == "processes":
        from .processes import ProcessWorker

        return ProcessWorker(
            max_jobs_per_child=max_jobs_per_child,
            max_memory_per_child=max_memory_per_child,
            **options,
        )
    if pool == "asyncio":
        from .asyncio_pool import AsyncioWorker

        return AsyncioWorker(**options)
    if pool != "threads":
        raise ValueError(f"pool must be threads, processes or asyncio, got {pool!r}")
    return Worker(**options)
