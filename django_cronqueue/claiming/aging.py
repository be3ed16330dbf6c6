"""Priority aging (``CRONQUEUE["PRIORITY_AGING"] = {"AFTER": s, "EVERY": s}``): a due
pending job ranks as if its priority were one higher for every ``EVERY`` seconds it has
waited beyond ``AFTER`` past its ``run_at``. The stored priority never changes.

The claim index orders rows by (priority DESC, run_at, id); within one priority the
oldest rows have aged the most, so each priority's best rows are its first rows in index
order. A claim of the uncapped names reads the priorities that have due rows (one index
probe each, from the highest down, at most ``MAX_LEVELS``), the first ``limit`` rows of
each, ranks them by aged priority (then ``run_at``, id), and claims the best ``limit`` in
the caller's transaction: locked, skipping rows another claimer holds (those are left to
it: the claim takes fewer).

Capped and limited names keep their own claims (by priority); a fair queue's keys keep
the usual order within a key.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .base import (
    RETURNED_COLUMNS,
    ClaimedJob,
    ClaimRequest,
    adapt,
    claim_set_clause,
    claim_set_params,
    due_filter,
    is_postgresql,
    job_rows,
    limit_clause,
    placeholders,
    row_to_job,
)

# The priorities a claim reads at most: a site with more distinct priorities among its
# due rows has its lowest ones aged only once the higher ones are worked off.
MAX_LEVELS = 64
BELOW = " AND priority < %s"  # the next priority down


def effective_priority(
    priority: int, run_at: dt.datetime, now: dt.datetime, aging: tuple[float, float]
) -> int:
    """``priority`` plus one for every ``EVERY`` seconds waited beyond ``AFTER``."""
    after, every = aging
    waited = (now - run_at).total_seconds() - after
    return priority + (math.floor(waited / every) if waited >= 0 else 0)


def claim_aged(
    connection: BaseDatabaseWrapper, request: ClaimRequest, *, row_lock: str
) -> list[ClaimedJob]:
    """Up to ``request.limit`` due jobs of ``request.names``, best aged priority first.
    Runs inside the caller's transaction."""
    assert request.aging is not None
    aging = request.aging
    request = request._replace(after=None)
    with connection.cursor() as cursor:
        candidates = [
            job
            for priority in _due_priorities(cursor, request)
            for job in _first_rows(cursor, request, priority)
        ]
        candidates.sort(
            key=lambda job: (
                -effective_priority(job.priority, job.run_at, request.now, aging),
                job.run_at,
                job.id,
            )
        )
        chosen = candidates[: request.limit]
        if not chosen:
            return []
        held = _lock(cursor, [job.id for job in chosen], row_lock)
        jobs = [job for job in chosen if job.id in held]
        if jobs:
            cursor.execute(
                f"UPDATE {job_rows(connection)} SET {claim_set_clause()} "
                f"WHERE id IN ({placeholders(jobs)})",
                adapt(connection, [*claim_set_params(request), *(job.id for job in jobs)]),
            )
    return jobs


def _due_priorities(cursor: Any, request: ClaimRequest) -> list[int]:
    """The priorities of the due rows, highest first (at most ``MAX_LEVELS``)."""
    connection = cursor.db
    where, params = due_filter(request, request.names, names_as_array=is_postgresql(connection))
    highest = f"SELECT MAX(priority) FROM {job_rows(connection)} WHERE {where}"
    levels: list[int] = []
    while len(levels) < MAX_LEVELS:
        sql = f"{highest}{BELOW}" if levels else highest
        cursor.execute(sql, adapt(connection, [*params, *levels[-1:]]))
        level = cursor.fetchone()[0]
        if level is None:
            break
        levels.append(level)
    return levels


def _first_rows(cursor: Any, request: ClaimRequest, priority: int) -> list[ClaimedJob]:
    connection = cursor.db
    where, params = due_filter(request, request.names, names_as_array=is_postgresql(connection))
    cursor.execute(
        f"SELECT {RETURNED_COLUMNS} FROM {job_rows(connection)} WHERE {where} "
        f"AND priority = %s ORDER BY run_at, id {limit_clause(request)}",
        adapt(connection, [*params, priority]),
    )
    return [row_to_job(row, request.token, claimed=False) for row in cursor.fetchall()]


def _lock(cursor: Any, ids: list[int], row_lock: str) -> set[int]:
    """Those of ``ids`` still pending, locked (skipping rows another claimer holds)."""
    cursor.execute(
        f"SELECT id FROM {job_rows(cursor.db)} WHERE id IN ({placeholders(ids)}) "
        f"AND status = 'pending' AND blocked = FALSE{row_lock}",
        ids,
    )
    return {row[0] for row in cursor.fetchall()}
