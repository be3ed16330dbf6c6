"""The process pool (``runjobs --pool processes``): each slot thread of the worker
claims, renews and records as in the thread pool, and hands its handlers to a child
process of its own, which it kills at the job's ``timeout``.

Children are forked by the ``Forker`` (clean: no thread, no open connection), one per
slot, and replaced when they die or reach ``--max-jobs-per-child`` or
``--max-memory-per-child``. A killed or dead child fails its job's attempt
(``TimeLimitExceeded``, ``ChildDied``), retried or failed by the job's policy."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from ..claiming import ClaimedJob
from ..exceptions import ChildDied, TimeLimitExceeded
from ..execution import Call
from ..held import HeldJob
from ..registry import JobDefinition, registry
from . import child as child_module
from .child import Report
from .forker import Forker
from .loop import Worker

logger = logging.getLogger("django_cronqueue")

CANCEL_POLL = 0.2  # seconds between a slot's looks at its job's cancel request
RECORD_AFTER_KILL = 5.0  # seconds the slots get to give back jobs of killed children


@dataclass
class Child:
    pid: int
    connection: Connection
    jobs: int = 0


def describe_status(status: int) -> str:
    """``killed by signal SIGKILL`` or ``exited with status 3``."""
    if status < 0:
        return "ended (its exit status is unknown)"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"was killed by signal {name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


class ProcessWorker(Worker):
    """``Worker`` whose slots run handlers in child processes."""

    pool = "processes"
    # The slot kills a child at the job's timeout; the heartbeat's overrun watch (for
    # a slot that could not) only comes this much later.
    deadline_margin = 10.0

    def __init__(
        self,
        *,
        max_jobs_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from ..conf import get_settings

        settings = get_settings()
        self.max_jobs_per_child = max_jobs_per_child or settings.MAX_JOBS_PER_CHILD
        self.max_memory_per_child = max_memory_per_child or settings.MAX_MEMORY_PER_CHILD
        self._children: dict[str, Child] = {}
        self._children_lock = threading.Lock()
        self._forker: Forker | None = None
        self._giving_back = False  # shutdown: jobs of killed children go back to pending

    def run(self) -> int:
        # Fork the forker before the first connection or thread of this run.
        connections.close_all()
        self._forker = Forker(child_module.main)
        try:
            return super().run()
        finally:
            self._kill_children()
            self._forker.close()

    def _start_slot(self, index: int) -> None:
        self._children[f"cronqueue-slot-{index}"] = self._fork()
        super()._start_slot(index)

    def _fork(self) -> Child:
        assert self._forker is not None
        pid, connection = self._forker.fork()
        logger.info("Worker %s: started child process %s", self.id, pid)
        return Child(pid, connection)

    def _slot_child(self) -> Child:
        name = threading.current_thread().name
        with self._children_lock:
            child = self._children.get(name)
        if child is None:
            child = self._fork()
            with self._children_lock:
                self._children[name] = child
        return child

    def _shutdown(self) -> int:
        deadline = time.monotonic() + self.shutdown_timeout
        for thread in self._working_slots():
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._working_slots():
            self._giving_back = True
            logger.warning(
                "Worker %s: killing the children still running a job after the shutdown "
                "timeout of %ss; their jobs are given back",
                self.id,
                self.shutdown_timeout,
            )
            self._kill_children()
            for thread in self._working_slots():
                thread.join(RECORD_AFTER_KILL)
        return super()._shutdown()

    def _kill_children(self) -> None:
        with self._children_lock:
            children = list(self._children.values())
        for child in children:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)

    # running one job ----------------------------------------------------------------

    def _execute(self, job: ClaimedJob, held: HeldJob) -> Call:
        definition = registry.get(job.name)
        if definition is None or self._giving_back:
            return Call(job, None)  # recorded as given back
        child = self._slot_child()
        timeout = definition.effective_timeout
        started = time.monotonic()
        deadline = started + timeout
        try:
            child.connection.send(job)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._time_limit(child, job, definition, held, timeout, started)
                if child.connection.poll(min(remaining, CANCEL_POLL)):
                    report: Report = child.connection.recv()
                    break
                if held.context.cancel_requested:
                    os.kill(child.pid, signal.SIGUSR1)  # again until it reports: idempotent
        except (EOFError, OSError):
            return self._died(child, job, definition, held, started)
        child.jobs += 1
        if report.progress is not None:
            held.context.put_progress(report.progress)
        self._maybe_recycle(child, report)
        return Call(
            job,
            definition,
            report.duration,
            result=report.result,
            error=report.error,
            context=held.context,
        )

    def _end(self, child: Child, *, kill: bool) -> str:
        """Wait for ``child`` to end (killing it first), forget it; how it ended."""
        if kill:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
        assert self._forker is not None
        try:
            status = self._forker.status(child.pid)
        except OSError:
            status = -1
        child.connection.close()
        with self._children_lock:
            for name, known in list(self._children.items()):
                if known is child:
                    del self._children[name]
        return describe_status(status)

    def _time_limit(
        self,
        child: Child,
        job: ClaimedJob,
        definition: JobDefinition,
        held: HeldJob,
        timeout: float,
        started: float,
    ) -> Call:
        self._end(child, kill=True)
        logger.error(
            "Job %s #%s ran past its timeout of %ss: its child process %s was killed",
            job.name,
            job.id,
            timeout,
            child.pid,
            extra={"job_id": job.id, "job_name": job.name, "outcome": "timed_out"},
        )
        error = TimeLimitExceeded(
            f"Job {job.name} #{job.id} ran past its timeout of {timeout:g}s: "
            f"its child process (pid {child.pid}) was killed"
        )
        return Call(job, definition, time.monotonic() - started, error=error, context=held.context)

    def _died(
        self,
        child: Child,
        job: ClaimedJob,
        definition: JobDefinition,
        held: HeldJob,
        started: float,
    ) -> Call:
        how = self._end(child, kill=False)
        if self._giving_back:
            return Call(job, None)
        logger.error(
            "Job %s #%s: the child process %s running it %s",
            job.name,
            job.id,
            child.pid,
            how,
            extra={"job_id": job.id, "job_name": job.name, "outcome": "child_died"},
        )
        error = ChildDied(
            f"Job {job.name} #{job.id}: the child process running it (pid {child.pid}) {how}"
        )
        return Call(job, definition, time.monotonic() - started, error=error, context=held.context)

    def _maybe_recycle(self, child: Child, report: Report) -> None:
        reason = ""
        if self.max_jobs_per_child and child.jobs >= self.max_jobs_per_child:
            reason = f"it ran {child.jobs} job(s) (--max-jobs-per-child)"
        elif self.max_memory_per_child and report.rss_mb > self.max_memory_per_child:
            reason = (
                f"its resident set is {report.rss_mb:.0f} MB, over "
                f"{self.max_memory_per_child} MB (--max-memory-per-child)"
            )
        if not reason:
            return
        with contextlib.suppress(OSError):
            child.connection.send(None)  # it exits
        how = self._end(child, kill=False)
        logger.info(
            "Worker %s: replaced child process %s: %s; it %s", self.id, child.pid, reason, how
        )
