"""``manage.py cronqueue_rotate_keys``: every stored sensitive value encrypted again under
the first key of ``CRONQUEUE["ENCRYPTION_KEYS"]``, so that the others can be dropped.

Works while workers run: each batch is one short transaction that locks its rows as it
reads them (``SELECT ... FOR UPDATE SKIP LOCKED``; SQLite's write transaction holds the
whole database), so a worker's concurrent write is never overwritten, and a row a worker
holds locked is taken again at the end. Only rows that can hold encrypted values are
read: jobs pending, running or failed (success and cancel erase them) and schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connections, models, transaction
from django.db.models.functions import Cast

from ..conf import database_alias
from ..exceptions import DecryptionError
from ..integrations import encryption
from ..models import CronSchedule, Job, JobStatus

BATCH_SIZE = 500
# Locked rows are taken again this many times before they are reported as skipped.
LOCKED_ROUNDS = 5
HOLDING = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)


@dataclass
class Rotation:
    """What a rotation did: rows written, rows no key decrypts, rows left locked."""

    rotated: int = 0
    undecryptable: list[str] = field(default_factory=list)  # "job #12 (shop.charge)"
    locked: list[str] = field(default_factory=list)


def rotate_keys(*, batch_size: int = BATCH_SIZE) -> Rotation:
    """Encrypt every stored sensitive value again under the first key (see the module)."""
    rotation = Rotation()
    for model, label, active in (
        (Job, "job", {"status__in": HOLDING}),
        (CronSchedule, "schedule", {}),
    ):
        left = _rotate_rows(model, label, active, batch_size, rotation)
        for _ in range(LOCKED_ROUNDS):
            if not left:
                break
            left = _rotate_batch(model, label, active, left, rotation)
        rotation.locked.extend(f"{label} #{pk}" for pk in left)
    return rotation


def _candidates(model: type[models.Model], active: dict[str, Any]) -> models.QuerySet[Any]:
    """The rows whose payload text names an encrypted value (erased ones included)."""
    rows: models.QuerySet[Any] = model._default_manager.using(database_alias()).filter(**active)
    annotated: models.QuerySet[Any] = rows.annotate(
        payload_text=Cast("payload", models.TextField())
    ).filter(payload_text__contains=encryption.ENCRYPTED)
    return annotated


def _rotate_rows(
    model: type[models.Model],
    label: str,
    active: dict[str, Any],
    batch_size: int,
    rotation: Rotation,
) -> list[int]:
    """Every candidate row in batches by id; returns the ids a lock kept from it."""
    after = 0
    left: list[int] = []
    while True:
        ids = list(
            _candidates(model, active)
            .filter(pk__gt=after)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return left
        left += _rotate_batch(model, label, active, ids, rotation)
        after = ids[-1]


def _rotate_batch(
    model: type[models.Model],
    label: str,
    active: dict[str, Any],
    ids: list[int],
    rotation: Rotation,
) -> list[int]:
    """Re-encrypt the rows ``ids`` that are still candidates, locked as they are read;
    returns those locked by another transaction."""
    using = database_alias()
    skip_locked = connections[using].features.has_select_for_update_skip_locked
    manager = model._default_manager.using(using)
    with transaction.atomic(using=using):
        rows = manager.filter(pk__in=ids, **active).select_for_update(skip_locked=skip_locked)
        seen = set()
        for pk, name, payload in rows.values_list("pk", "name", "payload"):
            seen.add(pk)
            if not encryption.holds_encrypted(payload):
                continue
            where = f"{label} #{pk} ({name})"
            try:
                rotated = encryption.reencrypt_payload(payload, where)
            except DecryptionError:
                rotation.undecryptable.append(where)
                continue
            if rotated is not None:
                manager.filter(pk=pk).update(payload=rotated)
                rotation.rotated += 1
    still_there = set(manager.filter(pk__in=set(ids) - seen, **active).values_list("pk", flat=True))
    return sorted(still_there)
