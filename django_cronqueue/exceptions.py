"""Errors that django-cronqueue raises at a caller."""

from __future__ import annotations

import datetime as dt
import functools
import math
from typing import Any


class CronQueueError(Exception):
    """Base class of django-cronqueue's errors."""


class UnknownJob(CronQueueError, LookupError):
    """No code of this process defines a job of that name."""


class InvalidPayload(CronQueueError, ValueError, TypeError):
    """The payload is not a JSON object of keyword arguments the handler accepts.

    A ValueError, and a TypeError too: Django's Tasks framework raises TypeError for an
    argument that is not JSON, and ``except TypeError`` written for it must catch this.
    """


class LeaseLost(CronQueueError):
    """A run's lease expired before it completed (its worker died or it timed out).

    Passed to ``on_failed`` when the last attempt of a job ends this way.
    """


class JobCancelled(CronQueueError):
    """Raised by ``JobContext.check_cancelled()`` once a cancel of the running job was
    requested. Let it propagate: the row then ends ``cancelled`` (no retry, no
    ``on_failed``)."""


class DecryptionError(CronQueueError):
    """A sensitive value of a job's payload that no key of
    ``CRONQUEUE["ENCRYPTION_KEYS"]`` decrypts (or that was erased): the job fails at once,
    without a retry. Its text names the job and the key, never a value."""


# The longest snooze: ``now + delay`` must be a datetime (they end with year 9999).
MAX_SNOOZE = dt.timedelta(days=36_500)


def _too_long(delay: str) -> ValueError:
    return ValueError(
        f"Snooze delay must be at most {MAX_SNOOZE.days} days (MAX_SNOOZE, about 100 years), "
        f"got {delay}."
    )


class Discard(Exception):
    """Raised by a handler to give up: the job ends ``failed`` at once, without a retry,
    with ``Discard: <reason>`` in ``last_error``, and ``on_failed`` is called.

    ``raise jobs.Discard("account closed")``; Celery's ``Reject``/``Ignore`` and
    Active Job's ``discard_on`` in one.
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)


class Snooze(Exception):
    """Raised by a handler to run again later without using up an attempt: the row goes
    back to ``pending``, due at ``now + delay``, and ``Job.snoozes`` counts it.

    ``jobs.Snooze(seconds=30)`` or ``jobs.Snooze(delta=timedelta(minutes=5))``; a delay
    over ``MAX_SNOOZE`` (36,500 days) is refused with a ``ValueError`` when it is made.
    """

    def __init__(self, seconds: float | None = None, *, delta: dt.timedelta | None = None) -> None:
        if (seconds is None) == (delta is None):
            raise TypeError("Snooze needs exactly one of seconds= and delta=.")
        if delta is not None:
            if not isinstance(delta, dt.timedelta):
                raise TypeError(f"Snooze(delta=...) must be a timedelta, got {delta!r}.")
            delay = delta
        else:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"Snooze(seconds=...) must be a number, got {seconds!r}.")
            if not math.isfinite(seconds):
                raise ValueError(f"Snooze(seconds=...) must be finite, got {seconds!r}.")
            if abs(seconds) > MAX_SNOOZE.total_seconds():
                raise _too_long(f"{seconds!r} seconds")
            delay = dt.timedelta(seconds=seconds)
        if delay < dt.timedelta(0):
            raise ValueError(f"Snooze delay must not be negative, got {delay}.")
        if delay > MAX_SNOOZE:
            raise _too_long(str(delay))
        self.delay = delay
        super().__init__(f"snoozed for {delay.total_seconds():g}s")

    def __reduce__(self) -> tuple[Any, ...]:
        # A snooze raised in a process-pool child crosses to its parent.
        return (functools.partial(Snooze, delta=self.delay), ())


class TimeLimitExceeded(CronQueueError):
    """A run went past its job's ``timeout``: in the process pool its child process
    was killed; in the thread pool the handler returned late. The attempt fails with
    this error (in ``last_error``) and the job is retried or failed by its policy."""


class SoftTimeLimitExceeded(CronQueueError):
    """Raised inside a handler when its job's ``soft_timeout`` passes (process pool;
    ``async def`` handlers in the thread and asyncio pools), so that it can clean up
    before the hard ``timeout``. Unless caught, the attempt fails with it."""


class ChildDied(CronQueueError):
    """The process-pool child running the job died (a signal, ``os._exit``, the OOM
    killer); the message names the signal or the exit status."""


class NotMigrated(CronQueueError):
    """The database lacks the package's tables: ``manage.py migrate`` was not run."""
