"""The read model of the control of running work: progress reported by handlers, cancel
requests, and the pauses of queues and job names.

``Job.progress`` is JSON written by the worker (``{"done", "total", "message", "at"}``);
``progress_of`` reads it defensively into a ``Progress`` (None for anything else), so a
screen never trusts the shape of a JSON column. ``running_jobs`` lists what runs now with
its progress and cancel request, ``pauses`` every pause row (in force or ended but not yet
deleted by housekeeping), ``pause_targets`` the queues and job names an operator can
pause, each with its pause if it has one, and ``held_by_pause`` the condition the
claim leaves out, for facts that should leave paused jobs out.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.dateparse import parse_datetime

from ..definitions.registry import registry
from ..models import JobStatus, Pause
from .base import jobs, read_alias

__all__ = [
    "RUNNING_SHOWN",
    "PauseState",
    "PauseTarget",
    "PauseTargets",
    "Progress",
    "RunningJob",
    "held_by_pause",
    "in_force",
    "number",
    "pause_targets",
    "pauses",
    "pauses_holding",
    "progress_of",
    "running_jobs",
]

#: ``running_jobs`` lists at most this many rows (the longest running first).
RUNNING_SHOWN = 50


# --- progress -----------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """How far a job got, as its handler last reported it (``JobContext.set_progress``)."""

    done: float
    total: float | None
    message: str
    at: dt.datetime | None

    @property
    def fraction(self) -> float | None:
        """``done / total`` within [0, 1]; None without a positive total."""
        if self.total is None or self.total <= 0:
            return None
        return min(max(self.done / self.total, 0.0), 1.0)

    @property
    def percent(self) -> int | None:
        fraction = self.fraction
        return None if fraction is None else math.floor(fraction * 100)

    def describe(self) -> str:
        """``3/10 (30%): chunk 3``, ``3 done``, ``3 done: chunk 3``."""
        amount = (
            f"{number(self.done)} done"
            if self.total is None
            else f"{number(self.done)}/{number(self.total)}"
        )
        if self.percent is not None:
            amount += f" ({self.percent}%)"
        return f"{amount}: {self.message}" if self.message else amount


def number(value: float) -> str:
    """``3``, ``2.5``, ``1,200`` (never ``3.0``)."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def progress_of(value: object) -> Progress | None:
    """The ``Progress`` stored in ``Job.progress``, None when there is none or when the
    value does not have its shape (a number ``done``, a number or null ``total``)."""
    if not isinstance(value, dict):
        return None
    done = _finite(value.get("done"))
    total = _finite(value.get("total"))
    if done is None or (total is None and value.get("total") is not None):
        return None
    message = value.get("message")
    return Progress(
        done=done,
        total=total,
        message=message if isinstance(message, str) else "",
        at=_instant(value.get("at")),
    )


def _instant(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


# --- running jobs -------------------------------------------------------------------


@dataclass(frozen=True)
class RunningJob:
    id: int
    name: str
    queue: str
    worker_id: str
    started_at: dt.datetime | None
    progress: Progress | None
    cancel_requested_at: dt.datetime | None
    cancel_requested_by: str


def running_jobs(limit: int = RUNNING_SHOWN) -> list[RunningJob]:
    """The running jobs, the longest running first, at most ``limit`` (the status counts
    say how many there are): one query."""
    rows = (
        jobs()
        .filter(status=JobStatus.RUNNING)
        .order_by("started_at", "pk")
        .values_list(
            "pk",
            "name",
            "queue",
            "worker_id",
            "started_at",
            "progress",
            "cancel_requested_at",
            "cancel_requested_by",
        )[:limit]
    )
    return [
        RunningJob(pk, name, queue, worker, started, progress_of(progress), requested, by)
        for pk, name, queue, worker, started, progress, requested, by in rows
    ]


# --- pauses -------------------------------------------------------------------------


@dataclass(frozen=True)
class PauseState:
    """A pause of a queue or a job name (exactly one of them is set) as of ``now``."""

    id: int
    queue: str
    name: str
    until: dt.datetime | None
    reason: str
    paused_by: str
    paused_at: dt.datetime
    in_force: bool  # False once ``until`` has passed (housekeeping deletes it later)

    @property
    def target(self) -> str:
        return f"queue {self.queue}" if self.queue else f"job {self.name}"


def _pause_rows() -> QuerySet[Pause]:
    return Pause.objects.using(read_alias())


def in_force(now: dt.datetime) -> Q:
    """The pauses that hold at ``now`` (as the claim decides)."""
    return Q(until__isnull=True) | Q(until__gt=now)


def pauses(now: dt.datetime) -> list[PauseState]:
    """Every pause row, by queue then job name, each saying whether it holds at ``now``."""
    return [
        PauseState(
            id=row.pk,
            queue=row.queue,
            name=row.name,
            until=row.until,
            reason=row.reason,
            paused_by=row.created_by,
            paused_at=row.created_at,
            in_force=row.holds(now),
        )
        for row in _pause_rows().order_by("queue", "name")
    ]


def pauses_holding(queue: str, name: str, now: dt.datetime) -> list[PauseState]:
    """The pauses in force at ``now`` that hold back the pending jobs of ``queue`` and
    ``name``."""
    return [
        pause
        for pause in pauses(now)
        if pause.in_force and ((pause.queue and pause.queue == queue) or (pause.name == name))
    ]


def held_by_pause(now: dt.datetime) -> Exists:
    """True for a job row that a pause in force at ``now`` holds back: the condition the
    claim leaves out (``claiming.base.NOT_PAUSED``), as an ORM expression."""
    return Exists(
        _pause_rows().filter(Q(queue=OuterRef("queue")) | Q(name=OuterRef("name")), in_force(now))
    )


@dataclass(frozen=True)
class PauseTarget:
    """A queue or a job name the operator may pause, and its pause if it has one."""

    kind: str  # "queue" or "name"
    value: str
    pause: PauseState | None
    queue: str = ""  # of a job name: the queue its definition sends jobs to
    defined: bool = True  # of a job name: whether code in this process defines it

    @property
    def paused(self) -> bool:
        return self.pause is not None and self.pause.in_force


@dataclass(frozen=True)
class PauseTargets:
    queues: list[PauseTarget]
    names: list[PauseTarget]

    @property
    def paused(self) -> list[PauseTarget]:
        return [target for target in (*self.queues, *self.names) if target.paused]


def pause_targets(now: dt.datetime, known_queues: list[str]) -> PauseTargets:
    """The queues (``known_queues``, those the job definitions use and those paused) and
    job names (those defined and those paused) an operator can pause or resume."""
    rows = pauses(now)
    by_queue = {row.queue: row for row in rows if row.queue}
    by_name = {row.name: row for row in rows if row.name}
    definitions = {definition.name: definition for definition in registry}
    queue_names = set(known_queues) | set(by_queue)
    queue_names |= {definition.effective_queue for definition in definitions.values()}
    queues = [PauseTarget("queue", queue, by_queue.get(queue)) for queue in sorted(queue_names)]
    names = [
        PauseTarget(
            "name",
            name,
            by_name.get(name),
            queue=definitions[name].effective_queue if name in definitions else "",
            defined=name in definitions,
        )
        for name in sorted(set(definitions) | set(by_name))
    ]
    return PauseTargets(queues=queues, names=names)
