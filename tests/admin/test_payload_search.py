"""The job list's ``key:value`` search, on each database: nested keys, list elements,
numbers against strings, quoted values, encrypted values (never), and with the filters."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_cronqueue.admin.payload_search import MAX_VALUE_CHARS
from django_cronqueue.models import JobStatus
from tests.admin.conftest import messages_of
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_cronqueue_job_changelist"


def names_found(client, **params: str) -> list[str]:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return sorted(job.name for job in response.context["cl"].result_list)


@pytest.fixture
def payloads():
    rows = {
        "number": {
            "order": {"id": 42},
            "tags": ["red", "blue"],
            "flag": True,
            "note": None,
            "amount": 2000,
            "delta": -1.5,
        },
        "string": {"order": {"id": "42"}, "items": [{"sku": "A1"}, {"sku": "B2"}], "flag": 1},
        "in_list": {"order": [{"id": 7}, {"id": 42.0}], "city": "New York"},
        "encrypted": {
            "order": {"id": {"$encrypted": "gAAAAB-token"}},
            "card": {"$encrypted": "gAAAAB-token"},
            "cards": [{"$encrypted": "gAAAAB-token"}],
        },
        "other": {"order": {"id": 43}, "city": "new york", "flag": "true", "tags": "green"},
    }
    for name, payload in rows.items():
        JobFactory(name=name, payload=payload)


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("order.id:42", ["in_list", "number", "string"]),  # 42, "42", a list's element 42.0
        ('order.id:"42"', ["string"]),  # quoted: the string only
        ("order.id:43", ["other"]),
        ("tags:red", ["number"]),  # one element of a list
        ("tags:green", ["other"]),
        ("items.sku:B2", ["string"]),  # through a list of objects
        ('city:"New York"', ["in_list"]),  # two words, exact case
        ("flag:true", ["number", "other"]),  # true or "true", never 1
        ("flag:1", ["string"]),
        ("note:null", ["number"]),  # a JSON null, not a missing key
        ("amount:2e3", ["number"]),  # the same number, written otherwise
        ("amount:2000.0", ["number"]),
        ("delta:-1.5", ["number"]),
        ("delta:-1.50", ["number"]),
        ("order:42", []),  # an object is no value
        ("order.id.deeper:42", []),
        ("missing:x", []),
    ],
)
def test_key_value_terms_match_payload_values(admin_client, payloads, term, expected):
    assert names_found(admin_client, q=term) == expected


@pytest.mark.parametrize(
    "term",
    [
        "order.id:gAAAAB-token",
        "card:gAAAAB-token",
        "cards:gAAAAB-token",
        "card.$encrypted:gAAAAB-token",
        "$encrypted:gAAAAB-token",
        "order.id.$encrypted:gAAAAB-token",
    ],
)
def test_encrypted_values_never_match(admin_client, payloads, term):
    assert names_found(admin_client, q=term) == []


def test_terms_combine_with_each_other_with_words_and_with_the_filters(admin_client):
    JobFactory(name="shop.charge", payload={"order": {"id": 42}}, status=JobStatus.FAILED)
    JobFactory(name="shop.charge", payload={"order": {"id": 42}, "retry": True})
    JobFactory(name="mail.send", payload={"order": {"id": 42}}, status=JobStatus.FAILED)
    JobFactory(name="shop.refund", payload={"order": {"id": 41}}, status=JobStatus.FAILED)
    failed = {"status": JobStatus.FAILED}
    assert names_found(admin_client, q="order.id:42", **failed) == ["mail.send", "shop.charge"]
    assert names_found(admin_client, q="shop order.id:42", **failed) == ["shop.charge"]
    assert names_found(admin_client, q="order.id:42 retry:true") == ["shop.charge"]
    assert names_found(admin_client, q="order.id:42", name="mail.send") == ["mail.send"]


def test_a_dedupe_key_that_looks_like_a_term_is_still_found(admin_client, payloads):
    JobFactory(name="keyed", dedupe_key="invoice:7731", payload={})
    JobFactory(name="by_payload", payload={"invoice": 7731})
    assert names_found(admin_client, q="invoice:7731") == ["by_payload", "keyed"]
    JobFactory(name="secret_key", dedupe_key="card.$encrypted:x", payload={})
    assert names_found(admin_client, q="card.$encrypted:x") == ["secret_key"]


@pytest.mark.parametrize("term", ["TimeoutError:", ":", ":42", "a..b:1", '"order.id:42"'])
def test_words_without_a_key_or_a_value_or_quoted_whole_search_as_before(admin_client, term):
    """They match the error text as plain words (and never fail)."""
    word = term.strip('"')
    JobFactory(
        name="shop.sync", status=JobStatus.FAILED, last_error=f"raised {word} here", payload={}
    )
    JobFactory(name="shop.other", status=JobStatus.FAILED, last_error="nothing", payload={})
    assert names_found(admin_client, q=term) == ["shop.sync"]


def test_a_value_too_long_is_refused_with_a_message(admin_client, payloads):
    response = admin_client.get(reverse(CHANGELIST), {"q": "order.id:" + "9" * 5000})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []
    [message] = messages_of(response)
    assert "too long to match a payload value" in message
    assert f"a value of at most {MAX_VALUE_CHARS:,} characters" in message


@pytest.mark.parametrize("term", ["k:'quote", 'k:"', "k:\\", "k:%s", "k:'); DROP TABLE x;--"])
def test_odd_values_are_parameters_not_sql(admin_client, payloads, term):
    JobFactory(name="odd", payload={"k": term[2:]})
    assert names_found(admin_client, q=term) in (["odd"], [])


def test_odd_values_are_matched_exactly(admin_client):
    JobFactory(name="odd", payload={"k": "'); DROP TABLE x;--", "é": "naïve ☃"})
    assert names_found(admin_client, q='"k:\'); DROP TABLE x;--"') == []  # quoted whole
    assert names_found(admin_client, q='k:"\'); DROP TABLE x;--"') == ["odd"]
    assert names_found(admin_client, q="é:naïve") == []
    assert names_found(admin_client, q='é:"naïve ☃"') == ["odd"]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_answers_a_term_from_the_payload_index(admin_client, payloads):
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a tiny table: make the plan show it
        try:
            with CaptureQueriesContext(connection) as captured:
                names_found(admin_client, q="order.id:42")
            [sql] = [q["sql"] for q in captured.captured_queries if "@?" in q["sql"]][:1]
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row for (row,) in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    assert "cronqueue_job_payload" in plan, plan


#: Any character a form can carry but NUL (Django's search form refuses it, and jsonb
#: cannot store it).
CHARACTERS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
KEYS = st.text(CHARACTERS, min_size=1, max_size=12)
VALUES = st.one_of(
    st.text(CHARACTERS, max_size=30),
    st.sampled_from(["42", "-0.5e-3", "1e999", "true", "null", '"q"', "'", "\\", "$", "@"]),
)


@given(path=st.lists(KEYS, min_size=1, max_size=10), value=VALUES)
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same examples on every run and every database
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_key_value_term_answers_a_page(admin_client, path, value):
    """Any keys (dots, brackets, dollar signs, astral characters) and any value: a list or
    a message, never a server error (a JSON path or a JSON document the database rejects)."""
    JobFactory(name="fuzz", payload={path[0]: value})
    response = admin_client.get(reverse(CHANGELIST), {"q": ".".join(path) + ":" + value})
    assert response.status_code == 200


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)
def test_postgresql_finds_archived_jobs_through_their_history_tables_index(admin_client):
    """Finished rows move to history tables (history/archive): each has its payload index."""
    from django.utils import timezone

    from django_cronqueue.history import archive
    from django_cronqueue.history.archive import postgresql as pg_history

    now = timezone.now()
    failed = JobFactory(
        name="shop.charge",
        payload={"order": {"id": 42}},
        status=JobStatus.FAILED,
        finished_at=now,
        last_error="RuntimeError: declined",
    )
    JobFactory(name="shop.charge", payload={"order": {"id": 43}}, status=JobStatus.FAILED)
    assert archive.archive(now) >= 1
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {failed._meta.db_table} WHERE id = %s",
            [failed.pk],
        )
        assert cursor.fetchone()[0].strip('"') == pg_history.ENDED_TABLE
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s", [pg_history.ENDED_TABLE]
        )
        assert pg_history.ENDED_TABLE + "_payload" in {row[0] for row in cursor.fetchall()}
    assert names_found(admin_client, q="order.id:42", status="failed") == ["shop.charge"]
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            with CaptureQueriesContext(connection) as captured:
                names_found(admin_client, q="order.id:42")
            [sql] = [q["sql"] for q in captured.captured_queries if "@?" in q["sql"]][:1]
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row for (row,) in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    assert pg_history.ENDED_TABLE + "_payload" in plan, plan
