"""One tick: materialize due cron occurrences, return expired leases, count the rows
finished since the last count (every minute), prune (hourly), then claim due jobs and
run them.

``tick()`` runs one in this process with handlers inline (``jobs.tick()``); the worker
(``django_cronqueue.worker``) does the housekeeping part on its own thread and the
claiming part in its slots. ``Housekeeping`` keeps what one process remembers between
ticks: which schedules it synced, and when it last counted and pruned.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence

from django.utils import timezone

from .. import history, lifecycle
from ..claiming import ClaimedJob, claim_due
from ..claiming.fair import known_fair_queues
from ..conf import database_alias
from ..definitions.registry import registry
from ..history import archive, counting
from ..housekeeping.maintenance import PruneClock, prune, recover_expired_leases
from ..operations.pauses import delete_ended_pauses
from ..running.execution import run_claimed
from ..schedules.scheduler import Scheduler
from .results import TickResult

logger = logging.getLogger("django_cronqueue")

TICK_CLAIM_BATCH = 100
HELD_RECOVERY_EVERY = dt.timedelta(seconds=10)
# After a transaction held open, how long the moves to history take nothing from a drain
# that is behind: the backlog the hold left is worked off first.
YIELD_AFTER_HOLD = dt.timedelta(minutes=2)


class ClaimTally:
    """A worker's claims since the last move of finished rows to history, recorded by
    its slots: how many jobs they took, and whether every one of them found as many as
    it asked for (the queue never ran dry: the worker is behind). The same for the
    claims since the move last asked (``fell_behind``), between its batches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed = 0
        self._claims = 0
        self._short = False
        self._recent_claims = 0
        self._recent_short = False
        self._stopped = False  # a batch of this pass waited for the drain
        self._extra_batches = 1
        self._yield_until: dt.datetime | None = None

    def record(self, asked: int, found: int) -> None:
        with self._lock:
            self._claimed += found
            self._claims += 1
            self._short = self._short or found < asked
            self._recent_claims += 1
            self._recent_short = self._recent_short or found < asked

    def restart(self, now: dt.datetime) -> None:
        """A transaction is held (no row moves): a fresh tally, one batch beyond the
        claimed jobs at the next pass, and every batch yields to the drain until
        ``YIELD_AFTER_HOLD`` after ``now`` (millions of rows wait to move, on a table the
        hold left larger, and the queue's backlog of the hold comes first)."""
        with self._lock:
            self._take()
            self._extra_batches = 1
            self._yield_until = now + YIELD_AFTER_HOLD

    def archive_budget(self, now: dt.datetime) -> archive.Budget:
        """The rows the next pass may move, and a fresh tally: the jobs claimed since the
        last pass (so that the job table does not grow) and some batches more, for the
        rows a transaction held for minutes kept back (millions). One while the worker is
        behind, so that the moves take little from the drain; once it has room, one more
        each pass, up to a whole pass. The queue comes first: the moves grow by a batch
        while the drain has room to spare, and fall back to one as soon as a backlog
        forms (doubling each pass, they outran the drain's spare capacity after a
        release, and a backlog of thousands of jobs formed before they fell back), or as
        soon as a batch of the pass stopped for it (``fell_behind``). For a while after a
        held transaction (``restart``) the claimed jobs are not owed either: a pass behind
        moves nothing, and one with room stops at the first batch that finds a backlog."""
        with self._lock:
            behind, claimed = self._take()
            extra = 1 if behind else min(self._extra_batches + 1, archive.ARCHIVE_BATCHES)
            self._extra_batches = extra
            yielding = self._yield_until is not None and now < self._yield_until
        if yielding:
            rows = 0 if behind else claimed + extra * archive.ARCHIVE_BATCH
            return archive.Budget(rows=rows, owed=0, behind=self.fell_behind)
        return archive.Budget(
            rows=claimed + extra * archive.ARCHIVE_BATCH, owed=claimed, behind=self.fell_behind
        )

    def fell_behind(self) -> bool:
        """Whether every claim since the last call (or the budget) came back full: a
        backlog is forming. Asked by a pass before each batch beyond the rows it owes,
        which stops then (the next pass moves one batch beyond them): a pass of growing
        batches found out it was too much only at the next pass, ten seconds later,
        with a backlog of thousands of jobs."""
        with self._lock:
            behind = self._recent_claims > 0 and not self._recent_short
            self._recent_claims = 0
            self._recent_short = False
            self._stopped = self._stopped or behind
            return behind

    def _take(self) -> tuple[bool, int]:
        """Whether the worker was behind (or a batch of the last pass stopped for the
        drain), and the jobs it claimed; a fresh tally."""
        behind = (self._claims > 0 and not self._short) or self._stopped
        claimed = self._claimed
        self._claimed = self._claims = self._recent_claims = 0
        self._short = self._recent_short = self._stopped = False
        return behind, claimed


class Housekeeping:
    """The housekeeping part of a tick, with its memory between ticks. A worker's slots
    record their claims in ``tally``; ``actor`` names the process in the logs of the
    schedules it switches on or off (``"worker <id>"``; by default the host and pid)."""

    def __init__(self, actor: str | None = None) -> None:
        self.tally = ClaimTally()
        self.scheduler = Scheduler(actor)
        self.prune_clock = PruneClock()
        self.count_clock = PruneClock(counting.COUNT_EVERY)
        self.archive_clock = PruneClock(archive.ARCHIVE_EVERY)
        self.held_recovery_clock = PruneClock(HELD_RECOVERY_EVERY)
        self.fair_queues: tuple[str, ...] = ()  # those with key rows, read each pass

    def run(self, now: dt.datetime, *, materialize: bool = True, held: bool = False) -> None:
        """A whole pass: ``make_due`` then ``chores``."""
        self.make_due(now, materialize=materialize, held=held)
        self.chores(now, held=held)

    def make_due(self, now: dt.datetime, *, materialize: bool = True, held: bool = False) -> None:
        """What a claim needs done first: due cron occurrences written (unless
        ``materialize`` is False), jobs whose lease expired returned, and the queues whose
        keys take turns read (``fair_queues``: ``claiming.fair``).

        ``held``: a transaction is held open on the database (``storage_watch.HoldWatch``).
        Then the scan for expired leases, which walks an entry for every version of a row
        that ran since it began, runs every ``HELD_RECOVERY_EVERY`` only."""
        if materialize:
            self.scheduler.materialize(now)
        if not held or self.held_recovery_clock.due(now):
            recover_expired_leases(now)
        self.fair_queues = known_fair_queues(database_alias(), registry.fair_queues())

    def started_at(self, now: dt.datetime) -> None:
        """A worker started at ``now`` (forever mode) and left its first pass's chores to
        its main loop, a poll later, when its first jobs are under way. The counts and the
        moves to history first come one interval after ``now``, as after a pass at
        ``now``: a poll later they took from that first drain (a pass counted and moved
        the rows its first second had finished); the prune still comes with that pass."""
        self.count_clock.arm(now)
        self.archive_clock.arm(now)

    def chores(self, now: dt.datetime, *, held: bool = False) -> None:
        """What no claim waits for: the counts of finished rows (every minute), moving
        finished rows to history (PostgreSQL and MariaDB, every ten seconds; while the
        worker is behind, little more than it finished, and stopping as a backlog forms:
        ``ClaimTally``), pruning (hourly). While a transaction is ``held`` open no finished
        row moves to history: the move would leave two more row versions per job that no
        vacuum may remove until it ends, and walk the dead ones of the rows moved before."""
        if self.count_clock.due(now):
            self._unless_busy(self.count_clock, counting.count_finished, now)
        if self.archive_clock.due(now):
            if held:  # the pass after it counts its own claims, from one batch more
                self.tally.restart(now)
            else:
                archive.archive(now, budget=self.tally.archive_budget(now))
        if self.prune_clock.due(now):
            delete_ended_pauses(now)
            deleted = self._unless_busy(self.prune_clock, prune, now)
            if deleted:
                logger.info("Pruned %s finished jobs", deleted)

    @staticmethod
    def _unless_busy(
        clock: PruneClock, chore: Callable[[dt.datetime], int], now: dt.datetime
    ) -> int:
        """``chore(now)``; when another process holds what it needs (``history.Busy``: the
        counts, while it counts, prunes or retries, or a history table it is making; or
        it is frozen with them in hand) the chore is left to the next pass, whose cron
        and expired leases come first."""
        try:
            return chore(now)
        except history.Busy:
            clock.again()
            return 0


def tick(
    now: dt.datetime | None = None,
    queues: Sequence[str] | None = None,
    *,
    housekeeping: Housekeeping | None = None,
) -> TickResult:
    """Run one tick in this process, running handlers inline.

    ``now`` (aware) drives every time decision of the tick: what is due, which leases
    expired, which cron occurrences are due, what is old enough to prune. Pass the
    ``housekeeping`` of earlier ticks to keep their memory (``jobs.tick()`` passes the
    app's); a fresh one syncs every schedule row and prunes.
    """
    if now is None:
        now = timezone.now()
    elif timezone.is_naive(now):
        raise ValueError("tick(now=...) needs an aware datetime.")
    # ``now`` may be long past, and stays fixed while handlers run: rows it stamps
    # finished before the counts' mark are counted by the writes themselves.
    with counting.untrusted_clock():
        return _tick(now, queues, housekeeping)


def _tick(
    now: dt.datetime, queues: Sequence[str] | None, housekeeping: Housekeeping | None
) -> TickResult:
    housekeeping = housekeeping or Housekeeping()
    housekeeping.run(now)
    worker_id = f"tick:{socket.gethostname()}:{os.getpid()}"
    claimed: list[ClaimedJob] = []
    while True:
        batch = claim_due(
            now,
            queues=queues,
            limit=TICK_CLAIM_BATCH,
            worker_id=worker_id,
            fair_queues=housekeeping.fair_queues,
        )
        claimed.extend(batch)
        if len(batch) < TICK_CLAIM_BATCH:
            break
    ran = failed = 0
    for index, job in enumerate(claimed):
        try:
            succeeded, _ = run_claimed(job, lambda: now)
        except BaseException:
            # Its outcome could not be written (the database failed): the error is the
            # caller's, but the jobs not started yet go back now, not when leases expire.
            _give_back(claimed[index + 1 :], after=job)
            raise
        ran += succeeded
        failed += not succeeded
    return TickResult(claimed=len(claimed), ran=ran, failed=failed)


def _give_back(jobs: list[ClaimedJob], *, after: ClaimedJob) -> None:
    if not jobs:
        return
    try:
        released = lifecycle.release_unstarted(jobs)
    except Exception as exc:
        logger.error(
            "Job %s #%s: could not record the outcome, nor give back the %s job(s) claimed "
            "with it (%s: %s); their leases will expire",
            after.name,
            after.id,
            len(jobs),
            type(exc).__name__,
            exc,
        )
        return
    logger.warning(
        "Job %s #%s: could not record the outcome; gave back the %s job(s) claimed with it",
        after.name,
        after.id,
        released,
    )
