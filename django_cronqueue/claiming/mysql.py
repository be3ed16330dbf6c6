# Locking model: InnoDB row locks. MySQL 8.0 and MariaDB 10.6 have SELECT ... FOR UPDATE
# SKIP LOCKED but no UPDATE ... RETURNING, so a claim is one short transaction: select
# and lock the candidates (skipping rows another claimer holds), lock the lock rows of
# capped names, then UPDATE the kept ids. Django runs MySQL at READ COMMITTED, so the
# running counts read after taking a name's lock row are current.
"""Claiming on MySQL and MariaDB."""

from __future__ import annotations

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .base import ClaimedJob, ClaimRequest, claim_two_step


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with transaction.atomic(using=connection.alias):
        return claim_two_step(
            connection, request, row_lock=" FOR UPDATE SKIP LOCKED", name_lock=" FOR UPDATE"
        )
