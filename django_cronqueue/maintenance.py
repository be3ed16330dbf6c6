"""Housekeeping that a tick does besides running jobs: returning expired leases (the
transition itself is ``lifecycle.lose_lease``), pruning finished rows past their
retention, and forgetting workers that died without unregistering."""

from __future__ import annotations

import datetime as dt
import threading

from django.db.models import QuerySet

from .conf import database_alias, get_settings
from .lifecycle import lose_lease
from .models import Job, JobStatus, Worker
from .registry import registry

EXPIRED_BATCH = 500
DEAD_WORKER_AGE = dt.timedelta(days=1)
PRUNE_EVERY = dt.timedelta(hours=1)


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(database_alias())


def recover_expired_leases(now: dt.datetime) -> int:
    """Running rows whose lease expired go back to pending, due at once, or to failed
    (with ``on_failed``) when no attempt is left. Returns how many."""
    expired = list(
        _jobs()
        .filter(status=JobStatus.RUNNING, locked_until__lt=now)
        .values(
            "id",
            "name",
            "lock_token",
            "attempts",
            "max_attempts",
            "started_at",
            "worker_id",
            "cancel_requested_at",
            "cancel_requested_by",
            "cancel_reason",
        )
        .order_by("locked_until")[:EXPIRED_BATCH]
    )
    return sum(lose_lease(row, registry.get(row["name"]), now) for row in expired)


class PruneClock:
    """Decides when pruning is due: at most once per ``PRUNE_EVERY`` of tick time (a
    ``now`` before the last prune, as tests inject, starts over)."""

    def __init__(self) -> None:
        self._last: dt.datetime | None = None
        self._lock = threading.Lock()

    def due(self, now: dt.datetime) -> bool:
        with self._lock:
            if self._last is None or now < self._last or now - self._last >= PRUNE_EVERY:
                self._last = now
                return True
            return False


def prune(now: dt.datetime) -> int:
    """Delete finished rows past their retention, in batches. Never pending or running rows."""
    settings = get_settings()
    deleted = 0
    if settings.SUCCEEDED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.SUCCEEDED_RETENTION)
        deleted += _delete_in_batches([JobStatus.SUCCEEDED], cutoff, settings.PRUNE_BATCH_SIZE)
    if settings.FAILED_RETENTION is not None:
        cutoff = now - dt.timedelta(seconds=settings.FAILED_RETENTION)
        deleted += _delete_in_batches(
            [JobStatus.FAILED, JobStatus.CANCELLED], cutoff, settings.PRUNE_BATCH_SIZE
        )
    prune_dead_workers(now)
    return deleted


def prune_dead_workers(now: dt.datetime) -> int:
    """Forget workers not seen for a day (they crashed without unregistering)."""
    cutoff = now - DEAD_WORKER_AGE
    deleted, _ = Worker.objects.using(database_alias()).filter(last_seen__lt=cutoff).delete()
    return deleted


def _delete_in_batches(statuses: list[str], cutoff: dt.datetime, batch_size: int) -> int:
    deleted = 0
    while True:
        ids = list(
            _jobs()
            .filter(status__in=statuses, finished_at__lt=cutoff)
            .order_by("finished_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        count, _ = _jobs().filter(id__in=ids, status__in=statuses).delete()
        deleted += count
        if len(ids) < batch_size:
            return deleted
