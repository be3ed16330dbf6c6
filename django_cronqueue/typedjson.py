"""Argument values JSON has no type for, kept in a job's stored payload as tagged objects.

``datetime``, ``date``, ``time``, ``timedelta``, ``Decimal`` and ``UUID`` (also inside lists
and dicts) are written as one-key objects that read well in the admin::

    {"since": {"$datetime": "2026-03-01T09:30:00+00:00"}, "amount": {"$decimal": "12.50"}}

and come back as the same type and value. ``encode`` runs at enqueue; ``decode`` before the
handler is called, and only for a payload whose JSON text ``may_hold_tags``: a payload
without tagged values is not walked at all.

Pure: no Django models, no database.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

from django.utils.dateparse import parse_duration
from django.utils.duration import duration_iso_string

# How many levels ``encode`` walks: past that the value is left as it is, and the JSON
# checks report it (databases take at most 31 levels; a circular value never ends).
MAX_DEPTH = 64


def _timedelta(text: str) -> dt.timedelta:
    value = parse_duration(text)
    if value is None:
        raise ValueError(f"{text!r} is not an ISO 8601 duration")
    return value


# tag -> (type, to text, from text). datetime before date: a datetime is a date.
CODECS: dict[str, tuple[type, Callable[[Any], str], Callable[[str], Any]]] = {
    "$datetime": (dt.datetime, dt.datetime.isoformat, dt.datetime.fromisoformat),
    "$date": (dt.date, dt.date.isoformat, dt.date.fromisoformat),
    "$time": (dt.time, dt.time.isoformat, dt.time.fromisoformat),
    "$timedelta": (dt.timedelta, duration_iso_string, _timedelta),
    "$decimal": (decimal.Decimal, str, decimal.Decimal),
    "$uuid": (uuid.UUID, str, uuid.UUID),
}
TYPES = tuple(codec[0] for codec in CODECS.values())


def may_hold_tags(text: str) -> bool:
    """False when a payload's JSON text surely holds no tagged value: one substring scan.
    (True also for a string that starts with ``$``: the walk then finds nothing.)"""
    return '"$' in text


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` with every typed value replaced by its tagged object; the same object
    when nothing was replaced. Raises ValueError for a one-key object whose key is a tag
    but whose value does not read as that type (it would not come back as written)."""
    if isinstance(value, TYPES):
        for tag, (kind, to_text, _) in CODECS.items():
            if isinstance(value, kind):
                return {tag: to_text(value)}
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        if len(value) == 1:
            _check_tagged(value)
        items = {key: encode(item, depth + 1) for key, item in value.items()}
        same = all(items[key] is item for key, item in value.items())
        return value if same else items
    if isinstance(value, (list, tuple)):
        encoded = [encode(item, depth + 1) for item in value]
        same = all(new is old for new, old in zip(encoded, value, strict=True))
        return value if same else encoded
    return value


def _check_tagged(value: dict[Any, Any]) -> None:
    [(key, text)] = value.items()
    codec = CODECS.get(key) if isinstance(key, str) else None
    if codec is None or not isinstance(text, str):  # not read as a tag: stays a dict
        return
    try:
        codec[2](text)
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(
            f"holds {{{key!r}: {text!r}}}, which reads as a tagged {codec[0].__name__} but is "
            f"not one ({exc}); pass the {codec[0].__name__} itself"
        ) from None


def decode(value: Any) -> Any:
    """``value`` with every tagged object replaced by its typed value."""
    if isinstance(value, dict):
        if len(value) == 1:
            [(key, text)] = value.items()
            codec = CODECS.get(key)
            if codec is not None and isinstance(text, str):
                return codec[2](text)
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value
