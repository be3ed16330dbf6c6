"""How the job list's search reads ``key:value`` terms (no database)."""

from __future__ import annotations

import pytest

from django_cronqueue.admin.payload_search import (
    MAX_PATH_KEYS,
    MAX_VALUE_CHARS,
    PayloadTerm,
    Unsearchable,
    candidates_of,
    jsonpath_of,
    parse_term,
    search_terms,
    sqlite_paths,
)


@pytest.mark.parametrize(
    ("bit", "expected"),
    [
        ("order.id:42", PayloadTerm(("order", "id"), "42", number="42")),
        ("id:-4.5e3", PayloadTerm(("id",), "-4.5e3", number="-4.5e3")),
        ("id:042", PayloadTerm(("id",), "042")),  # no JSON number: a string only
        ("id:1e999", PayloadTerm(("id",), "1e999")),  # no finite number
        ('id:"42"', PayloadTerm(("id",), "42")),  # quoted: a string only
        ('city:"New York"', PayloadTerm(("city",), "New York")),
        ("city:'New York'", PayloadTerm(("city",), "New York")),
        ("flag:true", PayloadTerm(("flag",), "true", literal="true")),
        ("note:null", PayloadTerm(("note",), "null", literal="null")),
        ("flag:True", PayloadTerm(("flag",), "True")),
        ("url:http://x:8", PayloadTerm(("url",), "http://x:8")),  # the first colon splits
        ("$encrypted:x", PayloadTerm(("$encrypted",), "x")),
        ("é.ß:naïve", PayloadTerm(("é", "ß"), "naïve")),
    ],
)
def test_key_value_terms(bit, expected):
    assert parse_term(bit) == expected


@pytest.mark.parametrize(
    ("bit", "word"),
    [
        ("TimeoutError:", "TimeoutError:"),  # no value
        (":42", ":42"),  # no key
        (":", ":"),
        ("a..b:1", "a..b:1"),  # an empty key
        ("a.:1", "a.:1"),
        ('"order.id:42"', "order.id:42"),  # quoted whole
        ("'a:b'", "a:b"),
        ("plain", "plain"),
        ('a"b:1', 'a"b:1'),  # a quote in a key
        ("a\\b:1", "a\\b:1"),
    ],
)
def test_plain_words(bit, word):
    assert parse_term(bit) == word


def test_paths_through_an_encrypted_value():
    assert parse_term("card.$encrypted:x").through_encrypted
    assert not parse_term("card.encrypted:x").through_encrypted


def test_terms_too_long_or_too_deep_are_unsearchable():
    deep = ".".join(["k"] * (MAX_PATH_KEYS + 1)) + ":1"
    assert isinstance(parse_term(deep), Unsearchable)
    assert isinstance(parse_term("k" * 201 + ":1"), Unsearchable)
    long_value = parse_term("k:" + "v" * (MAX_VALUE_CHARS + 1))
    assert isinstance(long_value, Unsearchable)
    assert len(long_value.term) == 60
    assert isinstance(parse_term("k:" + "v" * MAX_VALUE_CHARS), PayloadTerm)


def test_search_terms_split_like_the_admin_and_count_each_term_once():
    assert search_terms('a:1 shop a:1 city:"New York" "x y"') == [
        PayloadTerm(("a",), "1", number="1"),
        "shop",
        PayloadTerm(("city",), "New York"),
        "x y",
    ]
    assert search_terms('  ""  ') == []


def test_postgresql_jsonpath_quotes_keys_and_strings():
    assert jsonpath_of(parse_term("order.id:42")) == '$."order"."id" ? (@ == "42" || @ == 42)'
    assert jsonpath_of(parse_term("a$b:true")) == '$."a$b" ? (@ == "true" || @ == true)'
    assert jsonpath_of(parse_term('k:"say \\"hi\\""')) == r'$."k" ? (@ == "say \"hi\"")'


def test_mariadb_candidates_nest_the_path():
    assert candidates_of(parse_term("order.id:42")) == [
        '{"order": {"id": "42"}}',
        '{"order": {"id": 42}}',
    ]
    assert candidates_of(parse_term("n:null")) == ['{"n": "null"}', '{"n": null}']


def test_sqlite_also_looks_for_a_key_as_django_stores_it():
    assert sqlite_paths("order") == ['$."order"']
    assert sqlite_paths("é") == ['$."é"', '$."\\u00e9"']
