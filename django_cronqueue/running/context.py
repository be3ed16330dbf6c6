"""The running job's context: ``jobs.current()``.

A context variable, not a thread-local: an ``async def`` handler, which runs on an
event loop in another thread, sees the context of its own job. The worker creates one
``JobContext`` per claimed job and tells it when a cancel was requested (its heartbeat,
or a PostgreSQL notification); ``jobs.tick()`` and eager mode give it a way to ask the
database instead. Progress is kept in memory: the worker's heartbeat writes the latest
value at most once per beat, and the completion writes the last one.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.utils import timezone

from ..exceptions import JobCancelled
from ..values.error_text import escape_surrogates

__all__ = ["JobContext", "activate", "current"]

logger = logging.getLogger("django_cronqueue")

# How often check_cancelled() may ask the database, where no worker watches for it.
POLL_INTERVAL = 1.0
MAX_PROGRESS_MESSAGE_CHARS = 500


class JobContext:
    """What a handler knows about its own run. ``jobs.current()`` returns it."""

    def __init__(
        self,
        *,
        job_id: int,
        name: str,
        attempt: int,
        scheduled_for: dt.datetime | None,
        payload: dict[str, Any],
        ask_database: Callable[[], bool] | None = None,
        find_batch: Callable[[], Any] | None = None,
        find_upstream_results: Callable[[], dict[int, Any]] | None = None,
    ) -> None:
        self.job_id = job_id
        self._find_batch = find_batch
        self._find_upstream_results = find_upstream_results
        self.name = name
        self.attempt = attempt
        self.scheduled_for = scheduled_for
        self.payload = payload
        self._cancelled = False  # set once, under _lock (an Event per job cost more)
        self._ask_database = ask_database
        self._asked_at = -math.inf
        self._lock = threading.Lock()
        self._on_cancel: list[Callable[[], None]] = []
        self._progress: dict[str, Any] | None = None
        self._progress_unwritten = False

    @property
    def batch(self) -> Any:
        """The group (``jobs.Batch``) this job is a member or a callback of, read from
        the database now (its counts, ``member_ids``, ``results()``); None outside a
        group."""
        return self._find_batch() if self._find_batch is not None else None

    def upstream_results(self) -> dict[int, Any]:
        """The return values of the jobs this one waited for (``jobs.chain``,
        ``using(after=...)``), by job id, read from the database now; {} for a job that
        waited for none."""
        if self._find_upstream_results is None:
            return {}
        return self._find_upstream_results()

    def __repr__(self) -> str:
        return f"<JobContext {self.name} #{self.job_id} attempt {self.attempt}>"

    # cancellation ---------------------------------------------------------------------

    @property
    def cancel_requested(self) -> bool:
        """True once a cancel of this job was requested (``jobs.cancel()``)."""
        if not self._cancelled and self._ask_database is not None:
            now = time.monotonic()
            if now - self._asked_at >= POLL_INTERVAL:
                self._asked_at = now
                self.ask_database()
        return self._cancelled

    def ask_database(self) -> bool:
        """Where no worker watches for cancel requests, read the row now (the check
        before the handler starts: it does not count against the handler's own)."""
        if not self._cancelled and self._ask_database is not None and self._ask_database():
            self.request_cancel()
        return self._cancelled

    def check_cancelled(self) -> None:
        """Raise ``jobs.JobCancelled`` if a cancel of this job was requested."""
        if self.cancel_requested:
            raise JobCancelled(f"Job {self.name} #{self.job_id}: cancel requested")

    def request_cancel(self) -> None:
        """Mark the cancel as requested (the worker calls this) and run the callbacks
        registered by ``on_cancel`` (an async handler's task is cancelled)."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks = list(self._on_cancel)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the worker's heartbeat or listener calls this: never let it die
                logger.exception("A cancel callback of %r raised", self)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a cancel is requested (at once if it already was)."""
        with self._lock:
            if not self._cancelled:
                self._on_cancel.append(callback)
                return
        callback()

    # progress -------------------------------------------------------------------------

    def set_progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Record how far the job got. Cheap: kept in memory, written to ``Job.progress``
        by the worker's next heartbeat (at most once per beat) and at completion."""
        for label, value in (("done", done), ("total", total)):
            if value is None and label == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"set_progress({label}=...) must be a number, got {value!r}.")
            if not math.isfinite(value):
                raise ValueError(f"set_progress({label}=...) must be finite, got {value!r}.")
        if not isinstance(message, str):
            raise TypeError(f"set_progress(message=...) must be a string, got {message!r}.")
        progress = {
            "done": done,
            "total": total,
            # Storable whatever it holds: a write of progress never fails the outcome's.
            "message": escape_surrogates(message.replace("\x00", ""))[:MAX_PROGRESS_MESSAGE_CHARS],
            "at": timezone.now().isoformat(),
        }
        with self._lock:
            self._progress = progress
            self._progress_unwritten = True

    @property
    def progress(self) -> dict[str, Any] | None:
        """The latest progress set, or None."""
        with self._lock:
            return self._progress

    def put_progress(self, progress: dict[str, Any]) -> None:
        """Take progress set elsewhere (by the handler in a process-pool child)."""
        with self._lock:
            self._progress = progress
            self._progress_unwritten = True

    def take_unwritten_progress(self) -> dict[str, Any] | None:
        """The latest progress if it changed since the last call, else None."""
        with self._lock:
            if not self._progress_unwritten:
                return None
            self._progress_unwritten = False
            return self._progress


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "django_cronqueue_job", default=None
)


def current() -> JobContext | None:
    """The context of the job whose handler is running here, or None outside a handler."""
    return _current.get()


@contextlib.contextmanager
def activate(context: JobContext) -> Iterator[JobContext]:
    """Make ``context`` the current job's context for the duration of the block."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def enter(context: JobContext) -> contextvars.Token[JobContext | None]:
    """``activate`` without its context manager, for the worker's hot path: make
    ``context`` current until ``leave`` is given the token."""
    return _current.set(context)


def leave(token: contextvars.Token[JobContext | None]) -> None:
    _current.reset(token)
