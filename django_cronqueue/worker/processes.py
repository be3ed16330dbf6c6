"""The process pool (``runjobs --pool processes``): each slot thread of the worker
claims, renews and records as in the thread pool, and hands its handlers to a child
process of its own, which it kills at the job's ``timeout``.

Children are forked by the ``Forker`` (clean: no thread, no open connection), one per
slot, and replaced when they die or reach ``--max-jobs-per-child`` or
``--max-memory-per-child``. A killed or dead child fails its job's attempt
(``TimeLimitExceeded``, ``ChildDied``), retried or failed by the job's policy; a child
that died before it started a job is not blamed for it (the job goes to the next child).
A child whose job's lease ran out (the worker was stopped past it: another worker may
run the job now) is killed as soon as the worker sees it (``LeaseLost``): never two
runs at once. When the worker stops, each child finishes the job it runs and the jobs
it was sent but did not start are given back at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from ..claiming import ClaimedJob
from ..definitions.registry import JobDefinition, registry
from ..exceptions import ChildDied, LeaseLost, TimeLimitExceeded
from ..running.execution import Call, Recorder, call
from ..values.error_text import describe
from . import child as child_module
from .child import WITHHELD, Assignment, Cancel, GiveBack, Report, Started
from .forker import Forker
from .held_jobs import HeldJob
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
    # The slot thread sends to it, and so do the heartbeat and the listener (a cancel).
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    giving_back: bool = False  # told that the worker stops (GiveBack)
    withheld: bool = False  # it answered: it starts no more of its assignment
    ended: bool = False  # killed or exited: reaped, or about to be

    def send(self, message: object) -> None:
        with self.send_lock:
            self.connection.send(message)

    def signal(self, signum: int) -> None:
        with self.send_lock:
            if not self.ended:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signum)

    def pass_cancel(self, job_id: int) -> None:
        """Tell it that the cancel of ``job_id`` was requested (before or while it runs)."""
        with contextlib.suppress(OSError):
            self.send(Cancel(job_id))
        self.signal(signal.SIGUSR1)


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
            child.signal(signal.SIGKILL)

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
        except BaseException:
            self._give_back(waiting)  # those not started: now, not once their leases expire
            raise
        finally:
            self._after_held(jobs, recorder, all_quick)

    def _begin_assignment(self, waiting: list[ClaimedJob], recorder: Recorder) -> list[HeldJob]:
        """Take the jobs to send now from the front of ``waiting``, marked started;
        those that may not start are left out (a job no longer defined here is recorded
        as given back, one whose cancel was requested as cancelled before it started).
        After a slow job the slot claims one job at a time, so only runs of quick jobs
        are sent together."""
        assigned: list[HeldJob] = []
        while waiting:
            job = waiting.pop(0)
            held = self._begin_run(job)
            if held is None:
                continue
            if registry.get(job.name) is None or self._giving_back:
                self._end_run(held, partial(Call, job, None), recorder)
                continue
            if held.context.cancel_requested:
                self._end_run(held, partial(call, job, held.context), recorder)
                continue
            with self._held_lock:
                held.deadline = None  # set when the child starts it; no overrun before
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
            child.send(
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
        for held in assigned:  # a cancel requested from now on reaches the child at once
            held.context.on_cancel(partial(child.pass_cancel, held.job.id))
        for index, held in enumerate(assigned):
            outcome = self._outcome_in(child, held, assigned[index + 1 :])
            if outcome is None:  # the child did not start it, nor the rest
                return all_quick, self._unstarted(assigned[index:])
            quick = self._end_run(held, partial(_given, outcome[0]), recorder)
            all_quick = quick and all_quick
            if outcome[1]:  # the child ended: killed, died, or retired after this job
                return all_quick, self._unstarted(assigned[index + 1 :])
        return all_quick, []

    def _started_in_child(self, held: HeldJob, at: float, timeout: float) -> None:
        with self._held_lock:
            held.deadline = at + timeout + self.deadline_margin

    def _unstarted(self, assigned: list[HeldJob]) -> list[ClaimedJob]:
        with self._held_lock:
            for held in assigned:
                held.started = False
                held.deadline = None
        return [held.job for held in assigned]

    def _outcome_in(
        self, child: Child, held: HeldJob, queued: list[HeldJob]
    ) -> tuple[Call, bool] | None:
        """``_await_report``, which nothing may make end the slot: an error (a message
        that cannot be read, a bug) kills the child and fails the job's attempt, retried
        or failed by its policy, and the slot goes on with a new child."""
        try:
            return self._await_report(child, held, queued)
        except Exception as exc:
            return self._lost_track(child, held, exc), True

    def _await_report(
        self, child: Child, held: HeldJob, queued: list[HeldJob]
    ) -> tuple[Call, bool] | None:
        """Wait for the outcome of ``held``'s job, the next one the child runs (then
        ``queued``). The child is killed at the job's timeout (counted from its start in
        the child) and as soon as the job's lease is seen to have run out. Returns the
        outcome and whether the child ended, or None when the child did not start the
        job (nor the rest)."""
        job = held.job
        definition = registry.get(job.name)
        assert definition is not None
        timeout = definition.effective_timeout
        started: float | None = None
        try:
            while True:
                wait = CANCEL_POLL
                if started is not None:
                    remaining = started + timeout - time.monotonic()
                    if remaining <= 0:
                        return self._time_limit(child, definition, held, timeout, started), True
                    if self._lease_ran_out(job):
                        return self._lease_lost(child, definition, held, started), True
                    wait = min(remaining, CANCEL_POLL)
                self._nudge(child, held, queued, running=started is not None)
                if not child.connection.poll(wait):
                    continue
                message: Started | Report | str = child.connection.recv()
                if isinstance(message, Started):
                    started = message.at
                    self._started_in_child(held, started, timeout)
                elif isinstance(message, Report):
                    return self._reported(child, definition, held, message)
                elif message == WITHHELD:
                    child.withheld = True
                    self._give_back(self._unstarted(queued))
                else:  # NOT_STARTED
                    return None
        except (EOFError, OSError):
            if started is None:
                self._gone_before(child, job)
                return None
            return self._died(child, definition, held, started), True

    def _nudge(self, child: Child, held: HeldJob, queued: list[HeldJob], *, running: bool) -> None:
        """Signal the child again while it has not read what it was sent: a signal that
        came as it started a job, before its handler ran, went unread."""
        if running and held.context.cancel_requested:
            child.signal(signal.SIGUSR1)
        if self.stopping.is_set() and queued and not child.giving_back:
            child.giving_back = True
            child.send(GiveBack())
        if running and child.giving_back and not child.withheld:
            child.signal(signal.SIGUSR1)

    def _lease_ran_out(self, job: ClaimedJob) -> bool:
        """The heartbeat renews the lease every third of a lease: it ran out only when
        the worker was stopped or stalled (or the database away) that long, and another
        worker may have taken the job over."""
        return job.lease_until is not None and job.lease_until <= self.clock.now()

    def _reported(
        self, child: Child, definition: JobDefinition, held: HeldJob, report: Report
    ) -> tuple[Call, bool]:
        if report.progress is not None:
            held.context.put_progress(report.progress)
        outcome = Call(
            held.job,
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
            child.signal(signal.SIGKILL)
        with child.send_lock:
            child.ended = True  # its pid may be reused once it is reaped: no more signals
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

    def _gone_before(self, child: Child, job: ClaimedJob) -> None:
        how = self._end(child, kill=True)
        if not self._giving_back:
            logger.warning(
                "Worker %s: child process %s %s before it started job %s #%s; the job "
                "goes to a new child",
                self.id,
                child.pid,
                how,
                job.name,
                job.id,
                extra={"job_id": job.id, "job_name": job.name},
            )

    def _time_limit(
        self,
        child: Child,
        definition: JobDefinition,
        held: HeldJob,
        timeout: float,
        started: float,
    ) -> Call:
        job = held.job
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

    def _lease_lost(
        self, child: Child, definition: JobDefinition, held: HeldJob, started: float
    ) -> Call:
        """Kill the child of a job whose lease ran out; the attempt fails (a write the
        token guards: nothing is written when another worker took the job over)."""
        job = held.job
        self._end(child, kill=True)
        logger.error(
            "Job %s #%s: its lease ran out while it ran (the worker was stopped or stalled "
            "past it): its child process %s was killed, another worker may run the job",
            job.name,
            job.id,
            child.pid,
            extra={"job_id": job.id, "job_name": job.name, "outcome": "lease_lost"},
        )
        error = LeaseLost(
            f"Job {job.name} #{job.id}: its lease ran out while it ran (its worker was "
            f"stopped or stalled past it); its child process (pid {child.pid}) was killed"
        )
        return Call(job, definition, time.monotonic() - started, error=error, context=held.context)

    def _died(self, child: Child, definition: JobDefinition, held: HeldJob, started: float) -> Call:
        job = held.job
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

    def _lost_track(self, child: Child, held: HeldJob, exc: Exception) -> Call:
        job = held.job
        self._end(child, kill=True)
        logger.exception(
            "Job %s #%s: the worker could not follow its child process %s, which was "
            "killed and is replaced",
            job.name,
            job.id,
            child.pid,
            extra={"job_id": job.id, "job_name": job.name, "outcome": "child_died"},
        )
        error = ChildDied(
            f"Job {job.name} #{job.id}: the worker could not follow the child process "
            f"running it (pid {child.pid}): {describe(exc)}; the child was killed"
        )
        return Call(job, registry.get(job.name), error=error, context=held.context)
