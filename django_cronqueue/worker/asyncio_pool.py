"""The asyncio pool (``runjobs --pool asyncio``): ``async def`` handlers run as tasks of
one event loop, up to ``--concurrency`` at once (hundreds: webhooks, HTTP calls).

One slot thread claims as many jobs as there are free places, starts each as a task on
the loop's thread, and records the outcomes (successes in batches, whatever their
duration). Leases, cancel requests and progress go through the heartbeat as in the
thread pool. ``timeout`` cancels the task (``TimeLimitExceeded``), ``soft_timeout`` too
(``SoftTimeLimitExceeded``). Sync handlers run in a bounded thread executor, with the
thread pool's timeout rules (they cannot be interrupted).

Handlers get the connections Django gives a request: those of the thread they run on
(an executor thread; for ``async def`` handlers, the one thread of the pool that their
``sync_to_async`` calls and the async ORM run on) are closed before and after each job
when unusable or past their age, so a database restart or a killed session costs at
most the runs that meet the dead session (none with ``CONN_HEALTH_CHECKS``). A handler
past its timeout keeps one of the pool's places until it returns; a graceful stop and
``--burst`` still wait for every other run."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import DatabaseError, Error, InterfaceError, close_old_connections, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import signals
from ..claiming import ClaimedJob
from ..definitions.registry import JobDefinition, registry
from ..exceptions import JobCancelled
from ..running.cancellable import run_cancellable
from ..running.context import JobContext, activate
from ..running.execution import Call, Recorder, handler_arguments, within_timeout
from .held_jobs import HeldJob
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
        self._executor = ThreadPoolExecutor(
            SYNC_THREADS,
            thread_name_prefix="cronqueue-sync",
            initializer=self._sync_thread_started,
        )
        self._sync_connections: list[BaseDatabaseWrapper] = []  # of the executor's threads
        self._async_connections: list[BaseDatabaseWrapper] = []  # of async handlers' thread
        self._sync_lock = threading.Lock()
        self._serving: Future[None] | None = None
        self._stop_serving: asyncio.Event | None = None
        self._handlers_context = contextvars.Context()  # see _serve

    def run(self) -> int:
        self._loop_thread.start()
        entered: Future[None] = Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(entered), self._loop)
        entered.result()
        try:
            return super().run()
        finally:
            self._stop_loop()

    async def _serve(self, entered: Future[None]) -> None:
        """Hold, for the pool's life, the thread that the sync code of ``async def``
        handlers runs on (``sync_to_async``, the async ORM): a thread of this pool,
        its connections kept open as a slot's are, and closed at the end. Every job
        task starts in the context captured here (``_start``)."""
        self._stop_serving = asyncio.Event()
        async with ThreadSensitiveContext():
            try:
                await sync_to_async(self._async_thread_started)()
                self._handlers_context = contextvars.copy_context()
                entered.set_result(None)
                await self._stop_serving.wait()
            except BaseException as exc:
                if not entered.done():
                    entered.set_exception(exc)
                raise
            finally:
                await sync_to_async(connections.close_all)()

    def _async_thread_started(self) -> None:
        """The thread of async handlers' sync code: its connections kept open as a
        slot's are, and known to the pool (``_renew_async_connections``)."""
        self._use_persistent_connections()
        self._async_connections = [connections[alias] for alias in connections]

    async def _renew_async_connections(self) -> None:
        """close_old_connections() on the thread of the handlers' sync code; not worth
        a trip to it while it has no connection open (handlers that never query)."""
        if any(wrapper.connection is not None for wrapper in self._async_connections):
            await sync_to_async(close_old_connections)()

    def _stop_loop(self) -> None:
        """Close the handlers' connections and stop the loop; with handlers still running
        (past the shutdown timeout, or past their own timeout: the process exits next,
        their leases expire) the loop is only stopped."""
        if not self.unfinished and self._stop_serving is not None:
            self._loop.call_soon_threadsafe(self._stop_serving.set)
            with suppress(Exception):
                if self._serving is not None:
                    self._serving.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(5)
        self._executor.shutdown(wait=not self.unfinished)
        if not self.unfinished:
            self._close_sync_connections()

    def _sync_thread_started(self) -> None:
        """An executor thread for sync handlers: its connections kept open as a slot's
        are, and known to the pool, which closes them once the thread has ended."""
        self._use_persistent_connections()
        with self._sync_lock:
            self._sync_connections.extend(connections[alias] for alias in connections)

    def _close_sync_connections(self) -> None:
        """Close the connections of the executor's threads, which have ended (a wrapper
        is closed only by its own thread unless sharing is allowed)."""
        with self._sync_lock:
            wrappers, self._sync_connections = self._sync_connections, []
        for wrapper in wrappers:
            wrapper.inc_thread_sharing()
            try:
                with suppress(Error):
                    wrapper.close()
            finally:
                wrapper.dec_thread_sharing()

    def _start_slot(self, index: int) -> None:
        if index == 0:  # one slot claims for the whole loop
            super()._start_slot(index)

    def _slot_loop(self) -> None:
        self._use_persistent_connections()
        self._before_first_claim()
        recorder = BatchingRecorder(self.clock.now)
        failures = 0
        try:
            while True:
                self._record_finished(recorder)
                if self.stopping.is_set():
                    if not self._running_on_time():
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
                if self.mode != "forever" and not self._running_on_time() and free > 0:
                    return
                self._wait(self.poll_interval)
        finally:
            self._flush(recorder)
            connections.close_all()

    def _running_on_time(self) -> int:
        """Runs in flight that a graceful stop and ``--burst`` wait for: all but those
        past their timeout (which the thread pool does not wait for either)."""
        with self._held_lock:
            overran = sum(
                1 for held in self._held.values() if held.abandoned and held.deadline is not None
            )
        return self._in_flight - overran

    def _set_aside(self, held: HeldJob) -> list[ClaimedJob]:
        """A handler overran its timeout: it keeps one of the pool's places until it
        returns, and the loop's one slot goes on with the other runs (it started every
        job it claimed: none to give back)."""
        return []

    def _overrun_note(self, held: HeldJob) -> str:
        return "it keeps one of the pool's places meanwhile"

    def _unfinished_runs(self) -> tuple[list[str], list[str]]:
        """(runs still in flight that the shutdown waited for, runs past their timeout)."""
        with self._held_lock:
            running = [held for held in self._held.values() if held.deadline is not None]
        names = {id(held): f"{held.job.name} #{held.job.id}" for held in running}
        overran = [names[id(held)] for held in running if held.abandoned]
        on_time = [names[id(held)] for held in running if not held.abandoned]
        return on_time, overran

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
        self._loop.call_soon_threadsafe(
            self._create_task, job, held, definition, context=self._handlers_context
        )

    def _create_task(
        self, job: ClaimedJob, held: HeldJob, definition: JobDefinition | None
    ) -> None:
        """On the loop, in the handlers' context (their sync code's thread): the job's task."""
        task = asyncio.ensure_future(self._run_job(job, held, definition))
        task.add_done_callback(lambda done: self._done(held, done))

    def _done(self, held: HeldJob, future: asyncio.Future[Call]) -> None:
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
        try:
            args, kwargs = handler_arguments(definition, job, context)
            with activate(context):
                if definition.is_async:
                    result = await self._call_async(definition, context, args, kwargs)
                else:
                    call = functools.partial(
                        contextvars.copy_context().run, _call_sync, definition.func, args, kwargs
                    )
                    result = await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except BaseException as exc:
            return Call(job, definition, time.monotonic() - started, error=exc, context=context)
        return Call(job, definition, time.monotonic() - started, result=result, context=context)

    async def _call_async(
        self,
        definition: JobDefinition,
        context: JobContext,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """An ``async def`` handler, cancelled at its timeout (``TimeLimitExceeded``), with
        the connections of its sync code's thread renewed before and after it."""
        await self._renew_async_connections()
        try:
            return await run_cancellable(
                context,
                definition.func,
                args,
                kwargs,
                definition.soft_timeout,
                timeout=definition.effective_timeout,
            )
        finally:
            with suppress(Error):
                await self._renew_async_connections()

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


def _call_sync(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A sync handler, on an executor thread whose connections are renewed before and
    after it, as Django does around a request."""
    close_old_connections()
    try:
        return func(*args, **kwargs)
    finally:
        with suppress(Error):
            close_old_connections()
