"""A process-pool child: runs the jobs its parent sends, one at a time, and sends back
what each call did. The parent claims, renews the leases and records the outcomes;
the child only calls handlers (with its own database connection, for their queries).

The parent sends an ``Assignment`` of a few jobs at once (the quick jobs its slot
claimed together), so that it records one job's outcome while the child runs the next:
one message each way per job would leave both waiting on each other. Before it calls a
job's handler the child says so (``Started``, one-way): the parent's hard limit counts
from then, and a child that dies before it is not blamed for that job. A job the child
could not start by the assignment's ``start_by`` (its lease might have run out: the
parent was stopped, or a job before it ran long) is sent back unstarted, with the rest;
so are the rest once the worker stops (``GiveBack``). Past ``--max-jobs-per-child`` or
``--max-memory-per-child`` the child says so in its report and exits; the jobs it did
not start go to its replacement.

Signals: SIGTERM and SIGINT are ignored (the parent drains, then kills: Ctrl-C reaches
the whole process group); SIGUSR1 tells the child to read what its parent sent while a
handler runs (a cancel request, the worker's stop); SIGALRM, armed for a sync handler's
``soft_timeout``, raises ``SoftTimeLimitExceeded`` in it."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from django.db import close_old_connections, connections

from ..claiming import ClaimedJob
from ..definitions.registry import registry
from ..exceptions import Snooze, SoftTimeLimitExceeded
from ..running.context import JobContext
from ..running.execution import Call, call, new_context
from ..values.error_text import format_traceback
from .forker import die_with_parent

MB = 1024 * 1024


@dataclass
class Assignment:
    """Jobs for a child to run in order."""

    jobs: list[ClaimedJob]
    start_by: float  # time.monotonic(): a job not started by then is sent back unstarted
    max_jobs: int | None  # the child's --max-jobs-per-child
    max_memory_mb: int | None  # its --max-memory-per-child


@dataclass
class Report:
    """What a child sends back for one job."""

    duration: float
    result: Any
    error: BaseException | None
    progress: dict[str, Any] | None
    retiring: str = ""  # why the child exits after this job (a recycling limit), if it does


@dataclass
class Cancel:
    """Sent before SIGUSR1: the cancel of job ``job_id`` was requested. The signal alone
    could reach the job after it (the child starts the next job as it reports one)."""

    job_id: int


@dataclass
class GiveBack:
    """Sent (with SIGUSR1) when the worker stops: finish the running job, start no more
    of the assignment. Answered by ``WITHHELD`` while a handler runs, else by
    ``NOT_STARTED`` in place of the next job."""


@dataclass
class Started:
    """Sent just before a job's handler is called."""

    job_id: int
    at: float  # time.monotonic(): one clock for every process of the host


NOT_STARTED = "not started"  # sent instead of a Report: the rest of the assignment is not run
WITHHELD = "withheld"  # the jobs after the running one will not be started


class _Running:
    parent: Connection | None = None
    context: JobContext | None = None
    soft_armed = False
    reading = False  # a signal handler reads from the parent (no nested read)
    cancelled: set[int] = set()  # jobs of this assignment whose cancel was requested
    giving_back = False  # the worker stops: start no more of this assignment
    withheld = False  # the parent was told so


_running = _Running()


def resident_mb() -> float:
    """This process's resident set now (Linux), else its peak, in MB."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / MB if sys.platform == "darwin" else peak / 1024


def _take_messages(parent: Connection) -> None:
    """Read what the parent sent meanwhile: cancel requests, the worker's stop. Never an
    ``Assignment``: the parent sends the next one only once this one is done."""
    while parent.poll():
        message = parent.recv()
        if isinstance(message, Cancel):
            _running.cancelled.add(message.job_id)
            context = _running.context
            if context is not None and context.job_id == message.job_id:
                context.request_cancel()
        elif isinstance(message, GiveBack):
            _running.giving_back = True


def _on_message(signum: int, frame: FrameType | None) -> None:
    # Only while a handler runs: then the main thread is not using the connection.
    parent = _running.parent
    if _running.context is None or parent is None or _running.reading:
        return
    _running.reading = True
    try:
        _take_messages(parent)
        if _running.giving_back and not _running.withheld:
            _running.withheld = True
            parent.send(WITHHELD)  # the parent gives the rest back now, not after this job
    except (EOFError, OSError):
        pass  # the parent is gone: this child ends with it
    finally:
        _running.reading = False


def _on_soft_limit(signum: int, frame: FrameType | None) -> None:
    if _running.soft_armed and _running.context is not None:
        _running.soft_armed = False
        context = _running.context
        raise SoftTimeLimitExceeded(
            f"Job {context.name} #{context.job_id} ran past its soft time limit"
        )


def main(parent: Connection, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, _on_message)
    signal.signal(signal.SIGALRM, _on_soft_limit)
    _running.parent = parent
    ran = 0
    try:
        while True:
            try:
                message: Assignment | Cancel | GiveBack | None = parent.recv()
            except EOFError:
                return
            if message is None:
                return
            if not isinstance(message, Assignment):
                continue  # a cancel or a stop for jobs that ended meanwhile
            ran, retired = _run_assignment(parent, message, ran)
            if retired:
                return
    finally:
        connections.close_all()


def _run_assignment(parent: Connection, assignment: Assignment, ran: int) -> tuple[int, bool]:
    """Run the jobs of ``assignment`` in order. Returns how many jobs this child has
    run, and whether it must now exit (a recycling limit)."""
    _running.cancelled = set()
    _running.giving_back = _running.withheld = False
    for job in assignment.jobs:
        _take_messages(parent)
        if _running.giving_back or time.monotonic() > assignment.start_by:
            parent.send(NOT_STARTED)
            return ran, False
        parent.send(Started(job.id, time.monotonic()))
        report = run(job, cancelled=job.id in _running.cancelled)
        ran += 1
        report.retiring = retiring(ran, assignment)
        parent.send(report)
        if report.retiring:
            return ran, True
    return ran, False


def retiring(ran: int, assignment: Assignment) -> str:
    """Why this child, having run ``ran`` jobs, must be replaced now, or ""."""
    if assignment.max_jobs and ran >= assignment.max_jobs:
        return f"it ran {ran} job(s) (--max-jobs-per-child)"
    if assignment.max_memory_mb and (rss_mb := resident_mb()) > assignment.max_memory_mb:
        return (
            f"its resident set is {rss_mb:.0f} MB, over "
            f"{assignment.max_memory_mb} MB (--max-memory-per-child)"
        )
    return ""


def run(job: ClaimedJob, *, cancelled: bool = False) -> Report:
    """Call the handler of ``job`` (not when ``cancelled``: it ends cancelled)."""
    definition = registry.get(job.name)
    context = new_context(job)
    if cancelled:
        context.request_cancel()  # call() ends it "cancelled before it started"
    _running.context = context
    soft = definition.soft_timeout if definition is not None else None
    outcome: Call | None = None
    started = time.monotonic()
    try:
        try:
            if soft is not None and not definition.is_async:  # type: ignore[union-attr]
                _running.soft_armed = True
                signal.setitimer(signal.ITIMER_REAL, soft)
            outcome = call(job, context)
        finally:
            _running.soft_armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            _running.context = None
    except SoftTimeLimitExceeded as exc:
        # The limit passed as the handler returned, outside its own frames: a handler
        # that returned keeps its outcome; otherwise the attempt fails with the limit.
        if outcome is None:
            outcome = Call(job, definition, time.monotonic() - started, error=exc, context=context)
    close_old_connections()
    return Report(
        outcome.duration,
        _sendable_result(outcome),
        _sendable_error(outcome),
        context.progress,
    )


def _sendable_result(outcome: Call) -> Any:
    """The return value, if the parent can read it back; else a stand-in (the parent
    drops it with a warning, as any value the database cannot store). A value can
    pickle and still fail to unpickle: an exception whose ``__init__`` takes two
    arguments."""
    value = outcome.result
    if value is None:
        return None
    try:
        if type(pickle.loads(pickle.dumps(value))) is not type(value):
            raise TypeError
    except Exception:
        return UnsendableValue(type(value).__qualname__)
    return value


class UnsendableValue:
    """Stands for a return value that cannot cross to the parent (not JSON either)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}, which cannot leave the child process>"


def _sendable_error(outcome: Call) -> BaseException | None:
    exc = outcome.error
    if exc is None or isinstance(exc, Snooze):
        return exc  # a Snooze is rebuilt by its own __reduce__
    text = format_traceback(exc)
    copy: BaseException
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if type(copy) is not type(exc):
            raise TypeError
    except Exception:
        copy = RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    copy.remote_traceback = text  # type: ignore[attr-defined]
    copy.__traceback__ = None
    copy.__cause__ = copy.__context__ = None
    return copy
