"""django_cronqueue.values.typedjson: datetime, Decimal, UUID... through a job's JSON payload."""

import datetime as dt
import json
import uuid
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_cronqueue.values import typedjson
from tests.payload_values import JSON_VALUES, at_fixed_offsets

VALUES = [
    dt.datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=dt.timezone.utc),
    dt.datetime(2026, 7, 1, 14, 0, tzinfo=ZoneInfo("Europe/Paris")),
    dt.datetime(2026, 3, 1, 9, 30),  # naive stays naive
    dt.date(2026, 2, 28),
    dt.time(23, 59, 59, 999999),
    dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    dt.timedelta(days=-3, seconds=5, microseconds=7),
    dt.timedelta(0),
    Decimal("12.50"),
    Decimal("-1E+30"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
]


def through_json(value):
    return typedjson.decode(json.loads(json.dumps(typedjson.encode(value))))


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_type_comes_back_as_itself(value):
    back = through_json(value)
    assert type(back) is type(value)
    assert back == value
    assert str(back) == str(value)  # Decimal("12.50") keeps its digits, a date is not a datetime


def test_values_inside_lists_and_dicts_come_back_too():
    payload = {"a": [VALUES[0], {"b": VALUES[8], "c": [VALUES[10]]}], "d": 1, "e": "x"}
    assert through_json(payload) == payload


def test_the_stored_form_reads_well():
    stored = typedjson.encode({"since": VALUES[0], "amount": Decimal("12.50")})
    assert json.dumps(stored) == (
        '{"since": {"$datetime": "2026-03-01T09:30:15.123456+00:00"}, '
        '"amount": {"$decimal": "12.50"}}'
    )


def test_plain_json_is_left_as_it_is_and_its_text_is_never_walked():
    payload = {"a": [1, {"b": "x"}], "c": None}
    assert typedjson.encode(payload) is payload
    assert not typedjson.may_hold_tags(json.dumps(payload))
    assert typedjson.may_hold_tags(json.dumps(typedjson.encode({"a": [VALUES[3]]})))


def test_a_string_starting_with_a_dollar_is_not_a_tag():
    payload = {"price": "$5", "tags": {"$x": "y"}, "two": {"$date": "2026-01-01", "b": 1}}
    assert typedjson.may_hold_tags(json.dumps(payload))  # a false alarm only costs a walk
    assert typedjson.decode(payload) == payload


def test_a_callers_dict_that_looks_like_a_tag_comes_back_as_that_dict():
    for mine in (
        {"$date": "2026-01-01"},
        {"$date": "2026-01-01T00:00:00Z"},  # MongoDB's extended JSON: not a date here
        {"$uuid": "3"},
        {"$gt": 5},
        {"$$date": "2026-01-01"},
        {"$": None},
        {"$date": {"$date": dt.date(2026, 1, 1)}},
    ):
        stored = json.loads(json.dumps(typedjson.encode(mine)))
        assert typedjson.decode(stored) == mine, stored
    assert typedjson.encode({"$date": "2026-01-01"}) == {"$$date": "2026-01-01"}
    two_keys = {"$date": "2026-01-01", "b": 1}  # never a tag: stored as it is
    assert typedjson.encode(two_keys) is two_keys


def test_the_payload_itself_is_never_a_tag():
    """Its keys are keyword arguments, a ``**kwargs`` handler's too."""
    payload = {"$date": "2026-01-01"}
    assert typedjson.decode_payload(payload) == payload


def test_rows_stored_before_keys_were_escaped_still_decode():
    """Then a one-key dict whose key was a tag held a valid tag (the encoder refused any
    other), and a caller's other one-key dicts were stored as they were."""
    assert typedjson.decode({"$date": "2026-01-01"}) == dt.date(2026, 1, 1)
    assert typedjson.decode({"$gt": 5}) == {"$gt": 5}
    assert typedjson.decode({"$uuid": 3}) == {"$uuid": 3}  # not a string: not a tag


def test_a_tag_written_by_hand_that_is_not_valid_names_its_key():
    with pytest.raises(ValueError, match=r"payload key 'when' holds .*reads as a tagged date"):
        typedjson.decode_payload({"when": {"$date": "yesterday"}})


@given(
    st.recursive(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(),
            st.datetimes(timezones=st.none() | st.timezones()),
            st.dates(),
            st.times(),
            st.timedeltas(),
            st.decimals(allow_nan=False),
            st.uuids(),
        ),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=20,
    )
)
def test_any_mix_round_trips(value):
    back = through_json(value)
    assert back == at_fixed_offsets(value)
    assert repr(back).count("datetime.date(") == repr(value).count("datetime.date(")


@given(JSON_VALUES)
def test_any_json_value_comes_back_equal(value):
    assert through_json(value) == value
