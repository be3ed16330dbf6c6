"""Batched successes of sensitive jobs: each row marked succeeded with its payload's
secrets erased, in one statement for the batch (SPEC section 16): no succeeded row ever
keeps its secrets, not even for the time between two statements."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import JobStatus
from .base import (
    PLAIN_SUCCESS,
    SUCCEEDED_SET,
    ClaimedJob,
    adapt,
    is_postgresql,
    job_rows,
    placeholders,
    running_by_id,
    succeeded_at,
    succeeded_set_params,
)

# No sensitive job among a batch of successes: no payload to write.
NOTHING_ERASED: Mapping[int, Any] = MappingProxyType({})

# A row's value in a ``CASE id``: its payload as JSON text (PostgreSQL casts it to jsonb)
# or its lease token.
WHEN_JSONB = "WHEN %s THEN %s::jsonb"
WHEN_VALUE = "WHEN %s THEN %s"


def erased_texts(jobs: Sequence[ClaimedJob], erased: Mapping[int, Any]) -> list[str]:
    """The erased payloads of ``jobs``, as JSON text."""
    return [json.dumps(erased[job.id]) for job in jobs]


def by_id(count: int, when: str) -> str:
    """``CASE id WHEN %s THEN %s ... END`` for ``count`` ids: a value per row."""
    return "CASE id " + " ".join([when] * int(count)) + " END"


def complete_erasing_successes(
    connection: BaseDatabaseWrapper,
    jobs: Sequence[ClaimedJob],
    erased: Mapping[int, Any],
    finished_at: dt.datetime,
) -> set[int]:
    """running -> succeeded for sensitive jobs (handlers that returned None), each only
    if its claim still holds the lease, its payload replaced by ``erased[job.id]`` (its
    secrets erased) in the same statement. Returns the ids written."""
    ids = [job.id for job in jobs]
    when_payload = WHEN_JSONB if is_postgresql(connection) else WHEN_VALUE
    sql = (
        f"UPDATE {job_rows(connection)} SET {SUCCEEDED_SET}, "
        f"payload = {by_id(len(ids), when_payload)} "
        f"WHERE {running_by_id(connection)} AND id IN ({placeholders(ids)}) "
        f"AND lock_token = {by_id(len(ids), WHEN_VALUE)}{PLAIN_SUCCESS}"
    )
    params = adapt(
        connection,
        [
            *succeeded_set_params(finished_at),
            *(
                value
                for pair in zip(ids, erased_texts(jobs, erased), strict=True)
                for value in pair
            ),
            JobStatus.RUNNING,
            *ids,
            *(value for job in jobs for value in (job.id, job.token)),
        ],
    )
    with connection.cursor() as cursor:
        if connection.vendor != "mysql":  # MariaDB and MySQL have no UPDATE ... RETURNING
            cursor.execute(sql + " RETURNING id", params)
            return {row[0] for row in cursor.fetchall()}
        cursor.execute(sql, params)
        if cursor.rowcount == len(ids):
            return set(ids)
        return succeeded_at(cursor, connection, ids, finished_at)
