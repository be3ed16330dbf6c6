"""Checking the arguments of an enqueue call, before anything is written.

Each check raises at the call site with a message naming the job and the offending
key or option: ``InvalidPayload`` for the payload, ``ValueError`` for options.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone

from ..conf import get_settings
from ..definitions.flow_options import MAX_LIMIT_KEY_LENGTH, key_from_value, key_problem
from ..definitions.registry import JobDefinition
from ..exceptions import InvalidPayload
from ..integrations import encryption
from ..values import typedjson
from ..values.validation import (
    JSON_ADVICE,
    MAX_DEDUPE_KEY_LENGTH,
    MAX_JSON_DEPTH,
    MAX_PRIORITY,
    MAX_QUEUE_LENGTH,
    MIN_PRIORITY,
    TYPED_ADVICE,
    is_finite_number,
    is_priority,
    is_queue_name,
    json_problem,
    short_repr,
    text_problem,
)


class StoredPayload(dict[str, Any]):
    """A payload as its row stores it (typed values tagged, a caller's ``$`` keys
    escaped): what ``check_payload`` returns. Checked again (a workflow's row made from
    its signature, an enqueue at commit, a schedule's edit), it is not encoded twice."""


def check_payload(definition: JobDefinition, payload: Mapping[str, Any] | None) -> StoredPayload:
    """The payload as its row stores it; raises InvalidPayload naming the job and the key."""
    name = definition.name
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise InvalidPayload(
            f"Job {name!r}: the payload must be a dict of keyword arguments, "
            f"got {type(payload).__name__}."
        )
    advice = JSON_ADVICE
    stored = isinstance(payload, StoredPayload)
    if definition.typed_values:
        advice = TYPED_ADVICE
        if not stored:
            payload = _encoded(definition, payload)
    for key, value in payload.items():
        if not isinstance(key, str):
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} is a {type(key).__name__}; keys must be "
                "strings (they are the handler's keyword arguments)."
            )
        problem = text_problem(key, f"payload key {key!r}") or json_problem(
            value, key, noun="payload key", depth=2, inside=[payload], advice=advice
        )
        if problem:
            raise InvalidPayload(
                f"Job {name!r}: {_unquoted(definition, key, value, problem, advice)}"
            )
    _check_binds(definition, payload)
    if definition.sensitive and not stored:
        payload = encryption.encrypt_payload(payload, _sensitive_keys(definition, payload))
    payload = StoredPayload(payload)
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    limit = get_settings().MAX_PAYLOAD_BYTES
    if size > limit:
        raise InvalidPayload(
            f"Job {name!r}: the payload is {size} bytes of JSON, over the limit of {limit} "
            "(CRONQUEUE['MAX_PAYLOAD_BYTES']). Store large data elsewhere and pass its id."
        )
    return payload


def _sensitive_keys(definition: JobDefinition, payload: Mapping[str, Any]) -> Iterable[str]:
    return payload.keys() if definition.sensitive_all else definition.sensitive_keys


def is_sensitive_key(definition: JobDefinition, key: str) -> bool:
    return definition.sensitive_all or key in definition.sensitive_keys


def _unquoted(
    definition: JobDefinition, key: str, value: Any, problem: str, advice: str = TYPED_ADVICE
) -> str:
    """``problem`` with a payload key's value, or in its place, for a sensitive key,
    what it is without quoting it."""
    if not definition.sensitive or not is_sensitive_key(definition, key):
        return problem
    return (
        f"payload key {key!r} is sensitive and holds a {type(value).__name__} that cannot "
        f"be stored (its value is not shown). {advice}"
    )


def _encoded(definition: JobDefinition, payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The payload with its datetime, Decimal, UUID... values tagged (typedjson); the
    same mapping when it holds none (the JSON checks then see its circular references).
    A sensitive value stored encrypted already (a schedule's edit) is kept as it is."""
    name = definition.name
    encoded = {}
    for key, value in payload.items():
        if definition.sensitive and encryption.is_encrypted(value):
            encoded[key] = value
            continue
        try:
            encoded[key] = typedjson.encode(value)
        except ValueError as exc:
            problem = f"payload key {key!r} {exc}."
            raise InvalidPayload(
                f"Job {name!r}: {_unquoted(definition, key, value, problem)}"
            ) from None
    same = all(encoded[key] is value for key, value in payload.items())
    if not same and settings.USE_TZ:  # only a payload with typed values pays for the walk
        _warn_of_naive_datetimes(definition, payload)
    return payload if same else encoded


def _warn_of_naive_datetimes(definition: JobDefinition, payload: Mapping[str, Any]) -> None:
    """Warn, as Django does for a model's DateTimeField, of each naive datetime among the
    arguments while time zone support is active: it reaches the handler as the same naive
    value, which the site's code is bound to compare with aware ones. The value of a
    sensitive argument is not shown."""
    seen: set[int] = {id(payload)}
    for key, argument in payload.items():
        hidden = definition.sensitive and is_sensitive_key(definition, str(key))
        for path, value in _naive_datetimes(argument, str(key), 1, seen):
            _warn_of_naive_datetime(definition.name, path, "" if hidden else f" ({value})")


def _warn_of_naive_datetime(name: str, path: str, shown: str) -> None:
    warnings.warn(
        f"Job {name!r}: payload key {path!r} received a naive datetime{shown} while "
        "time zone support is active; pass an aware one (django.utils.timezone.now(), "
        "or timezone.make_aware(value)).",
        RuntimeWarning,
        stacklevel=_outside_the_package(),
    )


def _naive_datetimes(
    value: Any, path: str, depth: int = 0, seen: set[int] | None = None
) -> Iterator[tuple[str, Any]]:
    """The naive datetimes in ``value`` with their paths (``key[1].sub``), each container
    visited once: a circular payload is refused by the JSON checks after this walk."""
    if isinstance(value, dt.datetime):
        if timezone.is_naive(value):
            yield path, value
        return
    seen = set() if seen is None else seen
    if depth > MAX_JSON_DEPTH or id(value) in seen:
        return
    if isinstance(value, Mapping):
        seen.add(id(value))
        for key, item in value.items():
            yield from _naive_datetimes(
                item, f"{path}.{key}" if path else str(key), depth + 1, seen
            )
    elif isinstance(value, (list, tuple)):
        seen.add(id(value))
        for index, item in enumerate(value):
            yield from _naive_datetimes(item, f"{path}[{index}]", depth + 1, seen)


def _outside_the_package() -> int:
    """The ``stacklevel`` that makes a warning raised here name the first caller outside
    django_cronqueue (the line that enqueued)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1  # the frame that calls warnings.warn
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def check_stored_payload(definition: JobDefinition, payload: Any) -> None:
    """Raise InvalidPayload unless a payload read back from the database (a dynamic
    schedule's, checked in full by ``check_payload`` when it was saved) is still a JSON
    object that binds to the handler, whose code may have changed since."""
    if not isinstance(payload, dict):
        raise InvalidPayload(
            f"Job {definition.name!r}: the stored payload must be a JSON object, "
            f"got {type(payload).__name__}."
        )
    _check_binds(definition, payload)


def _check_binds(definition: JobDefinition, payload: Mapping[str, Any]) -> None:
    name = definition.name
    if definition.cron is not None:
        if payload:
            raise InvalidPayload(
                f"Job {name!r} is a cron schedule; its handler takes only the CronRun, so the "
                f"payload must be empty (got key {next(iter(payload))!r})."
            )
        return
    parameters = definition.signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for key in payload:
        parameter = parameters.get(key)
        if parameter is None and not takes_any:
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} is not an argument of "
                f"{definition.qualified_function}{definition.signature}."
            )
        if parameter is not None and parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
        ):
            raise InvalidPayload(
                f"Job {name!r}: payload key {key!r} names a positional-only argument; "
                "make it a normal or keyword-only argument."
            )
    for parameter in parameters.values():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_ONLY,
        )
        if required and parameter.name not in payload:
            raise InvalidPayload(
                f"Job {name!r}: payload key {parameter.name!r} is missing; "
                f"{definition.qualified_function}{definition.signature} requires it."
            )


def limit_key(definition: JobDefinition, payload: Mapping[str, Any]) -> str:
    """The limit key of a checked payload: ``""`` without ``limit_by``, else the payload's
    value of that key (a string as it is, another JSON value as its compact JSON text) or
    what the ``limit_by`` callable returns. Raises InvalidPayload naming the job, the
    key and the value."""
    return _payload_key(definition, payload, "limit_by", definition.limit_by)


def fair_key(definition: JobDefinition, payload: Mapping[str, Any], explicit: Any = None) -> str:
    """The fair key of a checked payload: ``explicit`` (``using(fair_key=...)``) when
    given, else as ``limit_key`` does with ``fair_by``; ``""`` without either."""
    if explicit is None:
        return _payload_key(definition, payload, "fair_by", definition.fair_by)
    problem = key_problem(explicit)
    if problem:
        raise ValueError(
            f"Job {definition.name!r}: fair_key= {short_repr(explicit)} {problem}; a fair key "
            f"must be a non-empty string of at most {MAX_LIMIT_KEY_LENGTH} characters."
        )
    return str(explicit)


def _payload_key(
    definition: JobDefinition, payload: Mapping[str, Any], option: str, by: Any
) -> str:
    name = definition.name
    kind = "limit" if option == "limit_by" else "fair"
    if by is None:
        return ""
    if isinstance(by, str):
        if by not in payload:
            raise InvalidPayload(
                f"Job {name!r}: payload key {by!r} is missing; the job has {option}={by!r}, "
                "so every payload must have it."
            )
        value = payload[by]
        key = key_from_value(value)
        source = f"payload key {by!r} ({option}=) holds {short_repr(value)}, whose {kind} key"
    else:
        try:
            key = by(dict(payload))
        except Exception as exc:
            raise InvalidPayload(
                f"Job {name!r}: {option}={_callable_name(by)} raised "
                f"{type(exc).__name__}: {exc} for the payload {short_repr(dict(payload))}."
            ) from exc
        source = f"{option}={_callable_name(by)} returned {short_repr(key)}, a {kind} key that"
    problem = key_problem(key)
    if problem:
        raise InvalidPayload(
            f"Job {name!r}: {source} {problem}; a {kind} key must be a non-empty string of "
            f"at most {MAX_LIMIT_KEY_LENGTH} characters."
        )
    return str(key)


def _callable_name(function: Any) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))


def check_queue(definition: JobDefinition, queue: str | None) -> str:
    if queue is None:
        return definition.effective_queue
    if not is_queue_name(queue):
        raise ValueError(
            f"Job {definition.name!r}: queue= must be a non-empty string of at most "
            f"{MAX_QUEUE_LENGTH} characters, got {queue!r}."
        )
    problem = text_problem(queue, "queue=")
    if problem:
        raise ValueError(f"Job {definition.name!r}: {problem}")
    return queue


def check_priority(definition: JobDefinition, priority: int | None) -> int:
    if priority is None:
        return definition.priority
    if not is_priority(priority):
        raise ValueError(
            f"Job {definition.name!r}: priority= must be an integer from {MIN_PRIORITY} to "
            f"{MAX_PRIORITY}, got {priority!r}."
        )
    return priority


def check_dedupe_key(definition: JobDefinition, key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"Job {definition.name!r}: dedupe_key= must be a non-empty string, got {key!r}."
        )
    if len(key) > MAX_DEDUPE_KEY_LENGTH:
        raise ValueError(
            f"Job {definition.name!r}: dedupe_key= is {len(key)} characters long; the limit is "
            f"{MAX_DEDUPE_KEY_LENGTH}. Hash long keys (e.g. hashlib.sha256(key).hexdigest())."
        )
    problem = text_problem(key, "dedupe_key=")
    if problem:
        raise ValueError(f"Job {definition.name!r}: {problem}")
    return key


def refuse_sensitive_option_values(
    definition: JobDefinition, payload: Mapping[str, Any] | None, **options: str | None
) -> None:
    """Raise ValueError when a ``dedupe_key=`` or ``fair_key=`` (stored and shown in
    clear) equals the value of a sensitive argument of the call."""
    if not payload:
        return
    secrets = {
        str(value): key
        for key, value in payload.items()
        if is_sensitive_key(definition, str(key)) and isinstance(value, (str, int))
    }
    for option, given in options.items():
        key = None if given is None else secrets.get(str(given))
        if key is not None:
            raise ValueError(
                f"Job {definition.name!r}: {option}= is the value of the sensitive argument "
                f"{key!r}, and {option} is stored in clear. Derive it from an argument that "
                "is not sensitive (an id), or pass a digest of it (hashlib.sha256)."
            )


def check_dedupe_for(
    definition: JobDefinition, key: str | None, span: dt.timedelta | None
) -> dt.timedelta | None:
    """The span of ``key`` (an enqueue's ``dedupe_for=``, else the job's option), or None
    for a key that holds only while its job is pending or running."""
    if span is None:
        return definition.dedupe_for if key is not None else None
    if not isinstance(span, dt.timedelta) or span <= dt.timedelta(0):
        raise ValueError(
            f"Job {definition.name!r}: dedupe_for= must be a timedelta > 0, got {span!r}."
        )
    if key is None:
        raise ValueError(
            f"Job {definition.name!r}: dedupe_for={span!r} needs a dedupe_key= (the key that "
            "is not reused within that span)."
        )
    return span


def resolve_run_at(
    definition: JobDefinition,
    now: dt.datetime,
    run_at: dt.datetime | None,
    delay: dt.timedelta | float | None,
) -> dt.datetime:
    if run_at is not None and delay is not None:
        raise ValueError(f"Job {definition.name!r}: pass run_at= or delay=, not both.")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise ValueError(
                f"Job {definition.name!r}: run_at= must be a datetime, got {run_at!r}."
            )
        if not settings.USE_TZ:  # naive datetimes are local time then, as Django stores them
            return timezone.make_naive(run_at) if timezone.is_aware(run_at) else run_at
        if timezone.is_naive(run_at):
            raise ValueError(
                f"Job {definition.name!r}: run_at= is a naive datetime; pass an aware one "
                "(e.g. django.utils.timezone.now() + timedelta(...))."
            )
        return run_at
    if delay is None:
        return now
    if isinstance(delay, dt.timedelta):
        return now + delay
    if is_finite_number(delay):
        return now + dt.timedelta(seconds=delay)
    raise ValueError(
        f"Job {definition.name!r}: delay= must be a timedelta or a finite number of seconds, "
        f"got {delay!r}."
    )
