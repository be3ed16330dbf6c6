# Locking model: row locks. Claimers select candidates with FOR UPDATE SKIP LOCKED, so
# concurrent workers skip each other's rows instead of waiting, and the UPDATE that marks
# them running is the same statement (no cap) or the same transaction (capped names,
# whose lock row is taken FOR UPDATE while the running rows are counted).
"""Claiming on PostgreSQL."""

from __future__ import annotations

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import ClaimedJob, ClaimRequest, claim_returning, claim_two_step

ROW_LOCK = " FOR UPDATE SKIP LOCKED"


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    if not request.capped:
        return claim_returning(connection, request, row_lock=ROW_LOCK)
    with transaction.atomic(using=connection.alias):
        return claim_two_step(connection, request, row_lock=ROW_LOCK, name_lock=" FOR UPDATE")
