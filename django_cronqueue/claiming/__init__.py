"""Claiming due jobs: one small interface, one module per database vendor.

``claim(request, using=...)`` atomically moves up to ``request.limit`` due, pending
rows of the names this worker knows to ``running`` under a fresh lease and token,
in the order priority DESC, run_at, id, honouring per-name ``concurrency=`` caps.
Names with a cap are claimed in a separate step (under their lock rows); the jobs of
one claim are returned in claim order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from importlib import import_module
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import ClaimedJob, ClaimRequest

__all__ = ["ClaimRequest", "ClaimedJob", "claim", "complete_and_claim"]

_VENDOR_MODULES = {
    "postgresql": "postgresql",
    "sqlite": "sqlite",
    "mysql": "mysql",
}


def _backend(connection: BaseDatabaseWrapper) -> Any:
    module_name = _VENDOR_MODULES.get(connection.vendor)
    if module_name is None:
        raise NotImplementedError(
            f"django-cronqueue does not support the {connection.vendor!r} database backend; "
            "use PostgreSQL, MySQL/MariaDB or SQLite."
        )
    return import_module(f"{__name__}.{module_name}")


def complete_and_claim(
    request: ClaimRequest,
    succeeded: Sequence[ClaimedJob],
    *,
    finished_at: dt.datetime,
    using: str,
) -> tuple[list[ClaimedJob], set[int]]:
    """Mark quick successes succeeded, then claim: one statement on PostgreSQL when no
    capped name is involved, two steps elsewhere. Returns (claimed, ids written)."""
    connection = connections[using]
    backend = _backend(connection)
    one_statement = hasattr(backend, "complete_and_claim") and not request.capped
    if succeeded and one_statement and request.names and request.limit > 0:
        jobs, written = backend.complete_and_claim(connection, request, succeeded, finished_at)
        jobs.sort(key=ClaimedJob.order_key)
    else:
        from ..lifecycle import complete_successes

        written = complete_successes(list(succeeded), now=finished_at) if succeeded else set()
        jobs = claim(request, using=using)
    return jobs, written


def claim(request: ClaimRequest, *, using: str) -> list[ClaimedJob]:
    if request.limit <= 0 or not (request.names or request.capped):
        return []
    connection = connections[using]
    backend = _backend(connection)
    jobs: list[ClaimedJob] = []
    # Capped names first, in their own (costlier) locked step, so that a steady flow of
    # uncapped jobs cannot starve them; caps keep them from starving the rest.
    if request.capped:
        jobs += backend.claim(connection, replace(request, names=[]))
    remaining = request.limit - len(jobs)
    if remaining > 0 and request.names:
        jobs += backend.claim(connection, replace(request, capped={}, limit=remaining))
    jobs.sort(key=ClaimedJob.order_key)
    return jobs
