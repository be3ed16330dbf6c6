"""A job's arguments reach its handler equal to what the caller passed, through a real
enqueue, the database and a run: JSON values whatever their keys (a caller's dict whose
one key looks like a tag included), datetimes, Decimals and UUIDs; rows stored before
keys were escaped still read as they did."""

import datetime as dt
import uuid
import warnings
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_cronqueue import jobs
from django_cronqueue.models import Job
from tests.factories import JobFactory
from tests.payload_values import JSON_TEXT, JSON_VALUES, TAG_LIKE_KEYS, at_fixed_offsets

pytestmark = pytest.mark.django_db

RECEIVED: list[dict] = []


@jobs.job(name="payloads.echo", retries=0)
def echo(**arguments) -> None:
    RECEIVED.append(arguments)


@jobs.job(name="payloads.one", retries=0)
def one(value) -> None:
    RECEIVED.append({"value": value})


@pytest.fixture(autouse=True)
def _clean():
    RECEIVED.clear()


def run(handle, payload: dict) -> dict:
    """``payload`` enqueued, claimed and run: what the handler received."""
    RECEIVED.clear()
    job = jobs.enqueue(handle, payload)
    assert jobs.tick().ran == 1, Job.objects.get(pk=job.pk).last_error
    [received] = RECEIVED
    return received


def test_a_callers_dict_that_looks_like_a_tag_reaches_the_handler_as_that_dict():
    assert run(one, {"value": {"$date": "2026-01-01"}}) == {"value": {"$date": "2026-01-01"}}
    mongo = {"$date": "2026-01-01T00:00:00Z"}  # MongoDB's extended JSON: refused before
    assert run(one, {"value": [mongo]}) == {"value": [mongo]}
    assert run(one, {"value": {"$gt": 5}}) == {"value": {"$gt": 5}}


def test_a_kwargs_handler_whose_payload_looks_like_a_tag_gets_it_as_its_arguments():
    assert run(echo, {"$date": "2026-01-01"}) == {"$date": "2026-01-01"}


def test_the_row_stores_a_callers_dict_with_its_key_escaped_and_a_typed_value_tagged():
    job = one.enqueue(value={"$date": dt.date(2026, 1, 1)})
    assert Job.objects.get(pk=job.pk).payload == {"value": {"$$date": {"$date": "2026-01-01"}}}
    assert jobs.tick().ran == 1
    assert RECEIVED[0] == {"value": {"$date": dt.date(2026, 1, 1)}}


MIXED = {
    "value": {"mine": {"$date": "2026-01-01"}, "typed": dt.date(2026, 1, 1), "q": [{"$gt": 5}]}
}


def upstream_job():
    return one.enqueue(value="upstream")


WAYS = {
    "jobs.enqueue": lambda: jobs.enqueue(one, MIXED),
    "handle.enqueue": lambda: one.enqueue(**MIXED),
    "using().enqueue": lambda: one.using(priority=3).enqueue(**MIXED),
    "enqueue_many": lambda: jobs.enqueue_many(one, [MIXED]),
    "chain": lambda: jobs.chain(one.s(**MIXED)).enqueue(),
    "group then": lambda: jobs.group([one.s(**MIXED)]).then(one.s(**MIXED)).enqueue(),
    "using(after=)": lambda: one.using(after=[upstream_job()]).enqueue(**MIXED),
}
ON_COMMIT = {
    "jobs.enqueue_on_commit": lambda: jobs.enqueue_on_commit(one, MIXED),
    "handle.enqueue_on_commit": lambda: one.enqueue_on_commit(**MIXED),
    "using(after=).enqueue_on_commit": lambda: one.using(after=[upstream_job()]).enqueue_on_commit(
        **MIXED
    ),
    "chain.enqueue_on_commit": lambda: jobs.chain(one.s(**MIXED)).enqueue_on_commit(),
}


def received_values():
    for _ in range(3):  # a workflow's later jobs wait for the earlier ones
        jobs.tick()
    return [item["value"] for item in RECEIVED if item["value"] != "upstream"]


@pytest.mark.parametrize("way", WAYS)
def test_every_way_to_enqueue_delivers_the_arguments_as_passed(way):
    """A payload is encoded once, however often it is checked (a signature, then its row)."""
    WAYS[way]()
    received = received_values()
    assert received and all(value == MIXED["value"] for value in received), received


@pytest.mark.parametrize("way", ON_COMMIT)
def test_every_way_to_enqueue_at_commit_delivers_the_arguments_as_passed(
    way, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ON_COMMIT[way]()
    received = received_values()
    assert received and all(value == MIXED["value"] for value in received), received


def test_a_dynamic_schedule_edited_and_run_delivers_the_arguments_as_passed():
    from django_cronqueue.models import CronSchedule

    schedule = CronSchedule.objects.create_dynamic(
        name="payloads.dynamic", job=one, payload=MIXED, expression="0 8 * * *", tz="UTC"
    )
    schedule.edit(expression="0 9 * * *")
    schedule.refresh_from_db()
    schedule.edit(priority=4)
    schedule.run_now()
    assert received_values() == [MIXED["value"]]


def test_rows_stored_before_keys_were_escaped_still_run_as_they_did():
    JobFactory(name="payloads.one", payload={"value": {"$date": "2026-01-01"}})
    JobFactory(name="payloads.one", payload={"value": {"$gt": 5}})
    assert jobs.tick().ran == 2
    assert sorted(RECEIVED, key=repr) == [{"value": dt.date(2026, 1, 1)}, {"value": {"$gt": 5}}]


def test_an_aware_datetime_in_a_named_zone_comes_back_at_its_fixed_offset():
    paris = dt.datetime(2026, 7, 1, 14, 0, tzinfo=ZoneInfo("Europe/Paris"))
    [back] = run(one, {"value": paris}).values()
    assert back == paris
    assert back.tzinfo == dt.timezone(dt.timedelta(hours=2))


def test_a_float_postgresql_would_read_as_another_number_is_refused_naming_the_key():
    with pytest.raises(jobs.InvalidPayload, match=r"'value' holds the float 1e\+23.*Decimal"):
        one.enqueue(value=1e23)
    assert run(one, {"value": [1e16, 1.5e17, 0.1, -0.0]}) == {"value": [1e16, 1.5e17, 0.1, 0.0]}
    assert run(one, {"value": Decimal("1E+23")}) == {"value": Decimal("1E+23")}


DOCUMENTED_REFUSALS = ("PostgreSQL would give back", "levels deep")


def run_or_refusal(handle, payload: dict) -> tuple[dict | None, str]:
    """What the handler received, or None and why the enqueue refused the payload. A naive
    datetime is accepted with a RuntimeWarning under USE_TZ (tested on its own): here it
    must round-trip like the rest."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*naive datetime", RuntimeWarning)
            return run(handle, payload), ""
    except jobs.InvalidPayload as error:
        return None, str(error)


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(st.dictionaries(JSON_TEXT | TAG_LIKE_KEYS, JSON_VALUES, max_size=4))
def test_any_json_payload_reaches_a_kwargs_handler_equal(payload):
    received, refusal = run_or_refusal(echo, payload)
    if refusal:
        assert any(reason in refusal for reason in DOCUMENTED_REFUSALS), refusal
    else:
        assert received == payload


TYPED = st.recursive(
    JSON_VALUES
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.dates()
    | st.times()
    | st.timedeltas()
    | st.decimals(allow_nan=False)
    | st.uuids(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(JSON_TEXT | TAG_LIKE_KEYS, children, max_size=3)
    ),
    max_leaves=8,
)


@SETTINGS
@given(TYPED)
def test_any_mix_of_json_and_typed_values_reaches_the_handler_equal(value):
    received, refusal = run_or_refusal(one, {"value": value})
    if refusal:
        assert any(reason in refusal for reason in DOCUMENTED_REFUSALS), refusal
    else:
        assert received == {"value": at_fixed_offsets(value)}


def test_uuid_and_decimal_keep_their_type_and_digits():
    key = uuid.UUID(int=42)
    [back] = run(one, {"value": [key, Decimal("12.50")]}).values()
    assert back == [key, Decimal("12.50")]
    assert str(back[1]) == "12.50"
