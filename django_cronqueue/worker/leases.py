"""The leases of the jobs a worker claimed in advance: what it knows of their ends, and
the check that keeps a job whose lease ran out while it waited from starting."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from django.db import DatabaseError, InterfaceError

from .. import lifecycle
from ..claiming import ClaimedJob

logger = logging.getLogger("django_cronqueue")


def renew_held_leases(jobs: Sequence[ClaimedJob], *, until: dt.datetime) -> None:
    """The heartbeat's renewal; each job renewed learns its lease's new end. When some
    row was not renewed (it moved on meanwhile, or another transaction held it: its
    outcome being written; renewed at the next beat), one SELECT tells which were."""
    renewed = lifecycle.renew_leases(jobs, until=until, skip_locked=True)
    ids = {job.id for job in jobs}
    if renewed != len(jobs):
        ids = lifecycle.leased_until(jobs, until) if renewed else set()
    for job in jobs:
        if job.id in ids:
            job.lease_until = until


def lease_holds(job: ClaimedJob, now: dt.datetime, lease: dt.timedelta) -> bool:
    """Whether ``job``, claimed and not started, may start: its lease holds for at least
    half a lease more by ``now`` (the worker's corrected clock), or it is renewed now,
    which works only while the row is still running under this claim. A worker stopped
    (SIGSTOP, a long pause) past the leases of the jobs it claimed in advance finds them
    lost here, maybe run by another worker meanwhile, and never starts them."""
    if job.lease_until is not None and job.lease_until - now > lease / 2:
        return True
    until = now + lease
    try:
        renewed = lifecycle.renew_leases([job], until=until) == 1
    except (DatabaseError, InterfaceError):
        renewed = False  # not known to be ours: not started; its lease runs out
    if renewed:
        job.lease_until = until
        return True
    logger.warning(
        "Job %s #%s was not started: its lease ran out before it could start (the worker "
        "was stopped or stalled); it is run by its next claim",
        job.name,
        job.id,
        extra={"job_id": job.id, "job_name": job.name},
    )
    return False
