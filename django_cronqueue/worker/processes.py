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
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from ..claiming import ClaimedJob
from ..exceptions import ChildDied, TimeLimitExceeded
from ..execution import Call, Recorder
from ..held import HeldJob
from ..registry import JobDefinition, registry
from . import child as child_module
from .child import Assignment, Cancel, Report
from .forker import Forker
from .loop import Worker

logger = logging.getLogger("django_cronqueue")

CANCEL_POLL = 0.2  # seconds between a slot's looks at its job's cancel request
RECORD_AFTER_KILL = 5.0  # seconds the slots get to give back jobs of killed children
EXIT_FORKER_GONE = 4  # run()'s exit status when the forker died: no child can start


class ForkerGone(Exception):
    """The process pool's forker died (killed, out of memory): no child can be forked."""


@dataclass
class Child:
    pid: int
    connection: Connection


def _given(outcome: Call) -> Call:
    return outcome


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
        self._forker_lost = False

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
        with contextlib.suppress(ForkerGone):  # the slot finds out, and gives back its jobs
            self._children[f"cronqueue-slot-{index}"] = self._fork()
        super()._start_slot(index)

    def _fork(self) -> Child:
        assert self._forker is not None
        try:
            pid, connection = self._forker.fork()
        except OSError as exc:
            self._forker_gone(exc)
            raise ForkerGone from exc
        logger.info("Worker %s: started child process %s", self.id, pid)
        return Child(pid, connection)

    def _forker_gone(self, exc: OSError) -> None:
        """Stop the worker, which can start no child any more: its running children died
        with the forker (and their jobs are recorded so), the claimed jobs go back at once,
        and the supervisor starts the worker anew. A forker forked again from this
        process, whose threads hold connections, would not start clean."""
        with self._children_lock:
            first, self._forker_lost = not self._forker_lost, True
        if first:
            self.exit_code = EXIT_FORKER_GONE
            logger.error(
                "Worker %s: the process pool's forker (pid %s) is gone (%s: %s); stopping "
                "with status %s for the supervisor to start this worker anew",
                self.id,
                self._forker.pid if self._forker else "?",
                type(exc).__name__,
                exc,
                EXIT_FORKER_GONE,
            )
            self.stop()

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

    # running jobs ---------------------------------------------------------------------

    def _run_held(self, jobs: list[ClaimedJob], recorder: Recorder) -> bool:
        """Run claimed jobs in order, handing them to the slot's child a few at a time
        (an ``Assignment``): the slot records one job while its child runs the next."""
        all_quick = True
        waiting = list(jobs)
        try:
            while waiting:
                if self.stopping.is_set():
                    self._give_back(waiting)
                    break
                assigned = self._begin_assignment(waiting, recorder)
                if assigned:
                    quick, unstarted = self._run_assignment(assigned, recorder)
                    all_quick = quick and all_quick
                    waiting[:0] = unstarted
            return all_quick
        finally:
            self._after_held(jobs, recorder, all_quick)

    def _begin_assignment(self, waiting: list[ClaimedJob], recorder: Recorder) -> list[HeldJob]:
        """Take the jobs to send now from the front of ``waiting``, marked started;
        those that may not start are left out (a job no longer defined here is recorded
        as given back). After a slow job the slot claims one job at a time, so only
        runs of quick jobs are sent together."""
        assigned: list[HeldJob] = []
        while waiting:
            job = waiting.pop(0)
            held = self._begin_run(job)
            if held is None:
                continue
            if registry.get(job.name) is None or self._giving_back:
                self._end_run(held, partial(Call, job, None), recorder)
                continue
            if assigned:
                with self._held_lock:
                    held.deadline = None  # renewed while it waits in the child; no overrun yet
            assigned.append(held)
        return assigned

    def _run_assignment(
        self, assigned: list[HeldJob], recorder: Recorder
    ) -> tuple[bool, list[ClaimedJob]]:
        """Run ``assigned`` in the slot's child and record each outcome as it comes.
        Returns whether all were quick, and the jobs the child did not start (in order,
        no longer marked started) for the slot to send again."""
        try:
            child = self._slot_child()
        except ForkerGone:
            return True, self._unstarted(assigned)
        all_quick = True
        # lease_holds() let each of them start with half a lease left, at least.
        start_by = time.monotonic() + self.lease.total_seconds() / 2
        try:
            child.connection.send(
                Assignment(
                    [held.job for held in assigned],
                    start_by,
                    self.max_jobs_per_child,
                    self.max_memory_per_child,
                )
            )
        except OSError:
            self._end(child, kill=True)
            return True, self._unstarted(assigned)
        for index, held in enumerate(assigned):
            if index:
                self._started_in_child(held)
            outcome = self._await_report(child, held)
            if outcome is None:  # the child sent back the rest unstarted
                return all_quick, self._unstarted(assigned[index:])
            quick = self._end_run(held, partial(_given, outcome[0]), recorder)
            all_quick = quick and all_quick
            if outcome[1]:  # the child ended: killed, died, or retired after this job
                return all_quick, self._unstarted(assigned[index + 1 :])
        return all_quick, []

    def _started_in_child(self, held: HeldJob) -> None:
        """The child starts the next job of its assignment as it reports the last."""
        definition = registry.get(held.job.name)
        timeout = definition.effective_timeout if definition else 0.0
        with self._held_lock:
            held.deadline = time.monotonic() + timeout + self.deadline_margin

    def _unstarted(self, assigned: list[HeldJob]) -> list[ClaimedJob]:
        with self._held_lock:
            for held in assigned:
                held.started = False
                held.deadline = None
        return [held.job for held in assigned]

    def _await_report(self, child: Child, held: HeldJob) -> tuple[Call, bool] | None:
        """Wait for the outcome of ``held``'s job, which the child runs now, killing the
        child at the job's timeout. Returns the outcome and whether the child ended, or
        None when the child did not start the job."""
        job = held.job
        definition = registry.get(job.name)
        assert definition is not None
        timeout = definition.effective_timeout
        started = time.monotonic()
        deadline = started + timeout
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._time_limit(child, job, definition, held, timeout, started), True
                if child.connection.poll(min(remaining, CANCEL_POLL)):
                    report: Report | str = child.connection.recv()
                    break
                if held.context.cancel_requested:  # again until it reports: idempotent
                    child.connection.send(Cancel(job.id))
                    os.kill(child.pid, signal.SIGUSR1)
        except (EOFError, OSError):
            return self._died(child, job, definition, held, started), True
        if not isinstance(report, Report):  # NOT_STARTED
            return None
        if report.progress is not None:
            held.context.put_progress(report.progress)
        outcome = Call(
            job,
            definition,
            report.duration,
            result=report.result,
            error=report.error,
            context=held.context,
        )
        if report.retiring:
            how = self._end(child, kill=False)
            logger.info(
                "Worker %s: replaced child process %s: %s; it %s",
                self.id,
                child.pid,
                report.retiring,
                how,
            )
        return outcome, bool(report.retiring)

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
