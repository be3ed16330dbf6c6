"""A worker's claim floor, for the time a transaction is held open on the database.

Each claim and each completion leaves an entry of the claim index pointing at a row
version that is no longer pending. Vacuum removes such entries, and an index scan marks
them dead as it passes them, but only once no open transaction could still see the old
version. While one is held open (idle in transaction, a long report, a stuck migration;
``observe.storage``), they stay, at the head of the index in claim order, and every
claim walks past all of them: the drain falls tenfold within minutes.

While ``held``, a claim of the uncapped names starts right after the floor, the last row
this process claimed in claim order (priority DESC, run_at, id), at that row's priority:
one index descent skips what it claimed before. A full claim, from the head of the order,
still runs every ``full_every`` seconds (the worker's poll interval), or less often when
it is slow (it walks what the floor skips): at most a twentieth of the time. It picks up
what the floor leaves behind (rows of another priority, back-dated or released ones, rows
retried, rows skipped while another claim held them and gave them back) and starts the
floor again where it stopped. Outside a hold every claim is a full one, and this costs one
attribute read per claim.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from .base import ClaimedJob, ClaimFloor
from .request import is_capped

FULL_CLAIM_SHARE = 20  # a full claim at most once per 20 times its own duration


class ClaimFloors:
    """The floor of one worker process, shared by its slots."""

    def __init__(self, full_every: float) -> None:
        self.full_every = full_every
        self.held = False  # set by the worker's housekeeping (storage_watch.HoldWatch)
        self._lock = threading.Lock()
        self._floor: ClaimFloor | None = None
        self._full_due = 0.0

    def set_held(self, held: bool) -> None:
        with self._lock:
            self.held = held
            if not held:
                self._floor = None

    def take(self) -> ClaimFloor | None:
        """The floor of the next claim; None for a full claim."""
        if not self.held:
            return None
        with self._lock:
            now = time.monotonic()
            if self._floor is None or now >= self._full_due:
                self._full_due = now + self.full_every
                return None
            return self._floor

    def advance(
        self, floor: ClaimFloor | None, jobs: Sequence[ClaimedJob], seconds: float = 0.0
    ) -> None:
        """After a claim made with ``floor`` (None: a full one) that returned ``jobs`` in
        ``seconds``."""
        if not self.held:
            return
        uncapped = [job for job in jobs if not is_capped(job.name)]
        last = max(uncapped, key=ClaimedJob.order_key) if uncapped else None
        with self._lock:
            if floor is None:
                later = time.monotonic() + FULL_CLAIM_SHARE * seconds
                self._full_due = max(self._full_due, later)
            if last is None:
                return
            reached = ClaimFloor(last.priority, last.run_at, last.id)
            if floor is None or self._floor is None or _before(self._floor, reached):
                # A full claim stopped here: every due row before it was claimed (or
                # held by another claim), whatever the floor was.
                self._floor = reached


def _before(a: ClaimFloor, b: ClaimFloor) -> bool:
    return (-a.priority, a.run_at, a.id) < (-b.priority, b.run_at, b.id)
