"""Enqueueing (SPEC section 3): by name or handle, options, checks, dedupe, transactions."""

import contextlib
import datetime as dt
import json
import math
import threading
import zoneinfo
from types import SimpleNamespace

import pytest
from django.db import DatabaseError, IntegrityError, connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.enqueueing import enqueue as enqueue_module
from django_cronqueue.enqueueing.enqueue import BULK_BATCH_SIZE
from django_cronqueue.models import Job
from django_cronqueue.values.validation import MAX_JSON_DEPTH
from tests.factories import JobFactory
from tests.testapp.jobs import always_fails, noop, record, sleep_then_record
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db


@pytest.fixture
def defined():
    """A few jobs with options and odd signatures, registered for one test."""
    saved = dict(registry._definitions)

    @jobs.job(name="enqueue.emails", queue="emails", priority=10, retries=5)
    def send(user_id: int, day: str = "mon") -> None:
        return None

    @jobs.job(name="enqueue.kwargs")
    def anything(**kwargs) -> None:
        return None

    @jobs.job(name="enqueue.positional")
    def positional(a, /, b=0) -> None:
        return None

    @jobs.job(name="enqueue.keyword_only")
    def keyword_only(*, a, b=0) -> None:
        return None

    yield SimpleNamespace(send=send, anything=anything, positional=positional, kw=keyword_only)
    registry._definitions.clear()
    registry._definitions.update(saved)


def assert_no_rows():
    assert Job.objects.count() == 0


def insert_count(queries):
    return sum(query["sql"].lstrip().upper().startswith("INSERT") for query in queries)


# --- the ways to enqueue ------------------------------------------------------------


def test_enqueue_by_name_returns_the_saved_pending_row():
    before = timezone.now()
    job = jobs.enqueue("testapp.record", {"key": "a"})
    after = timezone.now()
    assert isinstance(job, Job)
    assert job.pk is not None
    stored = Job.objects.get()
    assert stored.pk == job.pk
    assert stored.name == "testapp.record"
    assert stored.payload == {"key": "a"}
    assert stored.status == "pending"
    assert stored.queue == "default"
    assert stored.priority == 0
    assert stored.attempts == 0
    assert stored.max_attempts == 4
    assert before <= stored.run_at <= after
    assert before <= stored.created_at <= after
    assert stored.scheduled_for is None
    assert stored.dedupe_key is None
    assert stored.locked_until is None
    assert stored.last_error == ""
    assert stored.started_at is None
    assert stored.finished_at is None


def test_enqueue_by_handle():
    job = jobs.enqueue(record, {"key": "b"})
    assert Job.objects.get(pk=job.pk).name == "testapp.record"
    assert job.payload == {"key": "b"}


def test_handle_enqueue_shortcut():
    job = record.enqueue(key="c")
    stored = Job.objects.get(pk=job.pk)
    assert (stored.name, stored.payload) == ("testapp.record", {"key": "c"})


def test_handle_using_run_at_and_dedupe_key():
    when = timezone.now() + dt.timedelta(hours=2)
    job = record.using(run_at=when, dedupe_key="k-1").enqueue(key="d")
    stored = Job.objects.get(pk=job.pk)
    assert stored.run_at == when
    assert stored.dedupe_key == "k-1"
    assert stored.payload == {"key": "d"}


def test_handle_using_every_option():
    job = record.using(delay=dt.timedelta(minutes=5), priority=5, queue="emails").enqueue(key="e")
    stored = Job.objects.get(pk=job.pk)
    assert (stored.priority, stored.queue) == (5, "emails")
    assert stored.run_at - stored.created_at == dt.timedelta(minutes=5)


def test_handle_using_rejects_unknown_options():
    with pytest.raises(TypeError, match="unknown option"):
        record.using(retries=3)
    assert_no_rows()


def test_no_payload_is_an_empty_one():
    assert jobs.enqueue("testapp.noop").payload == {}
    assert jobs.enqueue(noop, None).payload == {}
    assert noop.enqueue().payload == {}
    assert list(Job.objects.values_list("payload", flat=True)) == [{}, {}, {}]


def test_delay_timedelta_and_seconds():
    before = timezone.now()
    by_timedelta = jobs.enqueue(record, {"key": "a"}, delay=dt.timedelta(minutes=5))
    by_seconds = jobs.enqueue(record, {"key": "b"}, delay=90)
    by_float = jobs.enqueue(record, {"key": "c"}, delay=0.5)
    after = timezone.now()
    for job, delay in [
        (by_timedelta, dt.timedelta(minutes=5)),
        (by_seconds, dt.timedelta(seconds=90)),
        (by_float, dt.timedelta(seconds=0.5)),
    ]:
        stored = Job.objects.get(pk=job.pk)
        assert before + delay <= stored.run_at <= after + delay


def test_run_at_in_another_zone_and_in_the_past():
    new_york = zoneinfo.ZoneInfo("America/New_York")
    when = dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=new_york)
    job = jobs.enqueue(record, {"key": "a"}, run_at=when)
    assert Job.objects.get(pk=job.pk).run_at == when
    past = timezone.now() - dt.timedelta(days=1)
    job = jobs.enqueue(record, {"key": "b"}, run_at=past)
    assert Job.objects.get(pk=job.pk).run_at == past


def test_priority_and_queue_overrides(defined):
    default = jobs.enqueue(defined.send, {"user_id": 1})
    stored = Job.objects.get(pk=default.pk)
    assert (stored.queue, stored.priority, stored.max_attempts) == ("emails", 10, 6)
    override = jobs.enqueue("enqueue.emails", {"user_id": 2}, priority=-3, queue="bulk")
    stored = Job.objects.get(pk=override.pk)
    assert (stored.queue, stored.priority) == ("bulk", -3)
    zero = jobs.enqueue(record, {"key": "z"}, priority=0, queue="default")
    assert (zero.queue, zero.priority) == ("default", 0)


def test_default_queue_setting():
    with override_settings(CRONQUEUE={"DEFAULT_QUEUE": "low"}):
        job = jobs.enqueue(record, {"key": "a"})
    assert Job.objects.get(pk=job.pk).queue == "low"


def test_default_max_attempts_is_retries_plus_one():
    assert jobs.enqueue(record, {"key": "a"}).max_attempts == 4  # default retries 3
    assert jobs.enqueue(always_fails).max_attempts == 3  # retries=2
    assert jobs.enqueue(sleep_then_record, {"key": "b", "seconds": 0}).max_attempts == 1
    with override_settings(CRONQUEUE={"DEFAULT_RETRIES": 0}):
        assert jobs.enqueue(record, {"key": "c"}).max_attempts == 1
        assert jobs.enqueue(always_fails).max_attempts == 3  # its own retries win
    assert sorted(Job.objects.values_list("max_attempts", flat=True)) == [1, 1, 3, 3, 4]


def test_json_payloads_round_trip(defined):
    payload = {
        "text": "héllo ✓ 你好 😀",
        "number": 2**53,
        "negative": -7,
        "float": 1.5,
        "flag": False,
        "nothing": None,
        "list": [1, "two", [3.0], {"four": 4}],
        "nested": {"a": {"b": {"c": []}}},
    }
    job = jobs.enqueue(defined.anything, payload)
    assert Job.objects.get(pk=job.pk).payload == payload


def test_tuples_are_stored_as_lists(defined):
    job = jobs.enqueue(defined.anything, {"pair": (1, 2)})
    assert Job.objects.get(pk=job.pk).payload == {"pair": [1, 2]}


def test_optional_and_keyword_only_arguments(defined):
    assert jobs.enqueue(defined.send, {"user_id": 1, "day": "tue"}).payload["day"] == "tue"
    assert jobs.enqueue(defined.kw, {"a": 1}).payload == {"a": 1}
    assert jobs.enqueue(always_fails, {"reason": "x"}).payload == {"reason": "x"}
    assert Job.objects.count() == 3


def test_an_enqueue_is_one_statement_seen_by_query_logging_and_execute_wrappers():
    seen = []

    def spy(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(spy):
        job = jobs.enqueue(record, {"key": "a"}, dedupe_key="one-statement")
    statements = [query["sql"].split()[0] for query in queries.captured_queries]
    if connection.vendor == "mysql":  # no ON CONFLICT: the INSERT runs in a savepoint
        assert statements == ["SAVEPOINT", "INSERT", "RELEASE"]
    else:
        assert statements == ["INSERT"]
    assert [sql.split()[0] for sql in seen] == statements
    assert Job.objects.get().pk == job.pk


def test_a_database_error_during_an_enqueue_is_djangos_not_the_drivers():
    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL enqueue has its own cursor; the others use Django's")
    with transaction.atomic():
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")  # the database aborts the transaction
        with pytest.raises(DatabaseError, match="aborted"):
            jobs.enqueue(record, {"key": "k"})
        transaction.set_rollback(True)


# --- enqueue_many -------------------------------------------------------------------


def test_enqueue_many_creates_n_rows_in_one_insert():
    with CaptureQueriesContext(connection) as queries:
        created = jobs.enqueue_many(record, [{"key": f"k{i}"} for i in range(10)])
    assert insert_count(queries.captured_queries) == 1
    assert len(created) == 10
    assert all(isinstance(job, Job) for job in created)
    rows = Job.objects.order_by("id")
    assert [row.payload for row in rows] == [{"key": f"k{i}"} for i in range(10)]
    assert {(row.name, row.status, row.max_attempts) for row in rows} == {
        ("testapp.record", "pending", 4)
    }
    if connection.features.can_return_rows_from_bulk_insert:
        assert sorted(job.pk for job in created) == [row.pk for row in rows]


def test_enqueue_many_uses_one_insert_per_batch():
    count = 2 * BULK_BATCH_SIZE + 500
    payloads = [{"key": f"k{i}"} for i in range(count)]
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    batch = min(BULK_BATCH_SIZE, connection.ops.bulk_batch_size(fields, payloads))
    with CaptureQueriesContext(connection) as queries:
        jobs.enqueue_many("testapp.record", payloads)
    assert insert_count(queries.captured_queries) == math.ceil(count / batch)
    if connection.vendor != "sqlite":  # SQLite caps the variables of one statement
        assert insert_count(queries.captured_queries) == 3
    assert Job.objects.count() == count


def test_enqueue_many_by_name_with_options():
    when = timezone.now() + dt.timedelta(hours=1)
    jobs.enqueue_many("testapp.record", [{"key": "a"}, {"key": "b"}], run_at=when, priority=3)
    jobs.enqueue_many(record, [{"key": "c"}], delay=dt.timedelta(minutes=1), queue="q")
    rows = {row.payload["key"]: row for row in Job.objects.all()}
    assert rows["a"].run_at == rows["b"].run_at == when
    assert rows["a"].priority == rows["b"].priority == 3
    assert rows["c"].queue == "q"
    assert rows["c"].run_at - rows["c"].created_at == dt.timedelta(minutes=1)


def test_enqueue_many_through_using():
    record.using(priority=7).enqueue_many([{"key": "a"}, {"key": "b"}])
    assert list(Job.objects.values_list("priority", flat=True)) == [7, 7]
    with pytest.raises(TypeError, match="dedupe_key"):
        record.using(dedupe_key="k").enqueue_many([{"key": "c"}])
    assert Job.objects.count() == 2


def test_enqueue_many_from_the_handle():
    when = timezone.now() + dt.timedelta(hours=1)
    with CaptureQueriesContext(connection) as queries:
        created = record.enqueue_many(
            ({"key": k} for k in "ab"), run_at=when, priority=5, queue="bulk"
        )
    assert insert_count(queries.captured_queries) == 1
    assert len(created) == 2
    rows = list(Job.objects.order_by("id"))
    assert [row.payload for row in rows] == [{"key": "a"}, {"key": "b"}]
    assert {(row.name, row.run_at, row.priority, row.queue) for row in rows} == {
        ("testapp.record", when, 5, "bulk")
    }
    record.enqueue_many([{"key": "c"}], delay=60)
    late = Job.objects.order_by("id").last()
    assert late.payload == {"key": "c"}
    assert late.run_at - late.created_at == dt.timedelta(seconds=60)


def test_enqueue_many_from_the_handle_checks_every_payload_first():
    with pytest.raises(jobs.InvalidPayload, match=r"'testapp\.record'.*'nope'"):
        record.enqueue_many([{"key": "a"}, {"nope": 1}])
    with pytest.raises(TypeError, match="dedupe_key"):
        record.enqueue_many([{"key": "a"}], dedupe_key="k")
    assert_no_rows()


def test_enqueue_many_of_nothing_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert jobs.enqueue_many(record, []) == []
        assert jobs.enqueue_many(record, iter(())) == []
    assert insert_count(queries.captured_queries) == 0
    assert_no_rows()


def test_enqueue_many_accepts_a_generator():
    jobs.enqueue_many(record, ({"key": str(i)} for i in range(3)))
    assert Job.objects.count() == 3


def test_enqueue_many_checks_every_payload_before_writing():
    payloads = [{"key": "a"}, {"key": "b"}, {"key": {1, 2}}, {"key": "d"}]
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(jobs.InvalidPayload, match=r"'testapp\.record'.*'key'"),
    ):
        jobs.enqueue_many(record, payloads)
    assert insert_count(queries.captured_queries) == 0
    assert_no_rows()


def test_enqueue_many_unknown_name():
    with pytest.raises(jobs.UnknownJob):
        jobs.enqueue_many("testapp.nope", [{"key": "a"}])
    assert_no_rows()


# --- checked at the call site, before anything is written ----------------------------


def test_unknown_name_raises_unknown_job():
    with pytest.raises(jobs.UnknownJob) as excinfo:
        jobs.enqueue("shop.nope", {"user_id": 42})
    assert "'shop.nope'" in str(excinfo.value)
    assert isinstance(excinfo.value, LookupError)
    assert_no_rows()


def test_a_plain_function_is_not_a_job():
    def plain(key):
        return None

    with pytest.raises(jobs.UnknownJob, match="function"):
        jobs.enqueue(plain, {"key": "a"})
    with pytest.raises(jobs.UnknownJob):
        jobs.enqueue(None)
    assert_no_rows()


NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        pytest.param({"key": {1, 2}}, "'key'", id="set"),
        pytest.param({"key": frozenset()}, "'key'", id="frozenset"),
        pytest.param({"key": 1.5j}, "'key'", id="complex"),
        pytest.param({"key": b"bytes"}, "'key'", id="bytes"),
        pytest.param({"key": object()}, "'key'", id="object"),
        pytest.param({"key": math.nan}, "'key'", id="nan"),
        pytest.param({"key": math.inf}, "'key'", id="inf"),
        pytest.param({"key": -math.inf}, "'key'", id="-inf"),
        pytest.param({"key": "a\x00b"}, "'key'", id="nul-in-string"),
        pytest.param({"key": "\ud800"}, "'key'", id="lone-surrogate"),
        pytest.param({"key": {"a": [1, {"b": {1}}]}}, "'key.a[1].b'", id="nested-set"),
        pytest.param({"key": ["ok", "bad\x00"]}, "'key[1]'", id="nested-nul"),
        pytest.param({"key": {"a": {"b": math.nan}}}, "'key.a.b'", id="nested-nan"),
        pytest.param({"key": {1: "x"}}, "'key'", id="nested-int-key"),
        pytest.param({"key": {"a\x00": 1}}, "'key'", id="nested-nul-in-key"),
        pytest.param({}, "'key'", id="missing-argument"),
        pytest.param({"key": "a", "extra": 1}, "'extra'", id="unexpected-key"),
        pytest.param({"kye": "a"}, "'kye'", id="misspelt-key"),
        pytest.param({1: "a"}, "1", id="int-key"),
    ],
)
def test_invalid_payload_names_the_job_and_the_key(payload, path):
    with pytest.raises(jobs.InvalidPayload) as excinfo:
        jobs.enqueue("testapp.record", payload)
    message = str(excinfo.value)
    assert "'testapp.record'" in message
    assert path in message
    assert isinstance(excinfo.value, ValueError)
    assert_no_rows()


def test_model_instance_is_not_json():
    note = Note.objects.create(text="hello")
    with pytest.raises(jobs.InvalidPayload) as excinfo:
        jobs.enqueue(record, {"key": note})
    message = str(excinfo.value)
    assert "'testapp.record'" in message
    assert "'key'" in message
    assert "Note" in message
    assert_no_rows()


def test_invalid_payload_through_the_shortcuts():
    with pytest.raises(jobs.InvalidPayload, match="'key'"):
        record.enqueue(key={1, 2})
    with pytest.raises(jobs.InvalidPayload, match="'extra'"):
        record.using(dedupe_key="k").enqueue(key="a", extra=1)
    assert_no_rows()


@pytest.mark.parametrize(
    "payload",
    [["key", "a"], "key=a", (("key", "a"),), 42, json.dumps({"key": "a"})],
    ids=["list", "str", "tuple-of-pairs", "int", "json-text"],
)
def test_non_dict_payload(payload):
    with pytest.raises(jobs.InvalidPayload) as excinfo:
        jobs.enqueue(record, payload)
    assert "'testapp.record'" in str(excinfo.value)
    assert "dict" in str(excinfo.value)
    assert_no_rows()


def test_kwargs_handlers_take_any_key_but_still_only_json(defined):
    assert jobs.enqueue(defined.anything, {"x": 1, "y": [2]}).payload == {"x": 1, "y": [2]}
    with pytest.raises(jobs.InvalidPayload, match=r"'enqueue\.kwargs'.*'when'"):
        jobs.enqueue(defined.anything, {"when": {1, 2}})
    with pytest.raises(jobs.InvalidPayload, match=r"'enqueue\.kwargs'"):
        jobs.enqueue(defined.anything, {"nul\x00": 1})
    assert Job.objects.count() == 1


def test_positional_only_arguments_cannot_be_passed(defined):
    with pytest.raises(jobs.InvalidPayload, match=r"'enqueue\.positional'.*'a'"):
        jobs.enqueue(defined.positional, {"a": 1})
    with pytest.raises(jobs.InvalidPayload, match=r"'enqueue\.keyword_only'.*'a'"):
        jobs.enqueue(defined.kw, {"b": 1})
    assert_no_rows()


def test_payload_over_max_payload_bytes():
    with override_settings(CRONQUEUE={"MAX_PAYLOAD_BYTES": 100}):
        assert len(json.dumps({"key": "x" * 89})) == 100
        jobs.enqueue(record, {"key": "x" * 89})  # exactly at the limit
        with pytest.raises(jobs.InvalidPayload) as excinfo:
            jobs.enqueue(record, {"key": "x" * 90})
        assert "'testapp.record'" in str(excinfo.value)
        assert "MAX_PAYLOAD_BYTES" in str(excinfo.value)
        with pytest.raises(jobs.InvalidPayload):
            jobs.enqueue(record, {"key": "é" * 45})  # 90 bytes of UTF-8, 45 characters
        with pytest.raises(jobs.InvalidPayload):
            jobs.enqueue_many(record, [{"key": "a"}, {"key": "x" * 200}])
    assert Job.objects.count() == 1


def nested(levels):
    """JSON nested ``levels`` deep: a string inside ``levels`` lists."""
    value = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_the_deepest_payload_is_stored_and_read_back(defined, many):
    # The payload object is level 1 of MAX_JSON_DEPTH; on MariaDB, the last it accepts.
    payload = {"k": nested(MAX_JSON_DEPTH - 1)}
    if many:
        [job] = jobs.enqueue_many(defined.anything, [payload])
    else:
        job = jobs.enqueue(defined.anything, payload, dedupe_key="deepest")
    assert Job.objects.get(pk=job.pk).payload == payload


@pytest.mark.django_db(transaction=True)
def test_mariadb_refuses_one_level_past_the_limit():
    """MAX_JSON_DEPTH is exact: MariaDB's JSON_VALID refuses a 32-deep document."""
    if connection.vendor != "mysql":
        pytest.skip("the limit is MariaDB's")
    job = JobFactory(payload={"k": nested(MAX_JSON_DEPTH - 1)})
    with pytest.raises(IntegrityError, match=r"CONSTRAINT `django_cronqueue_job\.payload` failed"):
        Job.objects.filter(pk=job.pk).update(payload={"k": nested(MAX_JSON_DEPTH)})
    assert Job.objects.get(pk=job.pk).payload == {"k": nested(MAX_JSON_DEPTH - 1)}


@pytest.mark.parametrize("dedupe_key", [None, "deep"])
def test_a_payload_too_deep_for_a_database_is_refused_before_writing(defined, dedupe_key):
    with pytest.raises(jobs.InvalidPayload, match=r"'enqueue\.kwargs'.*nested 32 levels deep"):
        jobs.enqueue(defined.anything, {"k": nested(40)}, dedupe_key=dedupe_key)
    with pytest.raises(jobs.InvalidPayload, match="nested 32 levels deep"):
        jobs.enqueue_many(defined.anything, [{"k": 1}, {"k": nested(40)}])
    assert_no_rows()


def test_circular_payloads_and_integers_json_cannot_write_are_invalid_payloads(defined):
    loop = []
    loop.append(loop)
    with pytest.raises(jobs.InvalidPayload, match="circular reference"):
        jobs.enqueue(defined.anything, {"k": loop})
    with pytest.raises(jobs.InvalidPayload, match="integer too long"):
        jobs.enqueue(defined.anything, {"k": 10**5000}, dedupe_key="big")
    assert_no_rows()


@pytest.mark.django_db(transaction=True)
def test_a_row_the_database_refuses_is_not_a_dedupe_conflict(defined, monkeypatch):
    """Only a unique key violation means the key changed hands: any other
    IntegrityError is raised at once, as the database said it."""
    if connection.vendor != "mysql":
        pytest.skip("the other vendors insert with ON CONFLICT DO NOTHING")
    monkeypatch.setattr(enqueue_module, "check_payload", lambda definition, payload: payload)
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(IntegrityError, match=r"CONSTRAINT `django_cronqueue_job\.payload`"),
    ):
        jobs.enqueue(defined.anything, {"k": nested(40)}, dedupe_key="deep")
    # One attempt, in its own transaction; none more, and no look for a key holder.
    assert [q["sql"] for q in queries if q["sql"] in ("BEGIN", "ROLLBACK")] == ["BEGIN", "ROLLBACK"]
    assert not [q for q in queries if q["sql"].startswith("SELECT")]
    assert_no_rows()


def test_naive_run_at_is_rejected():
    naive = dt.datetime(2030, 1, 1, 12, 0)
    with pytest.raises(ValueError, match=r"'testapp\.record'.*naive"):
        jobs.enqueue(record, {"key": "a"}, run_at=naive)
    with pytest.raises(ValueError, match="naive"):
        record.using(run_at=naive).enqueue(key="a")
    with pytest.raises(ValueError, match="naive"):
        jobs.enqueue_many(record, [{"key": "a"}], run_at=naive)
    assert_no_rows()


@pytest.mark.parametrize(
    "options",
    [
        {"run_at": NOW, "delay": 5},
        {"run_at": "2030-01-01T00:00:00Z"},
        {"run_at": dt.date(2030, 1, 1)},
        {"delay": "5 minutes"},
        {"delay": True},
        {"delay": math.nan},
        {"delay": math.inf},
        {"priority": "high"},
        {"priority": 1.5},
        {"priority": True},
        {"priority": 2**31},
        {"queue": ""},
        {"queue": 5},
        {"queue": "q" * 101},
        {"dedupe_key": ""},
        {"dedupe_key": 42},
        {"dedupe_key": "k" * 201},
        {"dedupe_key": "a\x00b"},
    ],
    ids=repr,
)
def test_bad_options_are_rejected_before_writing(options):
    with pytest.raises(ValueError, match=r"'testapp\.record'"):
        jobs.enqueue(record, {"key": "a"}, **options)
    assert_no_rows()


# --- dedupe_key ---------------------------------------------------------------------


def test_dedupe_second_enqueue_returns_the_same_job():
    first = jobs.enqueue(record, {"key": "a"}, dedupe_key="welcome-42")
    with CaptureQueriesContext(connection) as queries:
        second = jobs.enqueue("testapp.record", {"key": "other"}, dedupe_key="welcome-42")
    third = record.using(dedupe_key="welcome-42").enqueue(key="third")
    assert second.pk == first.pk == third.pk
    assert second.payload == {"key": "a"}  # the existing job, untouched
    assert Job.objects.count() == 1
    assert not any(
        query["sql"].lstrip().upper().startswith("UPDATE") for query in queries.captured_queries
    )


def test_dedupe_keys_are_per_name_and_per_key():
    a = jobs.enqueue(record, {"key": "a"}, dedupe_key="k1")
    b = jobs.enqueue(record, {"key": "b"}, dedupe_key="k2")
    c = jobs.enqueue(always_fails, {}, dedupe_key="k1")
    d = jobs.enqueue(record, {"key": "d"})  # no key: never deduplicated
    e = jobs.enqueue(record, {"key": "e"})
    assert len({a.pk, b.pk, c.pk, d.pk, e.pk}) == 5
    assert Job.objects.count() == 5


def test_dedupe_keys_differing_only_in_case_are_distinct():
    # On MySQL/MariaDB this holds only because the test database's collation is
    # utf8mb4_bin; under the servers' default (case-insensitive) collations it does not.
    keys = ["Key", "key", "KEY"]
    ids = {jobs.enqueue(record, {"key": k}, dedupe_key=k).pk for k in keys}
    assert len(ids) == 3
    assert sorted(Job.objects.values_list("dedupe_key", flat=True)) == sorted(keys)


def test_dedupe_keys_differing_only_in_case_or_trailing_space_are_distinct():
    first = jobs.enqueue(record, {"key": "a"}, dedupe_key="key")
    second = jobs.enqueue(record, {"key": "b"}, dedupe_key="key ")
    third = jobs.enqueue(record, {"key": "c"}, dedupe_key="KEY")
    assert len({first.pk, second.pk, third.pk}) == 3
    assert Job.objects.count() == 3


def test_job_names_differing_only_in_case_are_not_claimed():
    JobFactory(name="TESTAPP.RECORD", payload={"key": "x"})
    assert jobs.tick().claimed == 0


def test_dedupe_returns_a_running_job():
    running = JobFactory(
        name="testapp.record",
        status="running",
        attempts=1,
        dedupe_key="k",
        active_dedupe_key="k",
        locked_until=timezone.now() + dt.timedelta(seconds=30),
    )
    assert jobs.enqueue(record, {"key": "a"}, dedupe_key="k").pk == running.pk
    assert Job.objects.count() == 1


def test_dedupe_key_is_free_again_after_cancel():
    first = jobs.enqueue(record, {"key": "a"}, dedupe_key="k")
    assert first.cancel(reason="changed my mind")
    second = jobs.enqueue(record, {"key": "b"}, dedupe_key="k")
    assert second.pk != first.pk
    assert jobs.enqueue(record, {"key": "c"}, dedupe_key="k").pk == second.pk
    first.refresh_from_db()
    assert (first.status, first.dedupe_key) == ("cancelled", "k")
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_dedupe_key_is_free_again_after_success():
    first = jobs.enqueue(record, {"key": "a"}, dedupe_key="k")
    assert jobs.tick().ran == 1
    first.refresh_from_db()
    assert first.status == "succeeded"
    second = jobs.enqueue(record, {"key": "b"}, dedupe_key="k")
    assert second.pk != first.pk
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_dedupe_key_is_held_through_retries_and_free_after_failure():
    first = jobs.enqueue(always_fails, {}, dedupe_key="k")
    now = timezone.now()
    assert jobs.tick(now=now).failed == 1
    first.refresh_from_db()
    assert (first.status, first.attempts) == ("pending", 1)  # a retry: still holds the key
    assert jobs.enqueue(always_fails, {}, dedupe_key="k").pk == first.pk
    assert jobs.tick(now=now).failed == 1
    assert jobs.tick(now=now).failed == 1
    first.refresh_from_db()
    assert (first.status, first.attempts) == ("failed", 3)
    second = jobs.enqueue(always_fails, {}, dedupe_key="k")
    assert second.pk != first.pk
    assert Job.objects.count() == 2


def test_ended_rows_of_a_key_do_not_block_it():
    for status in ("succeeded", "failed", "cancelled"):
        JobFactory(name="testapp.record", status=status, dedupe_key="k", active_dedupe_key=None)
    job = jobs.enqueue(record, {"key": "a"}, dedupe_key="k")
    assert job.status == "pending"
    assert Job.objects.count() == 4


# --- transactions -------------------------------------------------------------------


class Rollback(Exception):
    pass


def in_rolled_back_transaction(action):
    """Run ``action`` inside transaction.atomic(), then roll it back."""
    try:
        with transaction.atomic():
            action()
            raise Rollback
    except Rollback:
        pass


@pytest.mark.django_db(transaction=True)
def test_rolled_back_enqueue_leaves_no_row():
    def work():
        Note.objects.create(text="caller's data")
        jobs.enqueue(record, {"key": "a"})
        record.enqueue(key="b")
        record.using(dedupe_key="k").enqueue(key="c")
        jobs.enqueue_many(record, [{"key": "d"}, {"key": "e"}])
        assert Job.objects.count() == 5

    in_rolled_back_transaction(work)
    assert_no_rows()
    assert Note.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_committed_enqueue_commits_with_the_callers_data():
    with transaction.atomic():
        Note.objects.create(text="caller's data")
        job = jobs.enqueue(record, {"key": "a"})
    assert Job.objects.filter(pk=job.pk).exists()
    assert Note.objects.count() == 1


def count_jobs_from_another_connection():
    """What a worker (another connection) sees."""
    seen = []

    def count():
        try:
            seen.append(Job.objects.count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=count)
    thread.start()
    thread.join(30)
    return seen[0]


@pytest.mark.django_db(transaction=True)
def test_no_other_connection_sees_an_uncommitted_job():
    with transaction.atomic():
        jobs.enqueue(record, {"key": "a"})
        jobs.enqueue(record, {"key": "b"}, dedupe_key="k")
        assert Job.objects.count() == 2
        assert count_jobs_from_another_connection() == 0
    assert count_jobs_from_another_connection() == 2


@pytest.mark.django_db(transaction=True)
def test_rolled_back_dedupe_key_is_free():
    in_rolled_back_transaction(lambda: jobs.enqueue(record, {"key": "a"}, dedupe_key="k"))
    job = jobs.enqueue(record, {"key": "b"}, dedupe_key="k")
    assert Job.objects.get().pk == job.pk


@pytest.mark.django_db(transaction=True)
def test_dedupe_inside_a_transaction_keeps_it_usable():
    with transaction.atomic():
        first = jobs.enqueue(record, {"key": "a"}, dedupe_key="k")
        second = jobs.enqueue(record, {"key": "b"}, dedupe_key="k")
        Note.objects.create(text="still usable after the duplicate")
    assert first.pk == second.pk
    assert Job.objects.count() == 1
    assert Note.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_dedupe_sees_a_job_committed_by_another_connection_during_a_transaction():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one writer: nobody else commits while this transaction writes")
    with transaction.atomic():
        Note.objects.create(text="opens the transaction's snapshot")
        holder = []

        def enqueue_elsewhere():
            try:
                holder.append(jobs.enqueue(record, {"key": "other"}, dedupe_key="k").pk)
            finally:
                connections.close_all()

        thread = threading.Thread(target=enqueue_elsewhere)
        thread.start()
        thread.join(30)
        assert jobs.enqueue(record, {"key": "mine"}, dedupe_key="k").pk == holder[0]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_rejected_enqueue_does_not_spoil_the_transaction():
    with transaction.atomic():
        Note.objects.create(text="kept")
        with pytest.raises(jobs.InvalidPayload):
            jobs.enqueue(record, {"key": {1, 2}})
        jobs.enqueue(record, {"key": "ok"})
    assert Note.objects.count() == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_postgres_workers_are_notified_only_on_commit():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    import psycopg

    from django_cronqueue.db.notify import NOTIFY_CHANNEL

    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with transaction.atomic():
            jobs.enqueue(record, {"key": "a"})
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        assert len(list(listener.notifies(timeout=5, stop_after=1))) == 1
        in_rolled_back_transaction(lambda: jobs.enqueue(record, {"key": "b"}))
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        jobs.enqueue(record, {"key": "later"}, delay=dt.timedelta(hours=1))
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []  # not due soon
