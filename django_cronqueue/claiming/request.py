"""Building a claim: which names this process may claim, capped, limited per key or
neither, and the lease."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from ..conf import get_settings, priority_aging
from ..definitions.registry import JobDefinition, registry
from .base import ClaimFloor, ClaimRequest, FlowLimit


def claim_request(
    now: dt.datetime,
    *,
    queues: Sequence[str] | None,
    limit: int,
    worker_id: str,
    lease_until: dt.datetime | None = None,
    include_capped: bool = True,
    after: ClaimFloor | None = None,
    fair_queues: Sequence[str] = (),
) -> ClaimRequest:
    """A claim of up to ``limit`` due jobs among the names this process defines (a
    worker claims only what its own code can run), under a fresh lease token. Names with
    a ``concurrency=`` cap, a ``limit_by`` or a ``rate_limit`` are left out when
    ``include_capped`` is False. ``after``: the uncapped names' rows only after this
    floor (``claiming.floor``). ``fair_queues``: queues whose keys take turns
    (``claiming.fair.known_fair_queues``), besides those of the jobs with ``fair_by``."""
    uncapped: list[str] = []
    capped: dict[str, int] = {}
    limited: dict[str, FlowLimit] = {}
    fair = set(fair_queues)
    for definition in registry:
        if definition.fair_by is not None:
            fair.add(definition.effective_queue)
        if definition.has_flow_limits:
            if include_capped:
                limited[definition.name] = flow_limit(definition)
        elif definition.concurrency is None:
            uncapped.append(definition.name)
        elif include_capped:
            capped[definition.name] = definition.concurrency
    fair_here = sorted(q for q in fair if not queues or q in queues) if fair else ()
    return ClaimRequest(
        now=now,
        lease_until=lease_until or now + dt.timedelta(seconds=get_settings().LEASE),
        token=uuid.uuid4().hex,
        worker_id=worker_id,
        limit=limit,
        names=uncapped,
        capped=capped,
        queues=list(queues) if queues else None,
        limited=limited,
        after=after,
        fair_queues=fair_here,
        aging=priority_aging(),
        fair_names=[d.name for d in registry] if fair_here else (),
    )


def flow_limit(definition: JobDefinition) -> FlowLimit:
    rate = definition.rate_limit
    return FlowLimit(
        concurrency=definition.concurrency,
        rate=rate.count if rate else None,
        window=rate.seconds if rate else 0.0,
    )


def is_capped(name: str) -> bool:
    """True when this process defines ``name`` with a ``concurrency=`` cap, a ``limit_by``
    or a ``rate_limit``: its jobs are claimed in the locked step."""
    definition = registry.get(name)
    return definition is not None and (
        definition.concurrency is not None or definition.has_flow_limits
    )
