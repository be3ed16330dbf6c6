"""Running one claimed job: call its handler, then record the outcome."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync

from . import lifecycle, signals
from .claiming import ClaimedJob
from .registry import JobDefinition, registry

logger = logging.getLogger("django_cronqueue")

Clock = Callable[[], dt.datetime]


class Outcome:
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    FAILED = "failed"
    DISCARDED = "discarded"


def run_claimed(job: ClaimedJob, clock: Clock) -> tuple[bool, str]:
    """Call the handler of ``job`` and complete the row.

    Returns ``(handler_succeeded, outcome)``. Never raises: whatever the handler
    raises, including SystemExit and KeyboardInterrupt, is recorded on the row.
    """
    definition = registry.get(job.name)
    if definition is None:  # unregistered since the claim (tests); give the row back
        lifecycle.release_unstarted([job])
        return False, Outcome.DISCARDED
    log_extra = {"job_id": job.id, "job_name": job.name, "attempt": job.attempts}
    if signals.job_started.receivers:
        signals.job_started.send(sender=job.name, job=job)
    logger.debug("Job %s #%s started (attempt %s)", job.name, job.id, job.attempts, extra=log_extra)
    started = time.monotonic()
    try:
        result = call_handler(definition, job, clock)
    except BaseException as exc:
        duration = time.monotonic() - started
        outcome = lifecycle.complete_failure(job, exc, now=clock(), definition=definition)
        log = logger.error if outcome == Outcome.FAILED else logger.warning
        log(
            "Job %s #%s raised %s on attempt %s of %s (%s)",
            job.name,
            job.id,
            type(exc).__name__,
            job.attempts,
            job.max_attempts,
            outcome,
            extra={**log_extra, "duration": duration, "outcome": outcome},
        )
        return False, outcome
    duration = time.monotonic() - started
    stored = storable_result(result)
    if lifecycle.complete_success(job, now=clock(), result=stored):
        if signals.job_succeeded.receivers:
            signals.job_succeeded.send(sender=job.name, job=job, result=result, duration=duration)
        logger.info(
            "Job %s #%s succeeded in %.3fs",
            job.name,
            job.id,
            duration,
            extra={**log_extra, "duration": duration, "outcome": Outcome.SUCCEEDED},
        )
        return True, Outcome.SUCCEEDED
    return True, Outcome.DISCARDED


def call_handler(definition: JobDefinition, job: ClaimedJob, clock: Clock) -> Any:
    if definition.cron is not None:
        args: tuple[Any, ...] = (definition.cron.run_for(job, clock()),)
        kwargs: dict[str, Any] = {}
    else:
        args, kwargs = (), job.payload
    if definition.is_async:
        return async_to_sync(definition.func)(*args, **kwargs)
    return definition.func(*args, **kwargs)


def storable_result(value: Any) -> Any:
    """The handler's return value if it is JSON, else None (it is not an error to return)."""
    if value is None:
        return None
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value
