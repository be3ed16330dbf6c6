# Locking model: InnoDB row locks. MySQL 8.0 and MariaDB 10.6 have SELECT ... FOR UPDATE
# SKIP LOCKED but no UPDATE ... RETURNING, so a claim is one short transaction: select
# and lock the candidates (skipping rows another claimer holds), lock the lock rows of
# capped names, then UPDATE the kept ids. The transaction runs at READ COMMITTED (Django's
# default for MySQL, and set for the transaction when OPTIONS ask for another level), so
# the running counts read after taking a name's lock row are current.
"""Claiming on MySQL and MariaDB."""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from .base import ClaimedJob, ClaimRequest, claim_two_step, read_committed_transaction


def claim(connection: BaseDatabaseWrapper, request: ClaimRequest) -> list[ClaimedJob]:
    with read_committed_transaction(connection):
        return claim_two_step(
            connection, request, row_lock=" FOR UPDATE SKIP LOCKED", name_lock=" FOR UPDATE"
        )
