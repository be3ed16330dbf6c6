"""Running claimed jobs: call the handler, then record the outcome on the row.

``run_claimed`` does both for one job (``jobs.tick()`` uses it). The worker uses
``call`` and a ``Recorder``, which writes quick successes in batches: one UPDATE for
many rows instead of one per job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from . import lifecycle, signals
from .claiming import ClaimedJob, complete_successes
from .conf import database_alias, get_settings
from .lifecycle import Outcome
from .registry import JobDefinition, registry

logger = logging.getLogger("django_cronqueue")

Clock = Callable[[], dt.datetime]


@dataclass
class Call:
    """What one handler call did."""

    job: ClaimedJob
    definition: JobDefinition | None
    duration: float = 0.0
    result: Any = None
    error: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        return self.definition is not None and self.error is None


def call(job: ClaimedJob, clock: Clock) -> Call:
    """Call the handler of ``job``. Never raises: whatever the handler raises,
    including SystemExit and KeyboardInterrupt, is kept in ``Call.error``."""
    definition = registry.get(job.name)
    if definition is None:
        return Call(job, None)
    signals.send(signals.job_started, job.name, job=job)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "Job %s #%s started (attempt %s)",
            job.name,
            job.id,
            job.attempts,
            extra=_extra(job, "started"),
        )
    started = time.monotonic()
    try:
        result = call_handler(definition, job, clock)
    except BaseException as exc:
        return Call(job, definition, time.monotonic() - started, error=exc)
    return Call(job, definition, time.monotonic() - started, result=result)


def record(outcome: Call, now: dt.datetime) -> Outcome:
    """Write one call's outcome to its row (token-guarded). Returns the outcome."""
    job = outcome.job
    if outcome.definition is None:  # unregistered since the claim: give the row back
        lifecycle.release_unstarted([job])
        return Outcome.RELEASED
    if outcome.error is not None:
        result = lifecycle.complete_failure(
            job, outcome.error, now=now, definition=outcome.definition
        )
        log = logger.error if result == Outcome.FAILED else logger.warning
        log(
            "Job %s #%s raised %s on attempt %s of %s (%s)",
            job.name,
            job.id,
            type(outcome.error).__name__,
            job.attempts,
            job.max_attempts,
            result,
            extra=_extra(job, result, outcome.duration),
        )
        return result
    if not lifecycle.complete_success(job, now=now, result=storable_result(outcome.result)):
        return Outcome.DISCARDED
    announce_success(outcome)
    return Outcome.SUCCEEDED


def run_claimed(job: ClaimedJob, clock: Clock) -> tuple[bool, Outcome]:
    """Call the handler and record the outcome. Returns (handler succeeded, outcome)."""
    outcome = call(job, clock)
    return outcome.succeeded, record(outcome, clock())


def announce_success(outcome: Call) -> None:
    job = outcome.job
    signals.send(
        signals.job_succeeded, job.name, job=job, result=outcome.result, duration=outcome.duration
    )
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "Job %s #%s succeeded in %.3fs",
            job.name,
            job.id,
            outcome.duration,
            extra=_extra(job, Outcome.SUCCEEDED, outcome.duration),
        )


class Recorder:
    """Records outcomes for a worker slot, batching quick successes.

    A success whose handler returned None and took under ``QUICK`` seconds waits in a
    batch; the batch is written when a slow or failed job comes, when it is ``MAX_WAIT``
    old, or on ``flush()``. Everything else is written at once.
    """

    QUICK = 0.005
    MAX_WAIT = 0.02

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pending: list[Call] = []
        self.oldest = 0.0

    def add(self, outcome: Call) -> None:
        quick = outcome.succeeded and outcome.result is None and outcome.duration < self.QUICK
        if not quick:
            self.flush()
            record(outcome, self.clock())
            return
        if not self.pending:
            self.oldest = time.monotonic()
        self.pending.append(outcome)
        if time.monotonic() - self.oldest >= self.MAX_WAIT:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        try:
            written = complete_successes(
                [outcome.job for outcome in batch], finished_at=self.clock(), using=database_alias()
            )
        except BaseException:
            self.pending = batch + self.pending  # kept for the next try (token-guarded)
            raise
        self.announce(batch, written)

    def take(self) -> list[Call]:
        """Hand the waiting successes to the caller, who writes them (with its next
        claim) and then calls ``announce``, or ``put_back`` if writing failed."""
        batch, self.pending = self.pending, []
        return batch

    def put_back(self, batch: list[Call]) -> None:
        if batch:
            self.pending = batch + self.pending
            self.oldest = time.monotonic()

    def announce(self, batch: list[Call], written: set[int]) -> None:
        for outcome in batch:
            if outcome.job.id in written:
                announce_success(outcome)


def call_handler(definition: JobDefinition, job: ClaimedJob, clock: Clock) -> Any:
    if definition.cron is not None:
        run = definition.cron.run_for(
            job_id=job.id, scheduled_for=job.scheduled_for, created_at=job.created_at
        )
        args: tuple[Any, ...] = (run,)
        kwargs: dict[str, Any] = {}
    else:
        args, kwargs = (), job.payload
    if definition.is_async:
        return async_to_sync(definition.func)(*args, **kwargs)
    return definition.func(*args, **kwargs)


def storable_result(value: Any) -> Any:
    """The handler's return value if the database can store it as JSON, else None (it
    is not an error to return anything). Not storable: non-JSON values, NaN, values
    nested too deep to encode, strings with NUL (PostgreSQL's jsonb refuses it) or lone
    surrogates (not UTF-8), and JSON over ``MAX_PAYLOAD_BYTES``."""
    if value is None:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        size = len(text.encode("utf-8"))  # raises on a lone surrogate
    except Exception:  # TypeError, ValueError, RecursionError, a broken __iter__ ...
        return None
    if size > get_settings().MAX_PAYLOAD_BYTES or _JSON_NUL.search(text):
        return None
    return value


# "\u0000" in JSON text, unless its backslash is itself escaped ("\\u0000" is text).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _extra(job: ClaimedJob, outcome: str, duration: float | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "job_id": job.id,
        "job_name": job.name,
        "attempt": job.attempts,
        "outcome": outcome,
    }
    if duration is not None:
        extra["duration"] = duration
    return extra
