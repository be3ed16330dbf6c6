"""``@jobs.job`` and ``@jobs.cron``: register a function and return its handle.

A handle is the registered ``JobDefinition`` plus the enqueue shortcuts
(``handle.enqueue(**payload)``, ``handle.using(...).enqueue(...)``); calling it calls
the function.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

from django.core.exceptions import ImproperlyConfigured

from .backoff import BackoffFunction
from .cronspec import DEFAULT_MAX_CATCH_UP, checked_spec
from .enqueue import enqueue, enqueue_many
from .models import Job
from .registry import JobDefinition, LimitBy, OnFailed, default_name, define
from .workflows import Signature, enqueue_after


class JobHandle(JobDefinition):
    """What ``@jobs.job`` and ``@jobs.cron`` return."""

    def enqueue(self, **payload: Any) -> Job:
        """Enqueue one run with these keyword arguments."""
        return enqueue(self, payload)

    def using(self, **options: Any) -> EnqueueOptions:
        """Options (run_at, delay, dedupe_key, dedupe_for, priority, queue, after) for the
        next ``.enqueue()``."""
        return EnqueueOptions(self, options)

    def s(self, **payload: Any) -> Signature:
        """A signature of one run with these keyword arguments, for ``jobs.chain`` and
        ``jobs.group``; checked now, written by the workflow's ``enqueue()``."""
        return Signature.make(self, payload, {})


class EnqueueOptions:
    """``handle.using(run_at=..., dedupe_key=...)``: options for the next enqueue."""

    ALLOWED = frozenset(
        {"run_at", "delay", "dedupe_key", "dedupe_for", "priority", "queue", "after"}
    )

    def __init__(self, definition: JobDefinition, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - self.ALLOWED)
        if unknown:
            raise TypeError(
                f"Job {definition.name!r}: using() got unknown option(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(self.ALLOWED))}."
            )
        self.definition = definition
        self.options = options

    def enqueue(self, **payload: Any) -> Job:
        if "after" in self.options:
            return self._enqueue_after(payload)
        return enqueue(self.definition, payload, **self.options)

    def _enqueue_after(self, payload: dict[str, Any]) -> Job:
        options = {key: value for key, value in self.options.items() if key != "after"}
        refused = sorted(set(options) & {"dedupe_key", "dedupe_for"})
        if refused:
            raise TypeError(
                f"Job {self.definition.name!r}: using(after=...) takes no "
                f"{', '.join(refused)}: a job that waits for others is never deduplicated."
            )
        return enqueue_after(self.definition, payload, self.options["after"], options)

    def s(self, **payload: Any) -> Signature:
        """A signature with these options (run_at, delay, priority, queue)."""
        return Signature.make(self.definition, payload, self.options)

    def enqueue_many(self, payloads: Iterable[Mapping[str, Any]]) -> list[Job]:
        if "after" in self.options:
            raise TypeError(
                f"Job {self.definition.name!r}: enqueue_many() does not take after=; use "
                "jobs.group([...]) for jobs that run side by side."
            )
        if "dedupe_key" in self.options or "dedupe_for" in self.options:
            raise TypeError(
                "enqueue_many() does not take a dedupe_key or dedupe_for: each job needs its "
                "own key."
            )
        return enqueue_many(self.definition, payloads, **self.options)


Decorator = Callable[[Callable[..., Any]], JobHandle]


@overload
def job(func: Callable[..., Any]) -> JobHandle: ...


@overload
def job(
    func: None = None,
    *,
    name: str | None = None,
    retries: int | None = None,
    backoff: BackoffFunction | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    queue: str | None = None,
    priority: int = 0,
    on_failed: OnFailed | None = None,
    dedupe_for: dt.timedelta | None = None,
    limit_by: LimitBy | None = None,
    rate_limit: str | tuple[int, dt.timedelta] | None = None,
    soft_timeout: float | None = None,
) -> Decorator: ...


def job(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    retries: int | None = None,
    backoff: BackoffFunction | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    queue: str | None = None,
    priority: int = 0,
    on_failed: OnFailed | None = None,
    dedupe_for: dt.timedelta | None = None,
    limit_by: LimitBy | None = None,
    rate_limit: str | tuple[int, dt.timedelta] | None = None,
    soft_timeout: float | None = None,
) -> JobHandle | Decorator:
    """Register a function as a job: ``@jobs.job`` or ``@jobs.job(name=..., retries=...)``."""

    def decorate(function: Callable[..., Any]) -> JobHandle:
        if not callable(function):
            raise ImproperlyConfigured(f"@jobs.job decorates a function, got {function!r}.")
        handle = define(
            name if name is not None else default_name(function),
            function,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            concurrency=concurrency,
            queue=queue,
            priority=priority,
            on_failed=on_failed,
            limit_by=limit_by,
            rate_limit=rate_limit,
            kind=JobHandle,
            dedupe_for=dedupe_for,
            soft_timeout=soft_timeout,
        )
        assert isinstance(handle, JobHandle)
        return handle

    if func is not None:
        return decorate(func)
    return decorate


def cron(
    expression: str,
    *,
    tz: str | None = None,
    name: str | None = None,
    catch_up: str = "latest",
    catch_up_window: dt.timedelta | float | None = None,
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    overlap: str = "allow",
    retries: int | None = None,
    backoff: BackoffFunction | None = None,
    timeout: float | None = None,
    soft_timeout: float | None = None,
    queue: str | None = None,
    priority: int = 0,
    on_failed: OnFailed | None = None,
    **unsupported: Any,
) -> Decorator:
    """Register a function as a cron schedule: ``@jobs.cron("30 2 * * *", tz=...)``."""

    def decorate(function: Callable[..., Any]) -> JobHandle:
        schedule = name if name is not None else default_name(function)
        if "concurrency" in unsupported:
            raise ImproperlyConfigured(
                f"Cron schedule {schedule!r}: option concurrency= is not accepted: each "
                "occurrence is already unique. To keep runs from overlapping use overlap='skip'."
            )
        flow = sorted(set(unsupported) & {"limit_by", "rate_limit"})
        if flow:
            raise ImproperlyConfigured(
                f"Cron schedule {schedule!r}: option {flow[0]}= is not accepted: a schedule's "
                "occurrences have no payload to key a limit on, and its expression already sets "
                "how often it starts. To throttle the work a schedule fans out, enqueue a job "
                "with limit_by=/rate_limit= from its handler."
            )
        if unsupported:
            raise ImproperlyConfigured(
                f"Cron schedule {schedule!r}: unknown option(s) {', '.join(sorted(unsupported))}."
            )
        spec = checked_spec(
            schedule,
            expression,
            tz=tz,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            max_catch_up=max_catch_up,
            overlap=overlap,
        )
        _check_cron_handler(schedule, function)
        handle = define(
            schedule,
            function,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            queue=queue,
            priority=priority,
            on_failed=on_failed,
            cron=spec,
            kind=JobHandle,
            soft_timeout=soft_timeout,
        )
        assert isinstance(handle, JobHandle)
        return handle

    return decorate


def _check_cron_handler(schedule: str, function: Callable[..., Any]) -> None:
    problem = None
    if not callable(function):
        problem = f"@jobs.cron decorates a function, got {function!r}."
    else:
        try:
            inspect.signature(function).bind(None)
        except TypeError:
            problem = (
                "the handler must take exactly one argument, the CronRun: "
                "def handler(run: jobs.CronRun) -> None."
            )
    if problem:
        raise ImproperlyConfigured(f"Cron schedule {schedule!r}: {problem}")
