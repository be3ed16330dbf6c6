"""``key:value`` terms of the job list's search, matched against the payload's values.

A term is a path of keys joined by dots (``order.id``), a colon and a value. It matches a
job whose payload holds that value at that path; a list on the way or at the end matches
when one of its elements does. An unquoted value that is a JSON number matches that number
or the same text as a string (``id:42`` matches ``42`` and ``"42"``); ``true``, ``false``
and ``null`` likewise match the JSON literal or the string. A quoted value
(``key:"two words"``, ``id:"42"``) matches that string only. Matches are exact and
case-sensitive, so that PostgreSQL answers them from its GIN index on the payload.

A word without a key or a value (``TimeoutError:``, ``:42``), a key with an empty part,
whitespace, a quote or a backslash, and a word quoted whole (``"a:b"``) are plain words, searched
as before. A path through ``$encrypted`` matches nothing: encrypted values never match.

Each vendor has its own condition, all with the path and value as parameters:
PostgreSQL ``payload @? jsonpath`` (lax mode steps into lists; the index answers it),
MariaDB ``JSON_CONTAINS`` of a candidate document (a list contains what one element
contains), SQLite nested ``json_each`` over each key's value or list.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import BooleanField, F, Func
from django.utils.text import smart_split, unescape_string_literal

#: How deep a path may go, how long a key and a value may be: longer terms get a message.
MAX_PATH_KEYS = 8
MAX_KEY_CHARS = 200
MAX_VALUE_CHARS = 1000
#: The key of an encrypted value's object (section "Sensitive arguments").
ENCRYPTED_KEY = "$encrypted"
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
_BAD_KEY_CHAR = re.compile(r"[\s\"'\\\x00-\x1f\x7f]")
_LITERALS = {"true": True, "false": False, "null": None}


@dataclass(frozen=True)
class PayloadTerm:
    """A ``key:value`` term: the keys of its path, and the JSON values it matches."""

    path: tuple[str, ...]
    text: str
    #: The JSON number an unquoted numeric value also matches, as typed.
    number: str | None = None
    #: ``"true"``, ``"false"`` or ``"null"``: the JSON literal an unquoted value also matches.
    literal: str | None = None
    #: The term as typed (a dedupe key may look like one: ``invoice:7731``).
    word: str = field(default="", compare=False)

    @property
    def through_encrypted(self) -> bool:
        return ENCRYPTED_KEY in self.path


@dataclass(frozen=True)
class Unsearchable:
    """A ``key:value`` term too long or too deep to search; ``reason`` says so."""

    term: str
    reason: str


Term = str | PayloadTerm | Unsearchable


def _is_quoted(bit: str) -> bool:
    return len(bit) >= 2 and bit[0] in "\"'" and bit[0] == bit[-1]


def _unquoted(bit: str) -> str:
    return unescape_string_literal(bit) if _is_quoted(bit) else bit


def parse_term(bit: str) -> Term:
    """One word of a search, as ``smart_split`` gives it: a plain word (``str``, its
    quotes removed), a ``PayloadTerm`` or an ``Unsearchable`` term."""
    if _is_quoted(bit):
        return unescape_string_literal(bit)
    key, colon, raw_value = bit.partition(":")
    keys = tuple(key.split("."))
    if not colon or not raw_value or any(not k or _BAD_KEY_CHAR.search(k) for k in keys):
        return bit
    shown = bit if len(bit) <= 60 else bit[:57] + "..."
    if len(keys) > MAX_PATH_KEYS or any(len(k) > MAX_KEY_CHARS for k in keys):
        reason = f"a path of at most {MAX_PATH_KEYS} keys of {MAX_KEY_CHARS} characters"
        return Unsearchable(shown, reason)
    value = _unquoted(raw_value)
    if len(value) > MAX_VALUE_CHARS:
        return Unsearchable(shown, f"a value of at most {MAX_VALUE_CHARS:,} characters")
    if _is_quoted(raw_value):
        return PayloadTerm(keys, value, word=bit)
    number = value if _JSON_NUMBER.fullmatch(value) and math.isfinite(float(value)) else None
    literal = value if value in _LITERALS else None
    return PayloadTerm(keys, value, number, literal, word=bit)


def search_terms(term: str) -> list[Term]:
    """The different terms of a search, in order (empty words dropped)."""
    terms = (parse_term(bit) for bit in smart_split(term))
    return list(dict.fromkeys(t for t in terms if t != ""))


# -- the conditions, one per vendor


def jsonpath_of(term: PayloadTerm) -> str:
    """PostgreSQL: ``$."a"."b" ? (@ == "v" || @ == 42)``, every key and string quoted."""
    keys = "".join("." + json.dumps(key, ensure_ascii=False) for key in term.path)
    values = [json.dumps(term.text, ensure_ascii=False)]
    values += [typed for typed in (term.number, term.literal) if typed is not None]
    return "$" + keys + " ? (" + " || ".join(f"@ == {value}" for value in values) + ")"


def candidates_of(term: PayloadTerm) -> list[str]:
    """MariaDB: the documents ``JSON_CONTAINS`` looks for, one per JSON value matched."""
    leaves: list[Any] = [term.text]
    if term.number is not None:
        leaves.append(json.loads(term.number))
    if term.literal is not None:
        leaves.append(_LITERALS[term.literal])
    documents = []
    for leaf in leaves:
        document = leaf
        for key in reversed(term.path):
            document = {key: document}
        documents.append(json.dumps(document))
    return documents


def sqlite_paths(key: str) -> list[str]:
    """SQLite's paths to ``key``: as typed, and as Django's JSON encoder stores a key that
    is not ASCII (``"\\u00e9"``), which SQLite 3.40 compares without decoding. Keys hold
    no quote or backslash (``parse_term``)."""
    escaped = json.dumps(key)[1:-1]
    return ['$."' + key + '"'] + (['$."' + escaped + '"'] if escaped != key else [])


def sqlite_key(col: str, key: str) -> tuple[str, list[str]]:
    """The path (an SQL expression) to ``key`` in the JSON ``col``."""
    paths = sqlite_paths(key)
    if len(paths) == 1:
        return "%s", paths
    return f"(CASE WHEN json_type({col}, %s) IS NULL THEN %s ELSE %s END)", [paths[0], *paths[::-1]]


class PayloadMatch(Func):
    """Whether a job's payload holds ``term``'s value at its path (see the module)."""

    output_field = BooleanField()

    def __init__(self, term: PayloadTerm) -> None:
        super().__init__(F("payload"))
        self.term = term

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        col = self.column(compiler)
        return f"({col} @? %s::jsonpath)", (jsonpath_of(self.term),)

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        col = self.column(compiler)
        documents = candidates_of(self.term)
        sql = " OR ".join([f"JSON_CONTAINS({col}, %s)"] * len(documents))
        return f"({sql})", tuple(documents)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        col = self.column(compiler)
        sources, params = [], []
        for depth, key in enumerate(self.term.path):
            alias = f"cq_key{depth}"
            path, path_params = sqlite_key(col, key)
            sources.append(
                f"json_each(CASE json_type({col}, {path}) WHEN 'array' THEN "
                f"json_extract({col}, {path}) ELSE json_array(json_extract({col}, {path})) END) "
                f"AS {alias}"
            )
            params += path_params * 3
            parent = col
            col = f"(CASE WHEN {alias}.type = 'object' THEN {alias}.value END)"
        # A list's elements carry their own type; a single value (true is 1 once
        # extracted) is typed by json_type, which also tells a missing key (NULL).
        typed = (
            f"(CASE json_type({parent}, {path}) WHEN 'array' THEN {alias}.type "
            f"ELSE json_type({parent}, {path}) END)"
        )
        conditions = [f"({typed} = 'text' AND {alias}.value = %s)"]
        params += [*path_params, *path_params, self.term.text]
        if self.term.number is not None:
            conditions.append(f"({typed} IN ('integer', 'real') AND {alias}.value = %s)")
            params += [*path_params, *path_params, json.loads(self.term.number)]
        if self.term.literal is not None:
            conditions.append(f"({typed} = %s)")
            params += [*path_params, *path_params, self.term.literal]
        where = " OR ".join(conditions)
        sources_sql = ", ".join(sources)
        return f"EXISTS (SELECT 1 FROM {sources_sql} WHERE {where})", tuple(params)

    def column(self, compiler: Any) -> str:
        """The payload column's SQL (a column reference: no parameters)."""
        col, params = compiler.compile(self.source_expressions[0])
        assert not params, params
        return str(col)
