"""Claiming due jobs: one small interface, one module per database vendor.

``claim(request, using=...)`` atomically moves up to ``request.limit`` due, pending
rows of the names this worker knows to ``running`` under a fresh lease and token,
in the order priority DESC, run_at, id, honouring per-name ``concurrency=`` caps and
the per-key limits of ``limit_by``/``rate_limit`` (``flow``). Names with a cap are
claimed in a separate step (under their lock rows), names with flow limits in another
(under their keys' lock rows); in fair queues both take their keys' turns
(``fairflow``). The jobs of one claim are returned in claim order.
``complete_and_claim`` also writes a slot's quick successes (one statement on
PostgreSQL), and ``claim_one`` is eager mode's claim of one given row.
``claim_request`` (in ``request``) builds the request from the registry.

May import ``history``, ``models``, ``definitions``, ``db``, ``values`` and ``conf``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from types import ModuleType
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import database_alias, get_settings
from ..definitions.registry import registry
from . import base, erasing
from .aging import effective_priority
from .base import TABLE, ClaimedJob, ClaimFloor, ClaimRequest, FlowLimit
from .erasing import NOTHING_ERASED
from .request import claim_request, is_capped

__all__ = [
    "NOTHING_ERASED",
    "ClaimFloor",
    "ClaimRequest",
    "ClaimedJob",
    "FlowLimit",
    "claim",
    "claim_due",
    "claim_one",
    "claim_request",
    "complete_and_claim",
    "complete_successes",
    "is_capped",
    "load_claim_code",
]


_VENDOR_MODULES = {
    "postgresql": "postgresql",
    "sqlite": "sqlite",
    "mysql": "mysql",
}


_backends: dict[str, ModuleType] = {}


def _backend(connection: BaseDatabaseWrapper) -> ModuleType:
    backend = _backends.get(connection.vendor)
    if backend is None:
        module_name = _VENDOR_MODULES.get(connection.vendor)
        if module_name is None:
            raise NotImplementedError(
                f"django-cronqueue does not support the {connection.vendor!r} database "
                "backend; use PostgreSQL, MySQL/MariaDB or SQLite."
            )
        backend = _backends[connection.vendor] = import_module(f"{__name__}.{module_name}")
    return backend


def load_claim_code(connection: BaseDatabaseWrapper) -> None:
    """Import the claim's module for ``connection``'s database now, not in the first
    claim (a worker's slots, while the first jobs are made due)."""
    _backend(connection)


def claim(request: ClaimRequest, *, using: str) -> list[ClaimedJob]:
    if request.limit <= 0 or not (request.names or request.capped or request.limited):
        return []
    connection = connections[using]
    backend = _backend(connection)
    jobs: list[ClaimedJob] = []
    # Capped and limited names first, each in their own (costlier) locked step, so that
    # a steady flow of uncapped jobs cannot starve them; their limits keep them from
    # starving the rest. Their rows in fair queues are left to the turns' step (``fairflow``).
    plain = not _only_fair(request)
    if request.capped and plain:
        capped = request._replace(names=[], limited={}, after=None)
        jobs += backend.claim(connection, capped)
    remaining = request.limit - len(jobs)
    if remaining > 0 and request.limited and plain:
        limited = request._replace(names=[], capped={}, limit=remaining, after=None)
        jobs += backend.claim_limited(connection, limited)
    if request.fair_queues and (request.capped or request.limited):
        jobs += _fair_flow_step(
            connection, backend, request._replace(limit=request.limit - len(jobs))
        )
    for step in _uncapped_steps(request):
        remaining = request.limit - len(jobs)
        if remaining > 0 and request.names:
            uncapped = request._replace(capped={}, limited={}, limit=remaining)
            jobs += step(connection, backend, uncapped)
    jobs.sort(key=_claim_order(request))
    return _with_lease(jobs, request)


def _claim_order(request: ClaimRequest) -> Callable[[ClaimedJob], tuple[int, dt.datetime, int]]:
    """The order a claim's jobs run in: priority (aged, with PRIORITY_AGING), run_at, id."""
    aging = request.aging
    if aging is None:
        return ClaimedJob.order_key
    return lambda job: (
        -effective_priority(job.priority, job.run_at, request.now, aging),
        job.run_at,
        job.id,
    )


Step = Callable[[BaseDatabaseWrapper, ModuleType, ClaimRequest], list[ClaimedJob]]


def _only_fair(request: ClaimRequest) -> bool:
    """Whether every queue the claim reads takes turns."""
    return bool(request.fair_queues and request.queues) and set(request.queues or ()) <= set(
        request.fair_queues
    )


def _uncapped_steps(request: ClaimRequest) -> tuple[Step, ...]:
    """The plain claim, and with fair queues their turns (``fair``) too: which of the two
    comes first alternates from one claim of the process to the next, so that a backlog on
    either side holds up the other for at most every other claim."""
    if not request.fair_queues:
        return PLAIN_STEP
    if _only_fair(request):
        return FAIR_STEP
    return FAIR_THEN_PLAIN if next(_MIXED_CLAIMS) % 2 else PLAIN_THEN_FAIR


# This process's claims of fair and plain queues together, and of several fair queues:
# counted (atomic under the GIL) to take turns at going first.
_MIXED_CLAIMS = itertools.count()
_FAIR_ROTATION = itertools.count()


def _plain_step(
    connection: BaseDatabaseWrapper, backend: ModuleType, request: ClaimRequest
) -> list[ClaimedJob]:
    step = backend.claim_aged if request.aging else backend.claim
    result: list[ClaimedJob] = step(connection, request)
    return result


def _fair_step(
    connection: BaseDatabaseWrapper, backend: ModuleType, request: ClaimRequest
) -> list[ClaimedJob]:
    jobs: list[ClaimedJob] = []
    queues = list(request.fair_queues)
    first = next(_FAIR_ROTATION) % len(queues)  # each fair queue goes first in turn
    for queue in queues[first:] + queues[:first]:
        wanted = request.limit - len(jobs)
        if wanted > 0:
            jobs += backend.claim_fair(
                connection, request._replace(limit=wanted, fair_queues=()), queue
            )
    return jobs


def _fair_flow_step(
    connection: BaseDatabaseWrapper, backend: ModuleType, request: ClaimRequest
) -> list[ClaimedJob]:
    """The capped and limited names' rows of the fair queues, in their keys' turns
    (``fairflow``), each fair queue first in turn."""
    jobs: list[ClaimedJob] = []
    queues = list(request.fair_queues)
    first = next(_FAIR_FLOW_ROTATION) % len(queues)
    for queue in queues[first:] + queues[:first]:
        wanted = request.limit - len(jobs)
        if wanted > 0:
            step = request._replace(limit=wanted, after=None, fair_queues=())
            jobs += backend.claim_fair_flow(connection, step, queue)
    return jobs


_FAIR_FLOW_ROTATION = itertools.count()

PLAIN_STEP: tuple[Step, ...] = (_plain_step,)
FAIR_STEP: tuple[Step, ...] = (_fair_step,)
FAIR_THEN_PLAIN: tuple[Step, ...] = (_fair_step, _plain_step)
PLAIN_THEN_FAIR: tuple[Step, ...] = (_plain_step, _fair_step)


def _with_lease(jobs: list[ClaimedJob], request: ClaimRequest) -> list[ClaimedJob]:
    for job in jobs:
        job.lease_until = request.lease_until
    return jobs


def claim_due(
    now: dt.datetime,
    *,
    queues: Sequence[str] | None,
    limit: int,
    worker_id: str,
    fair_queues: Sequence[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``limit`` jobs due by ``now`` among the names this process defines."""
    request = claim_request(
        now, queues=queues, limit=limit, worker_id=worker_id, fair_queues=fair_queues
    )
    return claim(request, using=database_alias())


def complete_and_claim(
    request: ClaimRequest,
    succeeded: Sequence[ClaimedJob],
    *,
    finished_at: dt.datetime,
    using: str,
    erased: Mapping[int, Any] = NOTHING_ERASED,
) -> tuple[list[ClaimedJob], set[int]]:
    """Mark quick successes succeeded, then claim: one statement on PostgreSQL when no
    capped or limited name is involved, two steps elsewhere. ``erased``: the payloads,
    their secrets erased, of the sensitive jobs among ``succeeded``, by id, each written
    by the statement that marks its row succeeded. Returns (claimed, ids written)."""
    connection = connections[using]
    backend = _backend(connection)
    one_statement = (
        hasattr(backend, "complete_and_claim")
        and not request.capped
        and not request.limited
        and not request.fair_queues
        and not request.aging
    )
    if succeeded and one_statement and request.names and request.limit > 0:
        jobs, written = backend.complete_and_claim(
            connection, request, succeeded, finished_at, erased
        )
        jobs.sort(key=ClaimedJob.order_key)
        _with_lease(jobs, request)
    else:
        written = complete_successes(succeeded, finished_at=finished_at, using=using, erased=erased)
        jobs = claim(request, using=using)
    return jobs, written


def complete_successes(
    jobs: Sequence[ClaimedJob],
    *,
    finished_at: dt.datetime,
    using: str,
    erased: Mapping[int, Any] = NOTHING_ERASED,
) -> set[int]:
    """running -> succeeded for many rows (handlers that returned None), each only if
    its claim still holds the lease. Returns the ids written. ``erased``: the payloads,
    their secrets erased, of the sensitive jobs among ``jobs``, by id: those rows are
    written with them by a statement of their own (the same that marks them succeeded),
    the others by the usual one."""
    if erased:
        written, others = _complete_erasing(jobs, finished_at, using, erased)
        return written | complete_successes(others, finished_at=finished_at, using=using)
    if not jobs:
        return set()
    return base.complete_successes(connections[using], jobs, finished_at)


def _complete_erasing(
    jobs: Sequence[ClaimedJob], finished_at: dt.datetime, using: str, erased: Mapping[int, Any]
) -> tuple[set[int], list[ClaimedJob]]:
    """Write the sensitive jobs among ``jobs`` with their erased payloads. Returns the
    ids written and the other jobs, left to write."""
    sensitive = [job for job in jobs if job.id in erased]
    others = [job for job in jobs if job.id not in erased]
    if not sensitive:
        return set(), others
    written = erasing.complete_erasing_successes(connections[using], sensitive, erased, finished_at)
    return written, others


def claim_one(job_id: int, *, worker_id: str) -> ClaimedJob | None:
    """pending -> running for one row whatever its run_at (eager mode's claim: the
    worker's, minus the due and concurrency conditions). None if it is not pending.

    No heartbeat renews it, so the lease covers the job's whole timeout."""
    connection = connections[database_alias()]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT name FROM {TABLE} WHERE id = %s", [job_id])
        row = cursor.fetchone()
    definition = registry.get(row[0]) if row else None
    timeout = definition.effective_timeout if definition else 0.0
    now = timezone.now()
    lease_until = now + dt.timedelta(seconds=get_settings().LEASE + timeout)
    request = claim_request(now, queues=None, limit=1, worker_id=worker_id, lease_until=lease_until)
    return base.claim_row(connection, request, job_id)
