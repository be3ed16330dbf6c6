"""The jobs a worker holds: claimed, maybe running, their leases renewed by its
heartbeat; and what the heartbeat passes between them and their rows besides the lease
(cancel requests in, progress out)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import lifecycle
from .claiming import ClaimedJob
from .context import JobContext


@dataclass
class HeldJob:
    job: ClaimedJob
    context: JobContext  # its jobs.current(): the worker tells it of cancel requests
    slot: str = ""  # the name of the slot thread holding it
    started: bool = False  # its handler was called
    deadline: float | None = None  # monotonic; set when its handler starts
    abandoned: bool = False  # past its timeout: no longer renewed


def pass_on_cancel_requests(held: Iterable[HeldJob]) -> None:
    """Tell the handlers of held jobs whose cancel was requested (one SELECT, by the
    heartbeat: how workers without NOTIFY learn of a cancel)."""
    watched = [entry for entry in held if not entry.context.cancel_requested]
    if not watched:
        return
    requested = lifecycle.cancel_requested_among([entry.job for entry in watched])
    for entry in watched:
        if entry.job.id in requested:
            entry.context.request_cancel()


def write_progress(held: Iterable[HeldJob]) -> None:
    """Store the progress that handlers set since the last beat: at most one write per
    job and beat, however often ``set_progress()`` was called."""
    updates = [
        (entry.job, progress)
        for entry in held
        if entry.started and (progress := entry.context.take_unwritten_progress()) is not None
    ]
    if updates:
        lifecycle.write_progress(updates)
