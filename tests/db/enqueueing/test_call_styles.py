"""Calling a job the way Celery users do: positional arguments, jobs.enqueue(handle,
**kwargs), .delay/.apply_async pointing at enqueue, datetime/Decimal/UUID arguments that
reach the handler as themselves, and aenqueue/acancel in async code."""

import asyncio
import datetime as dt
import uuid
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job
from django_cronqueue.values import typedjson
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db

RECEIVED: list[dict] = []


@jobs.job(name="calls.sync_account", retries=0)
def sync_account(account_id: int, since: dt.datetime, *, note: str = "") -> None:
    RECEIVED.append({"account_id": account_id, "since": since, "note": note})


@jobs.job(name="calls.anything", retries=0)
def anything(first, **rest) -> None:
    RECEIVED.append({"first": first, **rest})


@jobs.job(name="calls.positional_only", retries=0)
def positional_only(a, /, b) -> None: ...


@jobs.job(name="calls.star_args", retries=0)
def star_args(*values) -> None: ...


@pytest.fixture(autouse=True)
def _clean():
    RECEIVED.clear()


NOW = dt.datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=dt.timezone.utc)


# --- positional arguments -----------------------------------------------------------


def test_positional_arguments_bind_to_the_handlers_parameters_and_are_stored_by_name():
    job = sync_account.enqueue(42, NOW, note="x")
    assert job.payload == {"account_id": 42, "since": {"$datetime": NOW.isoformat()}, "note": "x"}
    jobs.tick()
    assert RECEIVED == [{"account_id": 42, "since": NOW, "note": "x"}]


def test_positional_arguments_work_with_using_s_and_kwargs_handlers():
    job = sync_account.using(priority=5).enqueue(1, since=NOW)
    assert (job.priority, job.payload["account_id"]) == (5, 1)
    assert sync_account.s(7, NOW).payload["account_id"] == 7
    assert anything.enqueue(1, a=2).payload == {"first": 1, "a": 2}


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda: sync_account.enqueue(1, NOW, "third"), "too many positional arguments"),
        (lambda: sync_account.enqueue(1, account_id=2, since=NOW), "multiple values"),
        (lambda: positional_only.enqueue(1, b=2), "positional-only or *args"),
        (lambda: star_args.enqueue(1, 2), "positional-only or *args"),
    ],
)
def test_a_wrong_call_raises_type_error_naming_the_job_and_the_signature(call, problem):
    with pytest.raises(TypeError) as excinfo:
        call()
    message = str(excinfo.value)
    assert problem in message
    assert "Job 'calls." in message and "(" in message
    assert not Job.objects.exists()


def test_the_message_of_a_wrong_call_shows_the_signature():
    with pytest.raises(TypeError, match=r"too many") as excinfo:
        sync_account.enqueue(1, NOW, "third")
    assert str(excinfo.value) == (
        "Job 'calls.sync_account' "
        "(tests.db.enqueueing.test_call_styles.sync_account(account_id: int, "
        "since: datetime.datetime, *, note: str = '') -> None): too many positional arguments."
    )


def test_a_missing_argument_is_refused_with_the_signature():
    with pytest.raises(TypeError, match=r"'since' is missing; .*sync_account\(account_id"):
        sync_account.enqueue(1)


def test_a_cron_schedule_takes_no_arguments():
    handle = jobs.cron("0 3 * * *", name="calls.nightly")(lambda run: None)
    try:
        with pytest.raises(TypeError, match="cron schedule: its enqueue"):
            handle.enqueue(1)
    finally:
        registry.unregister("calls.nightly")


# --- jobs.enqueue(handle, **kwargs), .delay and .apply_async -------------------------


def test_jobs_enqueue_takes_keyword_arguments():
    job = jobs.enqueue(sync_account, account_id=3, since=NOW)
    assert job.payload["account_id"] == 3
    job = jobs.enqueue("calls.sync_account", account_id=4, since=NOW)
    assert job.payload["account_id"] == 4


def test_jobs_enqueue_refuses_a_payload_and_keyword_arguments_together():
    with pytest.raises(TypeError, match=r"got a payload dict and keyword arguments \(since\)"):
        jobs.enqueue(sync_account, {"account_id": 3}, since=NOW)


@pytest.mark.parametrize("celery_name", ["delay", "apply_async"])
def test_delay_and_apply_async_name_enqueue(celery_name):
    with pytest.raises(AttributeError, match=r"sync_account\.enqueue\(\.\.\.\)"):
        getattr(sync_account, celery_name)
    assert not hasattr(sync_account, celery_name)


# --- typed values -------------------------------------------------------------------

TYPED = {
    "at": NOW,
    "day": dt.date(2026, 2, 28),
    "clock": dt.time(8, 15, 0, 5),
    "span": dt.timedelta(days=1, microseconds=3),
    "amount": Decimal("12.50"),
    "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
}


def test_typed_values_reach_the_handler_as_the_same_type_and_value():
    nested = {"list": list(TYPED.values()), "dict": dict(TYPED)}
    anything.enqueue(first=TYPED["amount"], **TYPED, nested=nested)
    jobs.tick()
    [got] = RECEIVED
    for key, value in TYPED.items():
        assert type(got[key]) is type(value) and got[key] == value
    assert got["first"] == Decimal("12.50") and str(got["first"]) == "12.50"
    assert got["nested"] == nested
    assert [type(v) for v in got["nested"]["list"]] == [type(v) for v in TYPED.values()]


def test_typed_values_are_readable_in_the_admin(admin_client):
    job = anything.enqueue(first=TYPED["amount"], at=NOW)
    response = admin_client.get(reverse("admin:django_cronqueue_job_change", args=[job.pk]))
    assert "&quot;$decimal&quot;: &quot;12.50&quot;" in response.text
    assert "2026-03-01T09:30:15.123456+00:00" in response.text


def test_a_naive_datetime_is_warned_of_while_time_zone_support_is_active(settings):
    naive = dt.datetime(2026, 3, 1, 9, 30)
    settings.USE_TZ = True
    with pytest.warns(RuntimeWarning) as caught:
        anything.enqueue(1, when=naive, nested={"runs": [NOW, naive]})
    assert [str(warning.message) for warning in caught] == [
        f"Job 'calls.anything': payload key {path!r} received a naive datetime "
        "(2026-03-01 09:30:00) while time zone support is active; pass an aware one "
        "(django.utils.timezone.now(), or timezone.make_aware(value))."
        for path in ("when", "nested.runs[1]")
    ]
    assert {warning.filename for warning in caught} == {__file__}  # the enqueueing line
    jobs.tick()
    assert RECEIVED[0]["when"] == naive  # accepted, as Django's model fields accept it


def test_a_naive_datetime_is_not_warned_of_without_time_zone_support(settings, recwarn):
    settings.USE_TZ = False
    sync_account.enqueue(1, dt.datetime(2026, 3, 1, 9, 30))
    sync_account.using(priority=1).enqueue_many([{"account_id": 2, "since": NOW}])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_naive_datetime_is_warned_of_on_every_way_in(settings):
    settings.USE_TZ = True
    naive = dt.datetime(2026, 3, 1, 9, 30)
    calls = [
        lambda: jobs.enqueue(sync_account, {"account_id": 1, "since": naive}),
        lambda: sync_account.enqueue_many([{"account_id": 1, "since": naive}]),
        lambda: sync_account.s(1, naive),
        lambda: sync_account.enqueue_on_commit(1, naive),
    ]
    for call in calls:
        with pytest.warns(RuntimeWarning, match="payload key 'since' received a naive"):
            call()


def test_a_model_instance_is_still_refused():
    note = Note.objects.create(text="n")
    with pytest.raises(jobs.InvalidPayload, match=r"holds a Note .*an id instead of a model"):
        anything.enqueue(first=note)


def test_the_testing_helpers_compare_typed_values():
    from django_cronqueue import testing

    sync_account.enqueue(5, NOW)
    testing.assert_enqueued(sync_account, {"since": NOW})


def test_a_payload_without_typed_values_is_never_decoded(monkeypatch):
    def refuse(value):
        raise AssertionError("decoded a payload that holds no tagged value")

    monkeypatch.setattr(typedjson, "decode", refuse)
    anything.enqueue(1, a=[1, {"b": "c"}], price="5$")
    assert jobs.tick().ran == 1
    assert RECEIVED == [{"first": 1, "a": [1, {"b": "c"}], "price": "5$"}]


# --- async --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_aenqueue_and_acancel_in_async_code():
    async def view():
        first = await sync_account.aenqueue(1, since=NOW)
        second = await jobs.aenqueue(sync_account, {"account_id": 2, "since": NOW})
        third = await sync_account.using(priority=3).aenqueue(3, NOW)
        cancelled = await jobs.acancel(second, "not needed")
        await sync_to_async(connections.close_all)()  # the connection of sync_to_async's thread
        return first, second, third, cancelled

    first, second, third, cancelled = asyncio.run(view())
    assert cancelled and cancelled.outcome == "cancelled"
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {first.pk: "pending", second.pk: "cancelled", third.pk: "pending"}
    assert Job.objects.get(pk=third.pk).priority == 3
    jobs.tick()
    assert sorted(item["account_id"] for item in RECEIVED) == [1, 3]
    assert {item["since"] for item in RECEIVED} == {NOW}


def test_an_aware_datetime_keeps_its_instant_and_offset():
    when = timezone.localtime(NOW, dt.timezone(dt.timedelta(hours=5, minutes=30)))
    sync_account.enqueue(1, when)
    jobs.tick()
    assert RECEIVED[0]["since"] == NOW
    assert RECEIVED[0]["since"].utcoffset() == dt.timedelta(hours=5, minutes=30)


def test_typed_values_go_through_a_chain():
    jobs.chain(sync_account.s(1, NOW), sync_account.s(2, since=NOW, note="b")).enqueue()
    jobs.tick()
    jobs.tick()
    assert RECEIVED == [
        {"account_id": 1, "since": NOW, "note": ""},
        {"account_id": 2, "since": NOW, "note": "b"},
    ]
