"""The jobs a worker holds: claimed, maybe running, their leases renewed by its
heartbeat; and what the heartbeat passes between them and their rows besides the lease
(cancel requests in, progress out)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError

from .. import lifecycle
from ..claiming import ClaimedJob
from ..running.context import JobContext


@dataclass
class HeldJob:
    job: ClaimedJob
    context: JobContext  # its jobs.current(): the worker tells it of cancel requests
    slot: str = ""  # the name of the slot thread holding it
    started: bool = False  # its handler was called
    deadline: float | None = None  # monotonic; set when its handler starts
    abandoned: bool = False  # past its timeout: no longer renewed
    # Monotonic: until then, at least half its lease is known to be left (claimed since).
    fresh_until: float = 0.0


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


class CancelNotices:
    """Ids of cancel notifications (PostgreSQL) that matched no held job. A slot's claim
    commits before the slot holds its jobs, and a request can come in between: the slot
    looks for its new claims here (``take``) and asks their rows, since a notice may be
    about another worker's run of the same row. Guarded by the worker's held lock;
    kept for ``KEEP`` seconds."""

    KEEP = 30.0

    def __init__(self) -> None:
        self._ids: dict[int, float] = {}

    def add(self, job_ids: Iterable[int]) -> None:
        now = time.monotonic()
        self._ids = {i: at for i, at in self._ids.items() if now - at < self.KEEP}
        self._ids.update(dict.fromkeys(job_ids, now))

    def take(self, job_ids: Iterable[int]) -> list[int]:
        return [i for i in job_ids if self._ids.pop(i, None) is not None]


def pass_on_noticed(held: list[HeldJob]) -> None:
    """``pass_on_cancel_requests`` for claims that a notice named before they were
    held; if the database fails now, the next heartbeat passes the request on."""
    if held:
        with contextlib.suppress(DatabaseError, InterfaceError):
            pass_on_cancel_requests(held)
