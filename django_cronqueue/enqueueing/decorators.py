"""``@jobs.job`` and ``@jobs.cron``: register a function and return its handle.

A handle is the registered ``JobDefinition`` plus the enqueue shortcuts
(``handle.enqueue(**payload)``, ``handle.enqueue_on_commit(**payload)``,
``handle.using(...).enqueue(...)``); calling it calls the function.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, overload

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from ..cron.spec import DEFAULT_MAX_CATCH_UP, checked_spec
from ..definitions.backoff import BackoffFunction
from ..definitions.option_hints import unknown_options
from ..definitions.registry import JobDefinition, LimitBy, OnFailed, default_name, define
from ..models import Job

# The writes (enqueue, on_commit, workflows) load when first used: importing a site's job
# modules, as every process does at start, only defines.
if TYPE_CHECKING:
    from .workflows import Signature


class JobHandle(JobDefinition):
    """What ``@jobs.job`` and ``@jobs.cron`` return."""

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Enqueue one run with these arguments: positional ones are bound to the
        handler's parameters and stored by name."""
        from .enqueue import enqueue

        return enqueue(self, bind_arguments(self, args, kwargs))

    async def aenqueue(self, *args: Any, **kwargs: Any) -> Job:
        """``enqueue`` for async code (run in a thread by ``sync_to_async``)."""
        return await sync_to_async(self.enqueue)(*args, **kwargs)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``enqueue``, checked now but written when the transaction on the ``default``
        database commits (at once outside one); a rollback drops it. For another of the
        site's databases: ``jobs.enqueue_on_commit(handle, payload, using=alias)``."""
        from .on_commit import enqueue_on_commit

        enqueue_on_commit(self, bind_arguments(self, args, kwargs))

    def enqueue_many(
        self,
        payloads: Iterable[Mapping[str, Any]],
        *,
        run_at: dt.datetime | None = None,
        delay: dt.timedelta | float | None = None,
        priority: int | None = None,
        queue: str | None = None,
    ) -> list[Job]:
        """``jobs.enqueue_many`` of this job: one run per payload (a mapping of keyword
        arguments), every payload checked before one INSERT per batch."""
        from .enqueue import enqueue_many

        return enqueue_many(
            self, payloads, run_at=run_at, delay=delay, priority=priority, queue=queue
        )

    @property
    def delay(self) -> NoReturn:
        raise AttributeError(
            f"Job {self.name!r} has no .delay(): enqueue it with "
            f"{self.func.__name__}.enqueue(...), which takes the same positional and keyword "
            "arguments."
        )

    @property
    def apply_async(self) -> NoReturn:
        raise AttributeError(
            f"Job {self.name!r} has no .apply_async(): enqueue it with "
            f"{self.func.__name__}.enqueue(...), and pass options with {self.func.__name__}"
            ".using(delay=..., run_at=..., queue=..., priority=...).enqueue(...)."
        )

    def using(self, **options: Any) -> EnqueueOptions:
        """Options (run_at, delay, dedupe_key, dedupe_for, priority, queue, after) for the
        next ``.enqueue()``."""
        return EnqueueOptions(self, options)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature of one run with these arguments, for ``jobs.chain`` and
        ``jobs.group``; checked now, written by the workflow's ``enqueue()``."""
        from .workflows import Signature

        return Signature.make(self, bind_arguments(self, args, kwargs), {})


class EnqueueOptions:
    """``handle.using(run_at=..., dedupe_key=...)``: options for the next enqueue."""

    ALLOWED = frozenset(
        {"run_at", "delay", "dedupe_key", "dedupe_for", "priority", "queue", "after", "fair_key"}
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

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        payload = bind_arguments(self.definition, args, kwargs)
        if "after" in self.options:
            return self._enqueue_after(payload)
        from .enqueue import enqueue

        return enqueue(self.definition, payload, **self.options)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> Job:
        return await sync_to_async(self.enqueue)(*args, **kwargs)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``enqueue`` with these options, checked now but written when the transaction on
        the ``default`` database commits; a rollback drops it."""
        payload = bind_arguments(self.definition, args, kwargs)
        if "after" not in self.options:
            from .on_commit import enqueue_on_commit

            enqueue_on_commit(self.definition, payload, **self.options)
            return
        from .workflows import check_enqueue_after, enqueue_after

        options = self._after_options()
        checked, upstream = check_enqueue_after(
            self.definition, payload, self.options["after"], options
        )
        transaction.on_commit(partial(enqueue_after, self.definition, checked, upstream, options))

    def _enqueue_after(self, payload: dict[str, Any]) -> Job:
        from .workflows import enqueue_after

        options = self._after_options()
        return enqueue_after(self.definition, payload, self.options["after"], options)

    def _after_options(self) -> dict[str, Any]:
        options = {key: value for key, value in self.options.items() if key != "after"}
        refused = sorted(set(options) & {"dedupe_key", "dedupe_for"})
        if refused:
            raise TypeError(
                f"Job {self.definition.name!r}: using(after=...) takes no "
                f"{', '.join(refused)}: a job that waits for others is never deduplicated."
            )
        return options

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature with these options (run_at, delay, priority, queue)."""
        from .workflows import Signature

        return Signature.make(
            self.definition, bind_arguments(self.definition, args, kwargs), self.options
        )

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
        from .enqueue import enqueue_many

        return enqueue_many(self.definition, payloads, **self.options)


def bind_arguments(
    definition: JobDefinition, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The payload of a call: ``kwargs``, and each of ``args`` under the name of the
    parameter it binds to (the handler's signature, read once when it was defined).
    Raises TypeError naming the job and the signature."""
    if not args:
        return kwargs
    where = f"Job {definition.name!r} ({definition.qualified_function}{definition.signature})"
    if definition.cron is not None:
        raise TypeError(f"{where} is a cron schedule: its enqueue() takes no arguments.")
    try:
        bound = definition.signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}.") from None
    payload: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = definition.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            payload.update(value)
        elif kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise TypeError(
                f"{where}: {name!r} is a positional-only or *args parameter, which cannot "
                "be stored by name; make it a normal parameter."
            )
        else:
            payload[name] = value
    return payload


Decorator = Callable[[Callable[..., Any]], JobHandle]
# retry_on= / discard_on=: an exception class or a tuple of them.
ExceptionOption = type[BaseException] | tuple[type[BaseException], ...]


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
    fair_by: LimitBy | None = None,
    retry_on: ExceptionOption | None = None,
    discard_on: ExceptionOption | None = None,
    soft_timeout: float | None = None,
    sensitive: bool | Sequence[str] = False,
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
    fair_by: LimitBy | None = None,
    retry_on: ExceptionOption | None = None,
    discard_on: ExceptionOption | None = None,
    soft_timeout: float | None = None,
    sensitive: bool | Sequence[str] = False,
    **unsupported: Any,
) -> JobHandle | Decorator:
    """Register a function as a job: ``@jobs.job`` or ``@jobs.job(name=..., retries=...)``.

    ``sensitive``: the names of the arguments stored encrypted (True: every argument and
    the return value); see ``django_cronqueue.integrations.encryption``."""

    def decorate(function: Callable[..., Any]) -> JobHandle:
        if not callable(function):
            raise ImproperlyConfigured(f"@jobs.job decorates a function, got {function!r}.")
        if unsupported:  # Celery's max_retries=, bind=, ...: name what to write instead
            job_name = name if name is not None else default_name(function)
            raise TypeError(
                unknown_options(f"Job {job_name!r}: @jobs.job()", unsupported, _options(job))
            )
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
            fair_by=fair_by,
            kind=JobHandle,
            dedupe_for=dedupe_for,
            retry_on=retry_on,
            discard_on=discard_on,
            soft_timeout=soft_timeout,
            sensitive=sensitive,
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
    retry_on: ExceptionOption | None = None,
    discard_on: ExceptionOption | None = None,
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
        if "sensitive" in unsupported:
            raise ImproperlyConfigured(
                f"Cron schedule {schedule!r}: option sensitive= is not accepted: a schedule's "
                "handler takes only the CronRun, which holds nothing to encrypt. Enqueue a "
                "job defined with sensitive= from its handler."
            )
        if unsupported:
            raise ImproperlyConfigured(
                unknown_options(
                    f"Cron schedule {schedule!r}: @jobs.cron()", unsupported, _options(cron)
                )
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
            retry_on=retry_on,
            discard_on=discard_on,
            soft_timeout=soft_timeout,
        )
        assert isinstance(handle, JobHandle)
        return handle

    return decorate


def _options(decorator: Callable[..., Any]) -> list[str]:
    """The keyword options ``decorator`` takes."""
    parameters = inspect.signature(decorator).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


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
