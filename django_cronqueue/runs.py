"""Plain values handed to callers and handlers: ``TickResult`` and ``CronRun``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class TickResult:
    """What one tick did: rows claimed, handlers that succeeded, handlers that raised."""

    claimed: int
    ran: int
    failed: int


@dataclass(frozen=True)
class CronRun:
    """What a cron handler receives.

    ``scheduled_for`` is the occurrence being run, aware, in the schedule's zone: use it
    rather than the wall clock. ``catch_up`` is True when the occurrence runs late,
    after downtime. ``job_id`` is the row's id.
    """

    scheduled_for: dt.datetime
    catch_up: bool = False
    job_id: int | None = None
