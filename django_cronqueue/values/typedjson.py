"""Argument values JSON has no type for, kept in a job's stored payload as tagged objects.

``datetime``, ``date``, ``time``, ``timedelta``, ``Decimal`` and ``UUID`` (also inside lists
and dicts) are written as one-key objects that read well in the admin::

    {"since": {"$datetime": "2026-03-01T09:30:00+00:00"}, "amount": {"$decimal": "12.50"}}

and come back as the same type and value. A caller's own one-key dict whose key starts
with ``$`` (``{"$date": "2026-01-01"}``, MongoDB's ``{"$gt": 5}``) is stored with one more
``$`` (``{"$$date": ...}``) and comes back as it was passed: only a tag the encoder wrote
is read as a typed value, whatever tags a later version adds. ``encode`` runs at enqueue;
``decode_payload`` before the handler is called, and only for a payload whose JSON text
``may_hold_tags``: a payload without tagged values is not walked at all. The payload
itself (the keyword arguments) is never a tag: only its values are encoded.

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


ESCAPE = "$"  # the first character of a tag, doubled to escape a caller's key


def may_hold_tags(text: str) -> bool:
    """False when a payload's JSON text surely holds no tagged value: one substring scan.
    (True also for a string that starts with ``$``: the walk then finds nothing.)"""
    return '"$' in text


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` with every typed value replaced by its tagged object, and every one-key
    dict whose key starts with ``$`` escaped; the same object when nothing changed."""
    if isinstance(value, TYPES):
        for tag, (kind, to_text, _) in CODECS.items():
            if isinstance(value, kind):
                return {tag: to_text(value)}
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        items = {key: encode(item, depth + 1) for key, item in value.items()}
        if len(items) == 1:
            [(key, item)] = items.items()
            if isinstance(key, str) and key.startswith(ESCAPE):
                return {ESCAPE + key: item}
        same = all(items[key] is item for key, item in value.items())
        return value if same else items
    if isinstance(value, (list, tuple)):
        encoded = [encode(item, depth + 1) for item in value]
        same = all(new is old for new, old in zip(encoded, value, strict=True))
        return value if same else encoded
    return value


def decode_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a stored payload, each value decoded. Raises ValueError
    naming the key for a tag whose text does not read as its type (written by hand)."""
    decoded = {}
    for key, value in payload.items():
        try:
            decoded[key] = decode(value)
        except ValueError as exc:
            raise ValueError(f"payload key {key!r} {exc}") from None
    return decoded


def decode(value: Any) -> Any:
    """``value`` with every tagged object replaced by its typed value and every escaped
    key given back its own name. Rows written before keys were escaped decode too: there,
    a one-key dict whose key was a tag was a tag (the encoder refused any other)."""
    if isinstance(value, dict):
        if len(value) == 1:
            [(key, item)] = value.items()
            if isinstance(key, str) and key.startswith(ESCAPE + ESCAPE):
                return {key[1:]: decode(item)}
            codec = CODECS.get(key)
            if codec is not None and isinstance(item, str):
                return _typed(key, item, codec[0], codec[2])
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def _typed(tag: str, text: str, kind: type, from_text: Callable[[str], Any]) -> Any:
    try:
        return from_text(text)
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(
            f"holds {{{tag!r}: {text!r}}}, which reads as a tagged {kind.__name__} but is not "
            f"one ({exc})"
        ) from None
