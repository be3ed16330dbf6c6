"""The ``runjobs`` worker: ``Worker`` (``loop``) claims, renews leases (``heartbeat``)
and records outcomes; its pool runs the handlers: slot threads, child processes
(``processes``) or one event loop (``asyncio_pool``). ``tick`` is one round of a
worker's work (``jobs.tick()`` runs one in-process); ``held_jobs``, ``leases``,
``startup``, ``stranded_watch`` and ``storage_watch`` are what a worker keeps an eye on.

May import ``operations`` and everything below it; only ``management``, ``jobs``,
``health``, ``testing`` and ``apps`` import it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


# Loaded when first asked for: ``jobs.tick()``, the health probe and the system checks
# import modules of this folder without starting a worker, and should not pay for one.
def __getattr__(name: str) -> Any:
    if name in ("HELPER_JOIN_TIMEOUT", "OUTCOME_WRITE_ATTEMPTS", "Worker"):
        from . import loop

        return getattr(loop, name)
    if name == "EXIT_STUCK":
        from .heartbeat import EXIT_STUCK

        return EXIT_STUCK
    if name == "MAX_DB_BACKOFF":
        from .database import MAX_DB_BACKOFF

        return MAX_DB_BACKOFF
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from .loop import Worker

    return Worker(**options)
