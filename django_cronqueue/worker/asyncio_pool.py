"""The asyncio pool (``runjobs --pool asyncio``): ``async def`` handlers run as tasks of
one event loop, up to ``--concurrency`` at once (hundreds: webhooks, HTTP calls).

One slot thread claims as many jobs as there are free places, starts each as a task on
the loop's thread, and records the outcomes (successes in batches, whatever their
duration). Leases, cancel requests and progress go through the heartbeat as in the
thread pool. ``timeout`` cancels the task (``TimeLimitExceeded``), ``soft_timeout`` too
(``SoftTimeLimitExceeded``). Sync handlers run in a bounded thread executor, with the
thread pool's timeout rules (they cannot be interrupted)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connections

from .. import signals
from ..claiming import ClaimedJob
from ..context import activate
from ..exceptions import JobCancelled, TimeLimitExceeded
from ..execution import Call, Recorder, handler_arguments, run_cancellable, within_timeout
from ..held import HeldJob
from ..registry import JobDefinition, registry
from .loop import Worker

CLAIM_MAX = 100  # rows per claim
SYNC_THREADS = 8  # the executor of sync handlers


class BatchingRecorder(Recorder):
    """Every success that returned None waits for a batch, however long it ran: the
    asyncio pool finishes many slow jobs at once."""

    QUICK = float("inf")


class AsyncioWorker(Worker):
    pool = "asyncio"
    deadline_margin = 10.0  # the task is cancelled at the timeout; the heartbeat after

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._finished: queue.SimpleQueue[tuple[HeldJob, Call]] = queue.SimpleQueue()
        self._in_flight = 0
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="cronqueue-event-loop", daemon=True
        )
        self._executor = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="cronqueue-sync")

    def run(self) -> int:
        self._loop_thread.start()
        try:
            return super().run()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(5)
            self._executor.shutdown(wait=False)

    def _start_slot(self, index: int) -> None:
        if index == 0:  # one slot claims for the whole loop
            super()._start_slot(index)

    def _slot_loop(self) -> None:
        self._use_persistent_connections()
        recorder = BatchingRecorder(self.clock.now)
        failures = 0
        try:
            while True:
                self._record_finished(recorder)
                if self.stopping.is_set():
                    if not self._in_flight:
                        return
                    self._wait(0.05)
                    continue
                free = self.concurrency - self._in_flight
                jobs: list[ClaimedJob] = []
                if free > 0:
                    try:
                        close_old_connections()
                        jobs = self._claim(min(free, CLAIM_MAX), recorder)
                        failures = 0
                    except (DatabaseError, InterfaceError) as exc:
                        failures += 1
                        self._database_backoff(exc, failures)
                        continue
                    for job in jobs:
                        self._start(job)
                if jobs:
                    continue
                if self.mode != "forever" and not self._in_flight and free > 0:
                    return
                self._wait(self.poll_interval)
        finally:
            self._flush(recorder)
            connections.close_all()

    def _wait(self, seconds: float) -> None:
        self.wake.wait(seconds)
        with self._wake_lock:
            if not self.stopping.is_set():
                self.wake.clear()

    def _start(self, job: ClaimedJob) -> None:
        definition = registry.get(job.name)
        with self._held_lock:
            held = self._held.get(job.id)
            if held is None or held.job.token != job.token:
                return
            held.started = True
            timeout = definition.effective_timeout if definition else 0.0
            margin = self.deadline_margin if definition and definition.is_async else 0.0
            held.deadline = time.monotonic() + timeout + margin
        self._in_flight += 1
        if definition is not None:
            signals.send(signals.job_started, job.name, job=job)
        future = asyncio.run_coroutine_threadsafe(self._run_job(job, held, definition), self._loop)
        future.add_done_callback(lambda done: self._done(held, done))

    def _done(self, held: HeldJob, future: Future[Call]) -> None:
        try:
            outcome = future.result()
        except BaseException as exc:
            outcome = Call(held.job, registry.get(held.job.name), error=exc, context=held.context)
        self._finished.put((held, outcome))
        self.wake.set()

    async def _run_job(
        self, job: ClaimedJob, held: HeldJob, definition: JobDefinition | None
    ) -> Call:
        if definition is None:
            return Call(job, None)
        context = held.context
        if context.cancel_requested:
            cancelled = JobCancelled(f"Job {job.name} #{job.id}: cancelled before it started")
            return Call(job, definition, error=cancelled, context=context)
        started = time.monotonic()
        timeout = definition.effective_timeout
        try:
            args, kwargs = handler_arguments(definition, job, context)
            with activate(context):
                if definition.is_async:
                    result = await asyncio.wait_for(
                        run_cancellable(
                            context, definition.func, args, kwargs, definition.soft_timeout
                        ),
                        timeout,
                    )
                else:
                    call = contextvars.copy_context().run
                    result = await asyncio.get_running_loop().run_in_executor(
                        self._executor, lambda: call(definition.func, *args, **kwargs)
                    )
        except TimeoutError:
            error = TimeLimitExceeded(
                f"Job {job.name} #{job.id} ran past its timeout of {timeout:g}s: "
                "its task was cancelled"
            )
            return Call(job, definition, time.monotonic() - started, error=error, context=context)
        except BaseException as exc:
            return Call(job, definition, time.monotonic() - started, error=exc, context=context)
        return Call(job, definition, time.monotonic() - started, result=result, context=context)

    def _record_finished(self, recorder: Recorder) -> None:
        while True:
            try:
                held, outcome = self._finished.get_nowait()
            except queue.Empty:
                return
            self._in_flight -= 1
            job = held.job
            outcome = within_timeout(outcome, overran=held.abandoned)
            waiting = False
            try:
                self._write_outcomes(functools.partial(recorder.add_or_flush, outcome))
                waiting = any(pending is outcome for pending in recorder.pending)
            except Exception:
                self._log_unrecorded(job)
            finally:
                if waiting:
                    with self._held_lock:
                        held.deadline = None
                else:
                    self._drop_held([job])

    def _log_unrecorded(self, job: ClaimedJob) -> None:
        import logging

        logging.getLogger("django_cronqueue").exception(
            "Job %s #%s: could not record the outcome", job.name, job.id
        )
