"""The admin's searches: any text an operator types gives a list, never a server error.

A search is split into words as Django's admin splits it; every word must match. Each
admin says what a word may match (``Match``), and a word that is longer than every
column it could match matches nothing without asking the database (SQLite refuses LIKE
patterns over 50,000 bytes). Repeated words count once, and a search of more than
``MAX_SEARCH_WORDS`` different words is refused with a message rather than sent to the
database as one condition per word. (A NUL never gets here: Django's search form refuses
it with a message.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from django.contrib import messages
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal

from .live import is_live
from .payload_search import PayloadMatch, PayloadTerm, Unsearchable, search_terms

M = TypeVar("M", bound=Model)

MAX_SEARCH_WORDS = 20
#: A job id: ASCII digits only (``"²".isdigit()`` is true, yet ``int("²")`` raises), and
#: short enough for a 64-bit integer.
_ID = re.compile(r"[0-9]{1,18}", re.ASCII)

#: What one word matches, or None when it can match no row.
Match = Callable[[str], Q | None]


def search_word(bit: str) -> str:
    """A word of a search, its quotes removed as Django's admin search does."""
    if len(bit) >= 2 and bit[0] in "\"'" and bit[0] == bit[-1]:
        return unescape_string_literal(bit)
    return bit


def search_words(term: str) -> list[str]:
    """The different words of a search, in order."""
    words = (search_word(bit) for bit in smart_split(term))
    return list(dict.fromkeys(word for word in words if word))


def as_id(word: str) -> int | None:
    """The job id a word names, if it is one."""
    return int(word) if _ID.fullmatch(word) else None


def fits(word: str, max_length: int) -> bool:
    """Whether a column of ``max_length`` characters can hold (or contain) ``word``."""
    return len(word) <= max_length


def search(
    request: HttpRequest,
    queryset: QuerySet[M],
    term: str,
    match: Match,
    *,
    payload: bool = False,
    also: Match | None = None,
) -> QuerySet[M]:
    """The rows of ``queryset`` that every word of ``term`` matches; with ``payload``, a
    ``key:value`` word matches a value of the payload instead (``payload_search``), or
    what ``also`` says the word matches as typed."""
    words = search_terms(term) if payload else search_words(term)
    if len(words) > MAX_SEARCH_WORDS:
        warn(
            request,
            f"A search can have at most {MAX_SEARCH_WORDS} different words; this one has "
            f"{len(words)}. Search for fewer words.",
        )
        return queryset.none()
    for word in words:
        condition = match(word) if isinstance(word, str) else payload_match(request, word, also)
        if condition is None:
            return queryset.none()
        queryset = queryset.filter(condition)
    return queryset


def payload_match(
    request: HttpRequest, term: PayloadTerm | Unsearchable, also: Match | None = None
) -> Q | None:
    """A ``key:value`` term's condition, or ``also``'s for the word as typed; None (no row)
    for a term too long to search (with a message saying so). A path through an encrypted
    value matches no payload."""
    if isinstance(term, Unsearchable):
        warn(
            request,
            f"The search term {term.term!r} is too long to match a payload value: "
            f"use {term.reason}.",
        )
        return None
    typed = also(term.word) if also is not None else None
    if term.through_encrypted:
        return typed
    payload = Q(PayloadMatch(term))
    return payload if typed is None else payload | typed


def warn(request: HttpRequest, message: str) -> None:
    """A search's warning, on the page load (a live refresh adds no message)."""
    if not is_live(request):
        messages.warning(request, message)
