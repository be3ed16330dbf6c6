"""Enqueue once the site's transaction commits: for a queue in a database of its own.

An ``enqueue`` writes to ``CRONQUEUE["DATABASE"]``. When that is another database than
the one holding the site's data, a ``transaction.atomic()`` on the site's database does
not cover the job: a rollback there leaves the job behind, and a worker may run it before
the site's rows are committed (or visible). ``enqueue_on_commit`` checks everything at
once, as ``enqueue`` does, and writes the job only when the site's transaction commits
(Django's ``transaction.on_commit``); a rollback drops it. Outside a transaction it
enqueues at once.

What it gives up: the job is written after the site's commit, in a transaction of its
own, so a crash (or a failed write) between the two leaves the site's data without its
job.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..definitions.registry import JobDefinition, registry
from .enqueue import checked_row, enqueue


def enqueue_on_commit(
    job: str | JobDefinition,
    payload: Mapping[str, Any] | None = None,
    *,
    using: str | None = None,
    run_at: dt.datetime | None = None,
    delay: dt.timedelta | float | None = None,
    dedupe_key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    dedupe_for: dt.timedelta | None = None,
    fair_key: str | None = None,
) -> None:
    """Check a run of ``job`` now and enqueue it when the transaction on the database
    ``using`` (the site's: ``default`` when None) commits; a rollback drops it.

    ``run_at`` and ``delay`` count from the commit, as if ``enqueue`` were called then.
    """
    definition = registry.resolve(job)
    options: dict[str, Any] = {
        "run_at": run_at,
        "delay": delay,
        "dedupe_key": dedupe_key,
        "priority": priority,
        "queue": queue,
        "dedupe_for": dedupe_for,
        "fair_key": fair_key,
    }
    row, _ = checked_row(definition, payload, now=timezone.now(), **options)
    # What is checked now is what is written: later changes to ``payload`` are not seen.
    checked_payload = copy.deepcopy(row.payload)

    def write() -> None:
        enqueue(definition, checked_payload, **options)

    # robust=False: an error of the write reaches the code that committed (the site's
    # data stays committed; the job is lost, and that code hears of it).
    transaction.on_commit(write, using=using)
