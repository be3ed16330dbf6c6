"""A slot's claims, and the next one sent ahead while the slot runs the jobs of the last.

A claim is one statement on PostgreSQL (the slot's quick successes written, more jobs
claimed) and, on a quiet database, most of a quick job's time is spent waiting for it.
While a slot's jobs are quick (its batches grow), ``ClaimAhead`` sends the next claim
on a connection of its own, in a thread of its own, as soon as the slot starts a batch:
the database works on it while the slot runs the batch. The jobs it claims are held (the
heartbeat renews their leases) from the moment the statement returns, as the jobs a
slot claims together always were, and are started only while their lease holds
(``Worker._begin_run``). PostgreSQL only: on SQLite the second writer would wait for the
handlers' own writes, and MySQL/MariaDB claims stay one at a time per slot.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, InterfaceError, connections

from ..claiming import ClaimedJob, ClaimRequest
from ..execution import Call, Recorder

logger = logging.getLogger("django_cronqueue")


@dataclass
class Claim:
    """A claim prepared by a slot: its request and the successes its statement writes."""

    request: ClaimRequest
    include_capped: bool
    succeeded: list[Call]
    now: dt.datetime
    slot: str  # the slot thread that runs what it claims
    fresh_until: float  # monotonic: the claimed jobs' leases hold half a lease until then


Sent = tuple[list[ClaimedJob], set[int]]


class ClaimAhead:
    """At most one claim in flight for a slot, on the claim-ahead thread's connection."""

    def __init__(
        self,
        slot: str,
        send: Callable[[Claim], Sent],
        initializer: Callable[[], Any],
    ) -> None:
        self._send = send
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix=f"{slot}-ahead", initializer=initializer
        )
        self._in_flight: tuple[Claim, Future[Sent]] | None = None
        self._used = False  # its thread (and connection) exist once a claim was sent

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    def send(self, claim: Claim) -> None:
        self._used = True
        self._in_flight = (claim, self._executor.submit(self._send, claim))

    def take(self, recorder: Recorder) -> tuple[Claim, Sent]:
        """The claim in flight and what it returned (waits for it). If it failed, its
        successes go back to ``recorder`` (written by a later statement) and the error
        is raised."""
        assert self._in_flight is not None
        claim, future = self._in_flight
        self._in_flight = None
        try:
            return claim, future.result()
        except BaseException:
            recorder.put_back(claim.succeeded)
            raise

    def close(self, recorder: Recorder) -> tuple[Claim, Sent] | None:
        """Wait for the claim in flight, if any, and end the thread (its connection
        closed). Returns the claim and what it returned, for the caller to finish and
        give back; None when there was none or it failed (its successes put back)."""
        taken = None
        if self._in_flight is not None:
            try:
                taken = self.take(recorder)
            except (DatabaseError, InterfaceError) as exc:
                logger.warning("A claim sent ahead failed while its slot stopped: %s", exc)
        if self._used:
            self._executor.submit(connections.close_all).result()
        self._executor.shutdown(wait=True)
        return taken
