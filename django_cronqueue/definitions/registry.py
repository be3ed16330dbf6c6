"""The registry of job definitions: the name -> code mapping, and the options every
definition is checked against.

Names are the only link between a row and code. Nothing is ever imported or
evaluated from a row: a worker looks the row's name up in this registry and
runs only what its own code registered.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from ..conf import get_settings
from ..cron.spec import CronSpec
from ..exceptions import DecryptionError, Discard, LeaseLost, UnknownJob
from ..values.validation import (
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_QUEUE_LENGTH,
    MIN_PRIORITY,
    is_finite_number,
    is_int,
    is_positive_timedelta,
    is_priority,
)
from .backoff import DEFAULT_BACKOFF, BackoffFunction
from .flow_options import RateLimit, parse_rate_limit

# on_failed(job, exc): the Job row (a django_cronqueue.models.Job) and the exception.
OnFailed = Callable[[Any, BaseException], Any]
# limit_by: a payload key, or a callable payload -> limit key.
LimitBy = str | Callable[[dict[str, Any]], str]
# retry_on / discard_on: exception classes, as ``except`` takes them.
ExceptionClasses = tuple[type[BaseException], ...]
# The errors of runs the worker ended (not raised by the handler), which retry_on and
# discard_on never judge: they are retried while attempts are left.
WORKER_ENDED: ExceptionClasses = (LeaseLost,)


@dataclass(eq=False)
class JobDefinition:
    """A registered job. The decorator returns it; calling it calls the function."""

    name: str
    func: Callable[..., Any]
    retries: int | None = None
    backoff: BackoffFunction = DEFAULT_BACKOFF
    timeout: float | None = None
    concurrency: int | None = None
    queue: str | None = None
    # Seconds after which SoftTimeLimitExceeded is raised in the handler (worker pools).
    soft_timeout: float | None = None
    priority: int = 0
    on_failed: OnFailed | None = None
    cron: CronSpec | None = None  # set for @jobs.cron schedules
    dedupe_for: dt.timedelta | None = None  # the default span of its enqueues' dedupe keys
    # Flow control: concurrency and rate_limit apply per limit key (computed from the
    # payload at enqueue) when limit_by is set, else to the name as a whole.
    limit_by: LimitBy | None = None
    # Fair shares: a payload key, or a callable payload -> fair key. The queue's keys
    # take turns at its claims (``claiming.fair``).
    fair_by: LimitBy | None = None
    rate_limit: RateLimit | None = None
    # Which exceptions a handler raises are retried: only ``retry_on`` ones when it is
    # set (None: every one), never ``discard_on`` ones nor ``jobs.Discard``.
    retry_on: ExceptionClasses | None = None
    discard_on: ExceptionClasses = ()
    # Sensitive arguments: the payload keys stored encrypted (``integrations.encryption``),
    # or every key and the return value when ``sensitive_all``.
    sensitive_keys: frozenset[str] = frozenset()
    sensitive_all: bool = False
    # Whether any value of its payload is encrypted: the one test the hot path makes.
    sensitive: bool = field(init=False, repr=False)
    signature: inspect.Signature = field(init=False, repr=False)
    is_async: bool = field(init=False, repr=False)
    # A return value the database cannot store: dropped (False), or a final failure
    # with a TypeError (True: Django's Tasks framework specifies it).
    unstorable_result_fails: ClassVar[bool] = False
    # Payload values of the types typedjson knows (datetime, Decimal, ...) are stored
    # tagged and given back as those types (False: JSON only, as Django Tasks say).
    typed_values: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.func)
        self.is_async = inspect.iscoroutinefunction(self.func)
        self.sensitive = self.sensitive_all or bool(self.sensitive_keys)
        functools.update_wrapper(self, self.func)  # type: ignore[arg-type,unused-ignore]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name}>"

    @property
    def max_attempts(self) -> int:
        retries = get_settings().DEFAULT_RETRIES if self.retries is None else self.retries
        return retries + 1

    @property
    def effective_timeout(self) -> float:
        return get_settings().DEFAULT_TIMEOUT if self.timeout is None else self.timeout

    @property
    def effective_queue(self) -> str:
        return get_settings().DEFAULT_QUEUE if self.queue is None else self.queue

    @property
    def has_flow_limits(self) -> bool:
        """True when the claim must count starts or running rows per limit key (a
        ``rate_limit``, or a ``limit_by``); a bare ``concurrency=`` takes the name lock."""
        return self.limit_by is not None or self.rate_limit is not None

    def gives_up_on(self, exc: BaseException) -> bool:
        """True when ``exc``, raised by the handler, fails the job at once (no retry).

        Judged only on a failure, so a job without ``retry_on``/``discard_on`` pays one
        isinstance check per failed attempt and nothing per success. A run the worker
        could not finish (``WORKER_ENDED``: the handler raised nothing) is never judged:
        ``retries`` alone limits it."""
        if isinstance(exc, WORKER_ENDED):
            return False
        if isinstance(exc, (Discard, DecryptionError)):
            return True  # a value no key decrypts would fail every retry alike
        if self.discard_on and isinstance(exc, self.discard_on):
            return True
        return self.retry_on is not None and not isinstance(exc, self.retry_on)

    @property
    def retry_policy(self) -> str:
        """What is retried, in words (the admin shows it)."""
        retries = get_settings().DEFAULT_RETRIES if self.retries is None else self.retries
        parts = [f"{retries} retr{'y' if retries == 1 else 'ies'}"]
        if self.retry_on is not None:
            parts.append(f"retry_on: {_class_names(self.retry_on) or 'nothing'}")
        if self.discard_on:
            parts.append(f"discard_on: {_class_names(self.discard_on)}")
        return "; ".join(parts)

    @property
    def qualified_function(self) -> str:
        return f"{self.func.__module__}.{self.func.__qualname__}"


class Registry:
    """Name -> JobDefinition, shared by the whole process."""

    def __init__(self) -> None:
        self._definitions: dict[str, JobDefinition] = {}
        self._lock = threading.Lock()

    def register(self, definition: JobDefinition) -> JobDefinition:
        with self._lock:
            existing = self._definitions.get(definition.name)
            if existing is not None and not _same_function(existing, definition):
                raise ImproperlyConfigured(
                    f"Two jobs are named {definition.name!r}: {existing.qualified_function} and "
                    f"{definition.qualified_function}. Give one of them another name with "
                    "@jobs.job(name=...)."
                )
            self._definitions[definition.name] = definition
        return definition

    def unregister(self, name: str) -> None:
        with self._lock:
            self._definitions.pop(name, None)

    @property
    def sensitive_names(self) -> frozenset[str]:
        """The names of the jobs defined with ``sensitive=`` (none: nothing to erase)."""
        return frozenset(name for name, d in list(self._definitions.items()) if d.sensitive)

    def get(self, name: str) -> JobDefinition | None:
        return self._definitions.get(name)

    def names(self) -> list[str]:
        return sorted(self._definitions)

    def __iter__(self) -> Iterator[JobDefinition]:
        return iter(list(self._definitions.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._definitions

    def fair_queues(self) -> set[str]:
        """The queues of the jobs defined with ``fair_by``: their keys take turns."""
        return {d.effective_queue for d in self._definitions.values() if d.fair_by is not None}

    def cron_definitions(self) -> dict[str, JobDefinition]:
        """The ``@jobs.cron`` schedules, by name."""
        return {name: d for name, d in self._definitions.items() if d.cron is not None}

    def resolve(self, job: str | JobDefinition) -> JobDefinition:
        """The definition for a name or a handle; raises UnknownJob."""
        if isinstance(job, JobDefinition):
            return self._definitions.get(job.name, job)
        if not isinstance(job, str):
            raise UnknownJob(
                f"Expected a job name or a @jobs.job handle, got {type(job).__name__}: {job!r}."
            )
        definition = self._definitions.get(job)
        if definition is None:
            known = ", ".join(self.names()[:20]) or "none"
            raise UnknownJob(
                f"No job is named {job!r} in this process (known jobs: {known}). Check the name, "
                "and that the module defining it is imported (an installed app's jobs.py is)."
            )
        return definition


def _class_names(classes: ExceptionClasses) -> str:
    return ", ".join(cls.__qualname__ for cls in classes)


def _same_function(a: JobDefinition, b: JobDefinition) -> bool:
    """A module imported twice re-registers the same function: that is not a clash."""
    return a.qualified_function == b.qualified_function


registry = Registry()


def default_name(func: Callable[..., Any]) -> str:
    """``<app_label>.<function name>`` inside an installed app, else ``<module>.<qualname>``."""
    app_config = _containing_app(func.__module__)
    if app_config is not None:
        return f"{app_config.label}.{func.__name__}"
    return f"{func.__module__}.{func.__qualname__}"


def _containing_app(module: str) -> Any:
    candidates = [
        config
        for config in apps.app_configs.values()
        if module == config.name or module.startswith(config.name + ".")
    ]
    return max(candidates, key=lambda config: len(config.name), default=None)


def validate_common_options(
    name: str,
    *,
    retries: Any,
    backoff: Any,
    timeout: Any,
    queue: Any,
    priority: Any,
    on_failed: Any,
) -> None:
    """Options shared by @jobs.job and @jobs.cron; raises ImproperlyConfigured."""

    def fail(option: str, problem: str) -> None:
        raise ImproperlyConfigured(f"Job {name!r}: option {option}= {problem}.")

    if not isinstance(name, str) or not name.strip():
        raise ImproperlyConfigured(f"Job name must be a non-empty string, got {name!r}.")
    if len(name) > MAX_NAME_LENGTH:
        fail("name", f"is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if "\x00" in name:
        fail("name", "contains a NUL character")
    if retries is not None and (not is_int(retries) or retries < 0):
        fail("retries", f"must be an integer >= 0 (0 means a single attempt), got {retries!r}")
    if not callable(backoff):
        fail("backoff", f"must be a callable attempt -> seconds, got {backoff!r}")
    if timeout is not None and (not is_finite_number(timeout) or timeout <= 0):
        fail("timeout", f"must be a finite number of seconds > 0, got {timeout!r}")
    if queue is not None and (not isinstance(queue, str) or not queue.strip()):
        fail("queue", f"must be a non-empty string, got {queue!r}")
    if isinstance(queue, str) and len(queue) > MAX_QUEUE_LENGTH:
        fail("queue", f"is {len(queue)} characters long; the limit is {MAX_QUEUE_LENGTH}")
    if not is_priority(priority):
        fail(
            "priority",
            f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first), "
            f"got {priority!r}",
        )
    if on_failed is not None and not callable(on_failed):
        fail("on_failed", f"must be a callable (job, exc) -> None, got {on_failed!r}")


def define(
    name: str,
    function: Callable[..., Any],
    *,
    retries: int | None,
    backoff: BackoffFunction | None,
    timeout: float | None,
    queue: str | None,
    priority: int,
    on_failed: OnFailed | None,
    concurrency: int | None = None,
    limit_by: Any = None,
    rate_limit: Any = None,
    fair_by: Any = None,
    cron: CronSpec | None = None,
    kind: type[JobDefinition] = JobDefinition,
    dedupe_for: dt.timedelta | None = None,
    retry_on: Any = None,
    discard_on: Any = None,
    soft_timeout: float | None = None,
    sensitive: Any = False,
) -> JobDefinition:
    """Check the options shared by @jobs.job and @jobs.cron, then register the job
    (an instance of ``kind``: the decorators register handles)."""
    backoff = DEFAULT_BACKOFF if backoff is None else backoff
    validate_common_options(
        name,
        retries=retries,
        backoff=backoff,
        timeout=timeout,
        queue=queue,
        priority=priority,
        on_failed=on_failed,
    )
    if concurrency is not None and (not is_int(concurrency) or concurrency < 1):
        raise ImproperlyConfigured(
            f"Job {name!r}: option concurrency= must be an integer >= 1 "
            f"(or None for no limit), got {concurrency!r}."
        )
    if dedupe_for is not None and not is_positive_timedelta(dedupe_for):
        raise ImproperlyConfigured(
            f"Job {name!r}: option dedupe_for= must be a timedelta > 0 (the span within "
            f"which one dedupe key creates at most one job), got {dedupe_for!r}."
        )
    if soft_timeout is not None and (not is_finite_number(soft_timeout) or soft_timeout <= 0):
        raise ImproperlyConfigured(
            f"Job {name!r}: option soft_timeout= must be a finite number of seconds > 0 "
            f"(less than timeout), got {soft_timeout!r}."
        )
    parsed_rate = _checked_rate_limit(name, rate_limit)
    retried = None if retry_on is None else exception_classes(name, "retry_on", retry_on)
    discarded = () if discard_on is None else exception_classes(name, "discard_on", discard_on)
    _check_limit_by(name, function, limit_by, concurrency=concurrency, rate_limit=rate_limit)
    _check_payload_key_option(name, function, "fair_by", fair_by)
    sensitive_keys = checked_sensitive(name, function, sensitive)
    sensitive_all = sensitive is True
    for option, value in (("limit_by", limit_by), ("fair_by", fair_by)):
        _refuse_sensitive_key(name, option, value, sensitive_keys, sensitive_all=sensitive_all)
    definition = kind(
        name=name,
        func=function,
        retries=retries,
        backoff=backoff,
        timeout=timeout,
        concurrency=concurrency,
        queue=queue,
        priority=priority,
        on_failed=on_failed,
        cron=cron,
        dedupe_for=dedupe_for,
        limit_by=limit_by,
        fair_by=fair_by,
        rate_limit=parsed_rate,
        retry_on=retried,
        discard_on=discarded,
        soft_timeout=soft_timeout,
        sensitive_keys=sensitive_keys,
        sensitive_all=sensitive_all,
    )
    return registry.register(definition)


def exception_classes(name: str, option: str, value: Any) -> ExceptionClasses:
    """``retry_on=`` / ``discard_on=``: an exception class or a tuple (or list) of them,
    as ``except`` takes them; raises ImproperlyConfigured."""
    classes = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise ImproperlyConfigured(
                f"Job {name!r}: option {option}= must be an exception class or a tuple of "
                f"them (e.g. (TimeoutError, ConnectionError)), got {cls!r}."
            )
    return classes


def _checked_rate_limit(name: str, rate_limit: Any) -> RateLimit | None:
    if rate_limit is None:
        return None
    try:
        return parse_rate_limit(rate_limit)
    except ValueError as exc:
        raise ImproperlyConfigured(f"Job {name!r}: option rate_limit= {exc}.") from None


def _check_limit_by(
    name: str, function: Callable[..., Any], limit_by: Any, *, concurrency: Any, rate_limit: Any
) -> None:
    """``limit_by``: a payload key that names an argument of the handler, or a callable
    taking the payload; only with ``concurrency`` or ``rate_limit``, which it divides."""
    if limit_by is not None and concurrency is None and rate_limit is None:
        raise ImproperlyConfigured(
            f"Job {name!r}: option limit_by= ({limit_by!r}) needs concurrency= or "
            "rate_limit=: it says what they apply to (each distinct value), and alone it "
            "limits nothing."
        )
    _check_payload_key_option(name, function, "limit_by", limit_by)


def _check_payload_key_option(
    name: str, function: Callable[..., Any], option: str, value: Any
) -> None:
    """``limit_by`` or ``fair_by``: None, a payload key that names an argument of the
    handler, or a callable taking the payload."""

    def fail(problem: str) -> None:
        raise ImproperlyConfigured(f"Job {name!r}: option {option}= {problem}.")

    if value is None:
        return
    if isinstance(value, str):
        if not value or "\x00" in value:
            fail(f"must be a payload key (an argument of the handler), got {value!r}")
        parameters = inspect.signature(function).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        parameter = parameters.get(value)
        keyword = parameter is not None and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if not keyword and not (parameter is None and takes_any):
            fail(
                f"names {value!r}, which is not a keyword argument of "
                f"{function.__module__}.{function.__qualname__}{inspect.signature(function)}"
            )
        return
    if not callable(value):
        fail(
            "must be a payload key (a str) or a callable payload -> str, "
            f"got {type(value).__name__}: {value!r}"
        )
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind({})
    except TypeError:
        fail(
            f"is a callable that cannot be called with the payload alone: {value!r}"
            f"{signature}; it must take one argument, the payload dict, and return a str"
        )


def checked_sensitive(name: str, function: Callable[..., Any], sensitive: Any) -> frozenset[str]:
    """``sensitive=``: False, True (every argument and the return value), or a tuple of
    the handler's keyword arguments stored encrypted. Returns those names (empty for
    False and True); raises ImproperlyConfigured."""
    if sensitive is False or sensitive is None:
        return frozenset()
    if sensitive is True:
        return frozenset()
    if isinstance(sensitive, str) or not isinstance(sensitive, (tuple, list, frozenset, set)):
        raise ImproperlyConfigured(
            f"Job {name!r}: option sensitive= must be True or a tuple of argument names "
            f"(e.g. sensitive=({sensitive!r},)), got {type(sensitive).__name__}: "
            f"{sensitive!r}."
        )
    if not sensitive:
        raise ImproperlyConfigured(
            f"Job {name!r}: option sensitive= is empty; name the arguments to encrypt, "
            "or remove the option."
        )
    for key in sensitive:
        if not isinstance(key, str):
            raise ImproperlyConfigured(
                f"Job {name!r}: option sensitive= must hold argument names (str), "
                f"got {type(key).__name__}: {key!r}."
            )
        _check_payload_key_option(name, function, "sensitive", key)
    return frozenset(sensitive)


def _refuse_sensitive_key(
    name: str, option: str, value: Any, keys: frozenset[str], *, sensitive_all: bool
) -> None:
    """A limit or fair key is stored (and shown) in clear: it may not come from a
    sensitive argument. With ``sensitive=True`` every argument is one, and a callable
    would only see encrypted values."""
    if value is None:
        return
    if isinstance(value, str) and (sensitive_all or value in keys):
        raise ImproperlyConfigured(
            f"Job {name!r}: option {option}={value!r} takes its key from the sensitive "
            f"argument {value!r}, and keys are stored in clear. Take the key from an "
            "argument that is not sensitive (e.g. an id), or remove it from sensitive=."
        )
    if not isinstance(value, str) and sensitive_all:
        raise ImproperlyConfigured(
            f"Job {name!r}: option {option}= is a callable, but with sensitive=True every "
            "argument is encrypted, so it would see no clear value. Name the sensitive "
            "arguments instead (sensitive=('card_token',)) and take the key from another."
        )
