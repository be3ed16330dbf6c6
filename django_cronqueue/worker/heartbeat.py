"""The worker's heartbeat: every third of a lease it renews the leases of the jobs the
worker holds, passes on cancel requests and progress, measures the clock against the
database's, and acts on handlers past their timeout (``Heartbeat`` is mixed into
``Worker``)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import TYPE_CHECKING

from django.db import close_old_connections, connections

from .. import signals
from ..claiming import ClaimedJob
from ..conf import database_alias
from ..db import clock
from ..db.clock import CorrectedClock
from ..db.notify import SelectableEvent
from ..definitions.registry import registry
from ..models import Worker as WorkerRow
from .database import DatabaseRetry
from .held_jobs import HeldJob, pass_on_cancel_requests, write_progress
from .leases import renew_held_leases

logger = logging.getLogger("django_cronqueue")

EXIT_STUCK = 3  # run()'s exit status when handlers stayed past timeout + TIMEOUT_GRACE


class Heartbeat(DatabaseRetry):
    """Mixed into ``Worker``, which provides what is declared here."""

    id: str
    lease: dt.timedelta
    timeout_grace: float
    exit_code: int
    clock: CorrectedClock
    _held: dict[int, HeldJob]
    _held_lock: threading.Lock
    _overran_slots: set[str]
    _helpers_stop: SelectableEvent

    if TYPE_CHECKING:

        def stop(self) -> None: ...
        def _give_back(self, jobs: list[ClaimedJob]) -> None: ...

    def _measure_clock(self) -> None:
        self.clock.update(clock.measure(database_alias()))

    def _heartbeat_loop(self) -> None:
        self._use_persistent_connections()
        interval = max(self.lease.total_seconds() / 3, 0.05)
        while not self._helpers_stop.wait(interval):
            self._with_database_retry(self._beat, attempts=1)
        connections.close_all()

    def _beat(self) -> None:
        now_monotonic = time.monotonic()
        with self._held_lock:
            # Every held job, even past its timeout: no run starts while one executes.
            renewable = [held.job for held in self._held.values()]
            stuck = [
                held
                for held in self._held.values()
                if held.deadline is not None and held.deadline + self.timeout_grace <= now_monotonic
            ]
            overdue = [
                held
                for held in self._held.values()
                if held.deadline is not None
                and held.deadline <= now_monotonic
                and not held.abandoned
            ]
            held_now = list(self._held.values())
        for held in overdue:
            self._abandon(held)
        if stuck and not self.exit_code:
            self._exit_stuck(stuck)
        self._measure_clock()
        now = self.clock.now()
        renew_held_leases(renewable, until=now + self.lease)
        pass_on_cancel_requests(held_now)
        write_progress(held_now)
        WorkerRow.objects.using(database_alias()).filter(id=self.id).update(
            last_seen=now, clock_offset=self.clock.offset
        )
        close_old_connections()

    def _abandon(self, held: HeldJob) -> None:
        """A handler ran past its timeout. Its lease stays renewed (a retry must not
        start while it executes); it is asked to stop (``cancel_requested``, and
        cancellation of an ``async def`` handler), its run will fail with
        ``TimeLimitExceeded`` when it returns, and the jobs its slot claimed with it are
        given back. Python cannot kill a thread: past ``TIMEOUT_GRACE`` the worker exits
        (``_exit_stuck``) and its supervisor starts a fresh one."""
        with self._held_lock:
            if self._held.get(held.job.id) is not held or held.deadline is None:
                return  # it returned meanwhile
            held.abandoned = True
            batch = self._set_aside(held)
        job = held.job
        held.context.request_cancel()
        logger.error(
            "Job %s #%s ran past its timeout; it is asked to stop, keeps its lease until it "
            "returns (its run then fails) and %s",
            job.name,
            job.id,
            self._overrun_note(held),
            extra={"job_id": job.id, "job_name": job.name, "outcome": "timed_out"},
        )
        self._give_back(batch)
        definition = registry.get(job.name)
        timeout = definition.effective_timeout if definition else 0.0
        signals.send(signals.job_timed_out, job.name, job=job, timeout=timeout)

    def _set_aside(self, held: HeldJob) -> list[ClaimedJob]:
        """Under the held lock, ``held`` having overrun: its slot takes no new work until
        it returns. Returns the jobs its slot claimed with it, to give back."""
        self._overran_slots.add(held.slot)
        return [other.job for other in self._held.values() if other.slot == held.slot]

    def _overrun_note(self, held: HeldJob) -> str:
        """What the overrun of ``held`` means for its slot, for the log."""
        return f"{held.slot} takes no new work meanwhile"

    def _exit_stuck(self, stuck: list[HeldJob]) -> None:
        """Handlers stayed past their timeout and the grace: exit (status ``EXIT_STUCK``)
        so that the supervisor restarts the worker; the jobs come back once the process
        is gone and their leases expire, never while they still execute."""
        self.exit_code = EXIT_STUCK
        logger.error(
            "Worker %s: %s handler(s) still running %ss past their timeout "
            "(CRONQUEUE['TIMEOUT_GRACE']): %s; exiting with status %s for the supervisor "
            "to restart this worker",
            self.id,
            len(stuck),
            self.timeout_grace,
            ", ".join(f"{held.job.name} #{held.job.id}" for held in stuck),
            EXIT_STUCK,
        )
        self.stop()
