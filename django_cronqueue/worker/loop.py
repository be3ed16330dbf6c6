"""The ``runjobs`` worker.

``Worker`` does what a tick does (``django_cronqueue.worker.tick``), continuously: its main
thread does the housekeeping every poll interval, and ``concurrency`` slot threads
(each with its own database connection) claim and run jobs, beside a heartbeat thread
that renews the leases of the jobs it holds and, on PostgreSQL, a LISTEN connection
that wakes idle slots as soon as a job is enqueued. Those are all its threads: a slot
whose handler overran its timeout keeps it (no thread can be killed) and takes no new
work until it returns, and ``run()`` stops the helpers before it returns.
"""

from __future__ import annotations

import _thread
import contextlib
import datetime as dt
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    close_old_connections,
    connections,
)

from .. import lifecycle
from ..claiming import ClaimedJob, claim_request, is_capped, load_claim_code
from ..claiming.floor import ClaimFloors
from ..conf import database_alias, get_settings, max_clock_skew
from ..db import clock
from ..db.notify import SelectableEvent, listen
from ..definitions.registry import registry
from ..housekeeping import vacuum
from ..models import Worker as WorkerRow
from ..running.execution import Call, Recorder, call, new_context, within_timeout, write_and_claim
from . import startup
from .database import MAX_DB_BACKOFF
from .heartbeat import Heartbeat
from .held_jobs import CancelNotices, HeldJob, pass_on_noticed
from .leases import lease_holds
from .storage_watch import HoldWatch, StorageWatch
from .stranded_watch import StrandedWatch
from .tick import Housekeeping

logger = logging.getLogger("django_cronqueue")

OUTCOME_WRITE_ATTEMPTS = 4  # over 0.5 + 1 + 2 s of backoff
HELPER_JOIN_TIMEOUT = 10.0  # seconds run() waits for the heartbeat and the listener to end


# --- the runjobs worker -----------------------------------------------------------


class Worker(Heartbeat):
    """A ``runjobs`` process: slot threads that claim and run, plus housekeeping."""

    pool = "threads"
    deadline_margin = 0.0  # seconds past a job's timeout before the heartbeat acts

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        scheduler: bool = True,
        mode: str = "forever",
    ) -> None:
        settings = get_settings()
        if mode not in ("forever", "once", "burst"):
            raise ValueError(f"mode must be 'forever', 'once' or 'burst', got {mode!r}")
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency or settings.CONCURRENCY
        self.poll_interval = poll_interval if poll_interval is not None else settings.POLL_INTERVAL
        self.shutdown_timeout = (
            shutdown_timeout if shutdown_timeout is not None else settings.SHUTDOWN_TIMEOUT
        )
        self.scheduler = scheduler
        self.mode = mode
        self.lease = dt.timedelta(seconds=settings.LEASE)
        self.timeout_grace = float(settings.TIMEOUT_GRACE)
        self.exit_code = 0
        self.prefetch = max(1, settings.PREFETCH)
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # Every time decision uses this clock: the host's, corrected to the database's.
        self.clock = clock.CorrectedClock(f"Worker {self.id}", max_clock_skew())
        self.stopping = threading.Event()
        self._first_pass_done = threading.Event()  # the slots' first claims wait for it
        self.wake = threading.Event()
        self._wake_lock = threading.Lock()  # stop() against a slot clearing wake
        self._held: dict[int, HeldJob] = {}
        self._held_lock = threading.Lock()
        self._notices = CancelNotices()  # cancels of jobs not held (yet), by the listener
        self._slots: list[threading.Thread] = []
        self._overran_slots: set[str] = set()  # names of slots in a handler past its timeout
        self._helpers: list[threading.Thread] = []  # the heartbeat and the listener
        self._helpers_stop = SelectableEvent()  # wakes the listener's select() at once
        self._signals = 0
        self._cutoff: dt.datetime | None = None  # --once: only what was due at start
        self._skip_capped_until = 0.0
        self.unfinished: list[str] = []  # slots still in a handler when run() returned
        # A fresh one: the first tick syncs every schedule.
        self.housekeeping = Housekeeping(f"worker {self.id}")
        self.stranded = StrandedWatch(settings.LEASE)
        self.storage = StorageWatch(settings.LEASE)
        self.floors = ClaimFloors(full_every=self.poll_interval)
        self.hold = HoldWatch(self.floors)
        self.vacuums = vacuum.Vacuums()

    # lifecycle ------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped (or, in once/burst mode, until nothing is due). Returns 0.

        Leaves nothing behind: the signal handlers and this thread's connection settings
        are restored, and the threads it started are stopped, except a slot still in a
        handler (past its timeout, or past the shutdown timeout: see ``unfinished``)."""
        handlers = self._install_signal_handlers()
        settings = self._use_persistent_connections()
        try:
            return self._run()
        finally:
            self._stop_helpers()
            self._restore(handlers, settings)

    def _run(self) -> int:
        startup.announce(self.id, database_alias(), self.queues, self.concurrency, self.mode)
        if not self._wait_for_database():
            return 0
        startup.require_tables(database_alias())
        self._register()
        if self.mode == "once":
            self._cutoff = self.clock.now()
        # The slots open their connections while the first pass makes due what they
        # claim first (``_before_first_claim``). The first jobs wait for no count, move to
        # history or prune: the first pass's chores come with the main loop's first pass,
        # a poll later (once and burst, which may end sooner: after their last claim).
        for index in range(self.concurrency):
            self._start_slot(index)
        try:
            self._with_database_retry(self._make_due)
            if self.mode == "forever":
                self.housekeeping.started_at(self.clock.now())
        finally:
            self._first_pass_done.set()
        self._start_helper(self._heartbeat_loop, "cronqueue-heartbeat")
        if connections[database_alias()].vendor == "postgresql":
            self._start_helper(self._listen_loop, "cronqueue-listen")
        self._main_loop()
        if self.mode != "forever" and not self.stopping.is_set():
            self._with_database_retry(self._chores)  # each at most once per interval
        return self._shutdown()

    def _main_loop(self) -> None:
        while not self.stopping.is_set():
            if working := self._working_slots():  # back as soon as one ends (or a poll)
                working[0].join(self.poll_interval)
            elif self.mode == "forever":  # every slot in a handler past its timeout
                self.stopping.wait(self.poll_interval)
            if self.stopping.is_set() or (self.mode != "forever" and not self._working_slots()):
                return  # once/burst: the last slot found nothing left
            if self._with_database_retry(self._housekeep):
                self.wake.set()

    def _housekeep(self) -> None:
        self._watch_holds()
        self._make_due()
        self._chores()

    def _watch_holds(self) -> None:
        """A transaction held open (``floors.held``) and the vacuums behind it."""
        if self.clock.trusted and self.mode == "forever":  # once/burst: a full claim ends them
            health = self.hold.check()
            if health is not None:
                self.vacuums.check(health, held=self.floors.held)

    def _make_due(self) -> None:
        """What the slots' claims need first (``Housekeeping.make_due``)."""
        if self.clock.trusted:  # a clock too far off the database's decides nothing
            self.housekeeping.make_due(
                self.clock.now(), materialize=self.scheduler, held=self.floors.held
            )

    def _chores(self) -> None:
        """The rest of a pass: the counts, moves to history and prune
        (``Housekeeping.chores``), the stranded-job and storage warnings."""
        if self.clock.trusted:
            self.housekeeping.chores(self.clock.now(), held=self.floors.held)
            self.stranded.check(self.clock.now())
            self.storage.check()

    def _working_slots(self) -> list[threading.Thread]:
        with self._held_lock:
            return [t for t in self._slots if t.is_alive() and t.name not in self._overran_slots]

    def _overran_slot_threads(self) -> list[threading.Thread]:
        with self._held_lock:
            return [t for t in self._slots if t.is_alive() and t.name in self._overran_slots]

    def _shutdown(self) -> int:
        deadline = time.monotonic() + self.shutdown_timeout
        for thread in self._working_slots():
            thread.join(max(0.0, deadline - time.monotonic()))
        still_running, overran = self._unfinished_runs()
        self.unfinished = still_running + overran
        if overran:
            logger.warning(
                "Worker %s: %s handler(s) past their timeout still running; abandoned",
                self.id,
                len(overran),
            )
        if still_running:
            logger.warning(
                "Worker %s: %s handler(s) still running after the shutdown timeout of %ss; "
                "their leases will expire and the jobs will run again",
                self.id,
                len(still_running),
                self.shutdown_timeout,
            )
        self._with_database_retry(self._unregister, attempts=1)
        logger.info("Worker %s stopped", self.id)
        return self.exit_code

    def _unfinished_runs(self) -> tuple[list[str], list[str]]:
        """(slots still in a handler after the shutdown's wait, slots in a handler past
        its timeout), by name."""
        still_running = [thread.name for thread in self._working_slots()]
        return still_running, [thread.name for thread in self._overran_slot_threads()]

    def stop(self) -> None:
        with self._wake_lock:  # from now on no slot clears wake: each sees the stop
            self.stopping.set()
            self.wake.set()

    def _install_signal_handlers(self) -> dict[int, Any]:
        """Handle SIGTERM and SIGINT; returns the handlers they had."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }

    def _restore(self, handlers: dict[int, Any], settings: dict[str, dict[str, Any]]) -> None:
        """Give the caller back its signal handlers and connection settings (``runjobs``
        called in-process, by a test suite or a script, goes on running after this)."""
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for alias, settings_dict in settings.items():
            connections[alias].settings_dict = settings_dict

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("Worker %s: second signal, exiting at once", self.id)
            os._exit(1)
        logger.info(
            "Worker %s: got %s; finishing running jobs (up to %ss), send again to exit at once",
            self.id,
            signal.Signals(signum).name,
            self.shutdown_timeout,
        )
        # This runs on the main thread between two bytecodes, maybe while it holds the
        # (not reentrant) lock of an event that stop() sets: a deadlock. Set them from a
        # bare thread (threading.Thread.start() could wait on a lock the main thread holds).
        _thread.start_new_thread(self.stop, ())

    # slots ------------------------------------------------------------------------

    def _start_slot(self, index: int) -> None:
        thread = threading.Thread(
            target=self._slot_loop, name=f"cronqueue-slot-{index}", daemon=True
        )
        self._slots.append(thread)
        thread.start()

    def _before_first_claim(self) -> None:
        """Open this slot's connection and load the claim's code for its database while
        the main thread's first pass makes the first jobs due, then wait for that pass:
        the first claim waits for neither. A failure is left to the claim's own retry."""
        connection = connections[database_alias()]
        with contextlib.suppress(DatabaseError, InterfaceError, NotImplementedError):
            connection.ensure_connection()
            load_claim_code(connection)
        self._first_pass_done.wait()

    def _slot_loop(self) -> None:
        self._use_persistent_connections()
        self._before_first_claim()
        failures = 0
        batch = 1  # grows while jobs are quick, back to 1 after a slow job or when idle
        recorder = Recorder(self.clock.now)
        ran = False  # the jobs' runs closed what was old after each job
        try:
            while not self.stopping.is_set():
                try:
                    if not ran:
                        close_old_connections()
                    ran = False
                    jobs = self._claim(batch, recorder)
                    failures = 0
                except (DatabaseError, InterfaceError) as exc:
                    failures += 1
                    self._database_backoff(exc, failures)
                    continue
                except Exception:
                    failures += 1
                    self._slot_failed(failures)
                    continue
                if not jobs:
                    batch = 1
                    if self.mode != "forever":
                        return
                    self.wake.wait(self.poll_interval)
                    with self._wake_lock:
                        if not self.stopping.is_set():
                            self.wake.clear()
                    continue
                try:
                    all_quick = self._run_held(jobs, recorder)
                except Exception:
                    failures += 1
                    self._slot_failed(failures)
                    all_quick = False
                ran = True
                batch = min(batch * 2, self.prefetch) if all_quick else 1
        finally:
            self._flush(recorder)
            connections.close_all()

    def _slot_failed(self, failures: int) -> None:
        """An error that is no database's (a bug, a broken process pool): the slot logs
        it, waits (backing off) and goes on; the jobs it held are recorded or given back
        (``_run_held``), never left for their leases to expire."""
        delay = min(MAX_DB_BACKOFF, 0.5 * 2 ** (failures - 1))
        logger.exception(
            "Worker %s: %s failed; it goes on in %.1fs",
            self.id,
            threading.current_thread().name,
            delay,
        )
        self.stopping.wait(delay)

    def _claim(self, limit: int, recorder: Recorder) -> list[ClaimedJob]:
        requested = time.monotonic()
        now = self.clock.now()
        # Capped names take a locked, costlier claim: after one that found none of
        # them, leave them out for a poll interval (a wake-up brings them back).
        include_capped = requested >= self._skip_capped_until or self.wake.is_set()
        floor = self.floors.take()
        request = claim_request(
            self._cutoff or now,
            queues=self.queues,
            limit=limit if self.clock.trusted else 0,  # untrusted: only write successes
            worker_id=self.id,
            lease_until=now + self.lease,
            include_capped=include_capped,
            after=floor,
            fair_queues=self.housekeeping.fair_queues,
        )
        # The slot's quick successes are written by the same statement (PostgreSQL).
        succeeded, erased = recorder.take()
        try:
            jobs, written = write_and_claim(request, [call.job for call in succeeded], now, erased)
        except BaseException:
            recorder.put_back(succeeded, erased)
            raise
        recorder.announce(succeeded, written)
        in_order = jobs
        if request.aging or request.fair_queues:  # the floor follows the plain order only
            in_order = (
                [] if request.aging else [j for j in jobs if j.queue not in request.fair_queues]
            )
        self.floors.advance(floor, in_order, time.monotonic() - requested)
        self._drop_held([call.job for call in succeeded])
        if include_capped and not any(is_capped(job.name) for job in jobs):
            self._skip_capped_until = time.monotonic() + self.poll_interval
        slot = threading.current_thread().name
        fresh_until = requested + self.lease.total_seconds() / 2
        if request.limit:
            self.housekeeping.tally.record(request.limit, len(jobs))
        with self._held_lock:
            for job in jobs:
                self._held[job.id] = HeldJob(
                    job, new_context(job), slot=slot, fresh_until=fresh_until
                )
            noticed = [self._held[i] for i in self._notices.take(job.id for job in jobs)]
        pass_on_noticed(noticed)  # a cancel notice came between the claim and now
        return jobs

    def _run_held(self, jobs: list[ClaimedJob], recorder: Recorder) -> bool:
        """Run claimed jobs in order. Returns True when all were quick."""
        all_quick = True
        try:
            for index, job in enumerate(jobs):
                if self.stopping.is_set():
                    self._give_back(jobs[index:])
                    break
                held = self._begin_run(job)
                if held is not None:
                    quick = self._end_run(held, partial(self._execute, job, held), recorder)
                    all_quick = quick and all_quick
            return all_quick
        except BaseException:
            self._give_back(jobs)  # those not started: now, not once their leases expire
            raise
        finally:
            self._after_held(jobs, recorder, all_quick)

    def _after_held(self, jobs: list[ClaimedJob], recorder: Recorder, all_quick: bool) -> None:
        if self.stopping.is_set() or not all_quick:
            self._flush(recorder)  # else the slot's next claim writes them
        # Successes still waiting to be written keep their leases until then.
        waiting = {id(outcome.job) for outcome in recorder.pending}
        self._drop_held([job for job in jobs if id(job) not in waiting])

    def _begin_run(self, job: ClaimedJob) -> HeldJob | None:
        """Mark ``job`` started, unless its lease ran out or it was given back
        meanwhile (then None: it is not run)."""
        with self._held_lock:
            held = self._held.get(job.id)
            # Claimed less than half a lease ago (most jobs): its lease holds, no clock read.
            fresh = held is not None and time.monotonic() < held.fresh_until
        if not fresh and not lease_holds(job, self.clock.now(), self.lease):  # lost meanwhile
            self._drop_held([job])
            return None
        definition = registry.get(job.name)
        timeout = definition.effective_timeout if definition else 0.0
        with self._held_lock:
            held = self._held.get(job.id)
            if held is None or held.job.token != job.token:
                return None  # given back by the heartbeat: a job before it overran
            held.started = True
            held.deadline = time.monotonic() + timeout + self.deadline_margin
        return held

    def _end_run(self, held: HeldJob, run: Callable[[], Call], recorder: Recorder) -> bool:
        """Run a started job (``run()`` returns its outcome) and record the outcome.
        Returns True when it was quick."""
        job = held.job
        quick = waiting = False
        try:
            outcome = within_timeout(run(), overran=held.abandoned)
            quick = outcome.duration < Recorder.QUICK
            self._write_outcomes(lambda: recorder.add_or_flush(outcome))
            # A quick success waits in the recorder's batch, maybe behind a slow job:
            # its lease stays renewed until the batch is written.
            waiting = bool(recorder.pending) and recorder.pending[-1] is outcome
        except (DatabaseError, InterfaceError) as exc:
            # The handler ran but its outcome could not be written; the lease will
            # expire and the job runs again (at-least-once).
            logger.error("Job %s #%s: could not record the outcome: %s", job.name, job.id, exc)
        except BaseException:
            # Nothing a job brings (a hook raising SystemExit, a value the database
            # refuses) may end this slot thread: log it; the lease expires, the job reruns.
            logger.exception("Job %s #%s: could not record the outcome", job.name, job.id)
        finally:
            if waiting:
                with self._held_lock:
                    held.deadline = None  # finished: renewed, never "past its timeout"
            else:
                self._drop_held([job])
            close_old_connections()
            if held.abandoned:
                self._returned_late(held)
        return quick

    def _execute(self, job: ClaimedJob, held: HeldJob) -> Call:
        """Run the handler: in this slot thread (the process pool runs it in a child)."""
        return call(job, held.context)

    def _returned_late(self, held: HeldJob) -> None:
        with self._held_lock:
            self._overran_slots.discard(held.slot)
        logger.warning(
            "Job %s #%s returned after its timeout; %s takes new work again",
            held.job.name,
            held.job.id,
            held.slot,
        )

    def _flush(self, recorder: Recorder) -> None:
        try:
            self._write_outcomes(recorder.flush)
        except (DatabaseError, InterfaceError) as exc:
            logger.error("Worker %s: could not record finished jobs: %s", self.id, exc)

    def _write_outcomes(self, write: Callable[[], None]) -> None:
        """Write finished jobs' outcomes. A connection that died meanwhile (a database
        restart, a killed session) is replaced and the write tried again, with backoff:
        every write is guarded by its claim's token, so trying again is safe, and a
        finished job is not run again (or failed, on its last attempt) for want of it.
        An IntegrityError or DataError is the database refusing the data, not an outage:
        the same write would be refused again, so it is not retried (``lifecycle``
        already fell back to storable data)."""
        for failure in range(1, OUTCOME_WRITE_ATTEMPTS + 1):
            try:
                write()
                return
            except (IntegrityError, DataError):
                raise
            except (DatabaseError, InterfaceError) as exc:
                if failure == OUTCOME_WRITE_ATTEMPTS:
                    raise
                self._database_backoff(exc, failure)

    def _give_back(self, jobs: list[ClaimedJob]) -> None:
        """Give back those of ``jobs`` this process holds and has not started. They
        leave the held set first, under the lock, so that their slot cannot start one
        meanwhile (the heartbeat gives back the jobs of a slot that overran)."""
        with self._held_lock:
            unstarted = [
                job
                for job in jobs
                if (held := self._held.get(job.id)) is not None
                and held.job.token == job.token
                and not held.started
            ]
            for job in unstarted:
                del self._held[job.id]
        if not unstarted:
            return
        try:
            released = lifecycle.release_unstarted(unstarted)
            logger.info("Worker %s: gave back %s unstarted job(s)", self.id, released)
        except (DatabaseError, InterfaceError) as exc:
            logger.warning(
                "Worker %s: could not give back jobs (%s); leases will expire", self.id, exc
            )

    def _drop_held(self, jobs: list[ClaimedJob]) -> None:
        """Forget these claims. Only these: a run that overran its timeout may return
        after this process re-claimed its job, and the retry's entry must stay renewed."""
        with self._held_lock:
            for job in jobs:
                held = self._held.get(job.id)
                if held is not None and held.job.token == job.token:
                    del self._held[job.id]

    # heartbeat, listener, database ------------------------------------------------

    def _start_helper(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._helpers.append(thread)
        thread.start()

    def _stop_helpers(self) -> None:
        """Stop the heartbeat (it renews leases until the slots are done) and the listener."""
        self.stop()  # a slot whose late handler returns now stops too
        self._helpers_stop.set()
        for thread in self._helpers:
            thread.join(HELPER_JOIN_TIMEOUT)
            if thread.is_alive():
                logger.warning("Worker %s: %s did not stop in time", self.id, thread.name)
        if not any(thread.is_alive() for thread in self._helpers):
            self._helpers_stop.close()

    def _listen_loop(self) -> None:
        # Until the helpers stop, not at the first signal: a cancel must reach the
        # handlers that finish during a graceful shutdown.
        listen(database_alias(), self._helpers_stop, self.wake, self._cancel_requested)

    def _cancel_requested(self, job_ids: list[int]) -> None:
        with self._held_lock:
            contexts = [held.context for i in job_ids if (held := self._held.get(i)) is not None]
            self._notices.add(i for i in job_ids if i not in self._held)
        for context in contexts:
            context.request_cancel()

    def _register(self) -> None:
        def register() -> None:
            self._measure_clock()
            startup.register_worker(
                self.id, self.queues, self.concurrency, self.clock.now(), self.clock.offset
            )

        self._with_database_retry(register)

    def _unregister(self) -> None:
        WorkerRow.objects.using(database_alias()).filter(id=self.id).delete()
