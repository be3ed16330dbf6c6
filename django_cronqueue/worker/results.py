"""What a tick hands back to its caller: ``TickResult``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TickResult:
    """What one tick did: rows claimed, handlers that succeeded, handlers that raised."""

    claimed: int
    ran: int
    failed: int
