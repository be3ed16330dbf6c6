"""Helpers for testing code that enqueues jobs.

```python
from django_cronqueue import testing

def test_signup_sends_a_welcome_email(client):
    client.post("/signup/", {"email": "a@example.com"})
    [job] = testing.assert_enqueued("accounts.send_welcome_email", {"email": "a@example.com"})
    result = testing.run_due_jobs()
    assert result.ran == 1
```

- ``run_due_jobs(now=None, queues=None)``: one worker tick in this thread (``jobs.tick``),
  with an injectable ``now``; ``run_until_idle`` ticks until nothing is left to claim.
- ``enqueued(job=None, /, **payload_subset)``: the rows of a job (its name, handle or
  Django ``Task``) whose payload contains the given keys and values.
- ``assert_enqueued(job, payload=None, count=None)`` and ``assert_not_enqueued(job=None,
  payload=None)``: the same as assertions whose failure lists what *was* enqueued.
- ``capture_jobs()``: a context manager that sees only the rows created inside it.
- ``eager()``: a context manager (and ``CRONQUEUE["EAGER"] = True``, the setting) that
  makes every enqueue run its handler at once; see ``django_cronqueue.enqueueing.eager``.

The pytest plugin (``django_cronqueue.pytest_plugin``, loaded automatically) exposes
these as the ``cronqueue`` and ``cronqueue_eager`` fixtures.

Everything here reads the database: rows of every status count as "enqueued" (in eager
mode they have already run). Payloads are compared key by key at the top level: a
row matches when each given key is present with an equal value (compared as JSON, so a
tuple matches a list); other keys of the row do not matter.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.db.models import Max
from django.test import override_settings

from .conf import database_alias, user_settings
from .definitions.registry import JobDefinition, registry
from .integrations import encryption
from .models import Job
from .values import typedjson
from .worker.results import TickResult

__all__ = [
    "CronQueueHelper",
    "JobCapture",
    "assert_enqueued",
    "assert_not_enqueued",
    "capture_jobs",
    "eager",
    "enqueued",
    "run_due_jobs",
    "run_until_idle",
]

MAX_LISTED = 50


# --- running ------------------------------------------------------------------------


def run_due_jobs(now: dt.datetime | None = None, queues: Sequence[str] | None = None) -> TickResult:
    """Run one worker tick in this thread: materialize due cron occurrences, recover
    expired leases, then claim and run every job due at ``now`` (default: the current
    time). Returns ``TickResult(claimed, ran, failed)``. Same as ``jobs.tick``."""
    from .jobs import tick

    return tick(now=now, queues=queues)


def run_until_idle(
    now: dt.datetime | None = None, queues: Sequence[str] | None = None, *, max_ticks: int = 100
) -> TickResult:
    """Tick until a tick claims nothing (jobs that enqueue jobs run too), with the same
    ``now`` each time; retries whose backoff puts them after ``now`` wait. Returns the
    sums. Raises AssertionError after ``max_ticks`` ticks that all claimed something."""
    claimed = ran = failed = 0
    for _ in range(max_ticks):
        result = run_due_jobs(now=now, queues=queues)
        if not result.claimed:
            return TickResult(claimed=claimed, ran=ran, failed=failed)
        claimed, ran, failed = claimed + result.claimed, ran + result.ran, failed + result.failed
    raise AssertionError(
        f"run_until_idle: still claiming jobs after {max_ticks} ticks "
        f"({claimed} claimed); does a job keep enqueueing jobs?"
    )


@contextmanager
def eager(enabled: bool = True) -> Iterator[None]:
    """Turn eager mode on (or off) inside the block: every enqueue runs its job at once."""
    with override_settings(CRONQUEUE={**user_settings(), "EAGER": enabled}):
        yield


# --- looking at what was enqueued ---------------------------------------------------


def job_name(job: Any) -> str:
    """The name of a job given by name, ``@jobs.job`` handle or Django ``Task``.

    A name must be defined in this process (``jobs.UnknownJob`` otherwise), so that a
    typo cannot make ``assert_not_enqueued`` pass."""
    if isinstance(job, JobDefinition):
        return job.name
    if isinstance(job, str):
        return registry.resolve(job).name
    if hasattr(job, "module_path") and hasattr(job, "func"):  # a django.tasks.Task
        from .backend import job_name as task_job_name

        return task_job_name(job)
    raise TypeError(f"Expected a job name, a @jobs.job handle or a django.tasks Task, got {job!r}.")


def _as_json(value: Any) -> Any:
    """``value`` as a row stores it: a datetime, Decimal, UUID... as its tagged object."""
    try:
        return json.loads(json.dumps(typedjson.encode(value)))
    except (TypeError, ValueError):
        return value


def payload_matches(payload: Any, subset: Mapping[str, Any]) -> bool:
    if not isinstance(payload, dict):
        return not subset
    return all(key in payload and payload[key] == _as_json(value) for key, value in subset.items())


def clear_payload(job: Job) -> Any:
    """The payload of ``job`` with its sensitive values in clear: tests see what the
    handler gets (``@jobs.job(sensitive=...)``)."""
    payload = job.payload
    if not encryption.holds_encrypted(payload):
        return payload
    where = f"Job {job.name} #{job.pk}"
    return {  # an erased value (its job ended) stays as stored: it matches nothing
        key: encryption.decrypt_value(value, f"{where}, payload key {key!r}")
        if encryption.is_encrypted(value) and not encryption.is_erased(value)
        else value
        for key, value in payload.items()
    }


def _matches(row: Job, name: str | None, subset: Mapping[str, Any]) -> bool:
    """``row`` is of job ``name`` (any when None) and its payload contains ``subset``."""
    return (name is None or row.name == name) and payload_matches(clear_payload(row), subset)


def describe(job: Job) -> str:
    payload = json.dumps(clear_payload(job), ensure_ascii=False, sort_keys=True, default=str)
    if len(payload) > 200:
        payload = payload[:197] + "..."
    extra = f", {job.last_error.splitlines()[0][:100]}" if job.last_error else ""
    return f"#{job.pk} {job.name} {payload} [{job.status}, queue {job.queue}{extra}]"


def _listing(rows: list[Job]) -> str:
    lines = [f"  {describe(row)}" for row in rows[:MAX_LISTED]]
    if len(rows) > MAX_LISTED:
        lines.append(f"  ... and {len(rows) - MAX_LISTED} more")
    return "\n".join(lines) if lines else "  (none)"


def _wanted(name: str | None, payload: Mapping[str, Any] | None) -> str:
    what = f"job {name!r}" if name else "job"
    if payload:
        what += f" with a payload containing {dict(payload)!r}"
    return what


class JobCapture:
    """The ``Job`` rows with an id in ``(after_id, until_id]`` (no upper bound while
    ``until_id`` is None), and assertions about them."""

    def __init__(self, after_id: int = 0, until_id: int | None = None) -> None:
        self.after_id = after_id
        self.until_id = until_id

    # queries ---------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        """Every captured row, oldest first."""
        rows = Job.objects.using(database_alias()).filter(id__gt=self.after_id)
        if self.until_id is not None:
            rows = rows.filter(id__lte=self.until_id)
        return list(rows.order_by("id"))

    def enqueued(self, job: Any = None, /, **payload_subset: Any) -> list[Job]:
        """Captured rows of ``job`` (all jobs when None) whose payload contains
        ``payload_subset``, oldest first."""
        name = job_name(job) if job is not None else None
        return [row for row in self.jobs() if _matches(row, name, payload_subset)]

    def clear(self) -> None:
        """Forget the rows captured so far: later queries see only newer rows."""
        self.after_id = _max_id()
        self.until_id = None

    # assertions ------------------------------------------------------------------------

    def assert_enqueued(
        self, job: Any, payload: Mapping[str, Any] | None = None, count: int | None = None
    ) -> list[Job]:
        """Assert that ``job`` was enqueued (``count`` times exactly, when given) with a
        payload containing ``payload``. Returns the matching rows."""
        name = job_name(job)
        everything = self.jobs()
        matching = [row for row in everything if _matches(row, name, payload or {})]
        if (count is None and matching) or (count is not None and len(matching) == count):
            return matching
        expected = "at least 1" if count is None else str(count)
        raise AssertionError(
            f"Expected {expected} {_wanted(name, payload)}, found {len(matching)}.\n"
            f"{self._enqueued_listing(everything)}"
        )

    def assert_not_enqueued(
        self, job: Any = None, payload: Mapping[str, Any] | None = None
    ) -> None:
        """Assert that no captured row is of ``job`` (of any job, when None) with a
        payload containing ``payload``."""
        name = job_name(job) if job is not None else None
        everything = self.jobs()
        matching = [row for row in everything if _matches(row, name, payload or {})]
        if matching:
            raise AssertionError(
                f"Expected no {_wanted(name, payload)}, found {len(matching)}:\n"
                f"{_listing(matching)}"
            )

    def _enqueued_listing(self, everything: list[Job]) -> str:
        return f"Jobs enqueued ({len(everything)}):\n{_listing(everything)}"


class CronQueueHelper(JobCapture):
    """``JobCapture`` plus running: what the ``cronqueue`` pytest fixture returns."""

    def tick(
        self, now: dt.datetime | None = None, queues: Sequence[str] | None = None
    ) -> TickResult:
        """One worker tick in this thread; see ``run_due_jobs``."""
        return run_due_jobs(now=now, queues=queues)

    run_due_jobs = tick

    def run_until_idle(
        self,
        now: dt.datetime | None = None,
        queues: Sequence[str] | None = None,
        *,
        max_ticks: int = 100,
    ) -> TickResult:
        return run_until_idle(now=now, queues=queues, max_ticks=max_ticks)

    def capture(self) -> Any:
        """``capture_jobs()``: a context manager seeing only the rows created inside it."""
        return capture_jobs()

    def eager(self, enabled: bool = True) -> Any:
        """``eager()``: a context manager turning eager mode on (or off) inside it."""
        return eager(enabled)


def _max_id() -> int:
    value = Job.objects.using(database_alias()).aggregate(top=Max("id"))["top"]
    return int(value or 0)


@contextmanager
def capture_jobs() -> Iterator[JobCapture]:
    """Capture the rows created inside the block::

        with testing.capture_jobs() as captured:
            place_order()
        captured.assert_enqueued("shop.send_receipt", {"order_id": 1}, count=1)

    Inside the block the capture already sees the rows created so far."""
    capture = JobCapture(after_id=_max_id())
    try:
        yield capture
    finally:
        capture.until_id = _max_id()


_all = JobCapture()


def enqueued(job: Any = None, /, **payload_subset: Any) -> list[Job]:
    """Rows of ``job`` (all jobs when None) whose payload contains ``payload_subset``."""
    return _all.enqueued(job, **payload_subset)


def assert_enqueued(
    job: Any, payload: Mapping[str, Any] | None = None, count: int | None = None
) -> list[Job]:
    """Assert that ``job`` was enqueued (``count`` times exactly, when given) with a
    payload containing ``payload``; the failure message lists every row. Returns the
    matching rows."""
    return _all.assert_enqueued(job, payload, count)


def assert_not_enqueued(job: Any = None, payload: Mapping[str, Any] | None = None) -> None:
    """Assert that no row is of ``job`` (of any job, when None) with a payload containing
    ``payload``; the failure message lists the rows that are."""
    _all.assert_not_enqueued(job, payload)
