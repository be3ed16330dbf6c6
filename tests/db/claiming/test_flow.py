"""Flow control on every vendor: the limit key stored at enqueue (and refused there),
per-key concurrency, sliding-window rate limits, no head-of-line blocking, jobs over
their limit left untouched, the count under the lock, pruning, and the statements a
limited claim costs.

Time is injected (``claim_due(now, ...)``, ``jobs.tick(now=...)``): each window is
checked at its exact edges, not by sleeping."""

from __future__ import annotations

import datetime as dt
import threading
import time
from importlib import import_module

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim, claim_due, claim_request, flow, is_capped
from django_cronqueue.conf import database_alias
from django_cronqueue.definitions.registry import registry
from django_cronqueue.exceptions import InvalidPayload
from django_cronqueue.housekeeping.maintenance import FLOW_IDLE_AGE, START_MARGIN, prune_flow
from django_cronqueue.models import FlowLock, Job, JobStart
from tests.processes import wait_until
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

PER_TENANT = test_jobs.per_tenant.name  # limit_by="tenant", concurrency=2
RATED = test_jobs.rated.name  # limit_by="tenant", rate_limit="2/m"
NAME_RATED = test_jobs.name_rated.name  # rate_limit=(3, 1 hour), concurrency=2
BY_REGION = test_jobs.by_region.name  # limit_by=region_of, rate_limit="1/s", concurrency=1
VENDOR_MODULES = {"postgresql": "postgresql", "mysql": "mysql", "sqlite": "sqlite"}


@pytest.fixture
def t0():
    """An instant after every row the test enqueues (they are due an hour earlier)."""
    return timezone.now() + dt.timedelta(minutes=5)


def early(t0: dt.datetime) -> dt.datetime:
    return t0 - dt.timedelta(hours=1)


def enqueue(job, payload, **options):
    options.setdefault("run_at", timezone.now() - dt.timedelta(hours=1))
    return jobs.enqueue(job, payload, **options)


def claimed_at(now, limit=10, worker="w", queues=None):
    return claim_due(now, queues=queues, limit=limit, worker_id=worker)


def tenants(claimed) -> list[str]:
    return sorted(job.payload.get("tenant") for job in claimed)


def max_in_window(instants, window: dt.timedelta) -> int:
    """The most instants in any half-open window [a, a + window)."""
    instants = sorted(instants)
    most, first = 0, 0
    for last, instant in enumerate(instants):
        while instants[first] <= instant - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_max_in_window():
    t = timezone.now()
    second = dt.timedelta(seconds=1)
    assert max_in_window([], second) == 0
    assert max_in_window([t, t + second], second) == 1  # the window is half-open
    assert max_in_window([t, t + second / 2, t + second], second) == 2


# --- the key, at enqueue ---------------------------------------------------------------


def test_the_limit_key_is_computed_at_enqueue_and_stored_on_the_row():
    rows = [
        jobs.enqueue(PER_TENANT, {"tenant": "acme"}),
        test_jobs.rated.enqueue(tenant=42),
        test_jobs.rated.using(priority=3).enqueue(tenant="42"),
        jobs.enqueue(RATED, {"tenant": True}),
        jobs.enqueue(RATED, {"tenant": {"id": 7, "eu": False}}),
        jobs.enqueue(BY_REGION, {"address": {"region": "EU", "city": "Lyon"}}),
        jobs.enqueue(NAME_RATED, {"key": "x"}),
        jobs.enqueue(test_jobs.record, {"key": "plain"}),
    ]
    expected = ["acme", "42", "42", "true", '{"eu":false,"id":7}', "eu", "", ""]
    assert [row.limit_key for row in rows] == expected
    stored = dict(Job.objects.values_list("id", "limit_key"))
    assert [stored[row.pk] for row in rows] == expected


def test_enqueue_many_stores_each_rows_key():
    rows = jobs.enqueue_many(RATED, [{"tenant": f"t{i % 3}", "key": str(i)} for i in range(7)])
    keys = [f"t{i % 3}" for i in range(7)]
    assert [row.limit_key for row in rows] == keys
    stored = dict(Job.objects.values_list("id", "limit_key"))
    assert [stored[row.pk] for row in rows] == keys
    plain = jobs.enqueue_many(test_jobs.record, [{"key": "a"}, {"key": "b"}])
    assert set(Job.objects.filter(name=plain[0].name).values_list("limit_key", flat=True)) == {""}


@pytest.mark.parametrize(
    ("job", "payload", "words"),
    [
        (PER_TENANT, {"key": "x"}, ["'tenant'", "missing"]),
        (PER_TENANT, {"tenant": ""}, ["'tenant'", "''", "is empty"]),
        (PER_TENANT, {"tenant": "t" * 201}, ["'tenant'", "201 characters long"]),
        (RATED, {"tenant": ["k" * 150, "k" * 60]}, ["'tenant'", "characters long"]),
        (BY_REGION, {"address": {"city": "Lyon"}}, ["region_of", "KeyError", "'city'"]),
        (BY_REGION, {"address": {"region": ""}}, ["region_of", "returned ''", "is empty"]),
    ],
)
def test_a_payload_without_a_usable_key_is_refused_naming_job_key_and_value(job, payload, words):
    with pytest.raises(InvalidPayload) as excinfo:
        jobs.enqueue(job, payload)
    message = str(excinfo.value)
    assert f"Job {job!r}" in message
    for word in words:
        assert word in message
    with pytest.raises(InvalidPayload):
        jobs.enqueue_many(job, [{"tenant": "fine", "address": {"region": "ok"}}, payload])
    assert not Job.objects.exists()


@pytest.mark.parametrize("returned", [5, None, b"eu", "", "r" * 201, "a\x00b"])
def test_a_limit_by_callable_must_return_a_usable_string(returned):
    @jobs.job(name="flow.returns", limit_by=lambda payload: returned, rate_limit="1/s")
    def returns(region: str = "") -> None:
        return None

    try:
        with pytest.raises(InvalidPayload) as excinfo:
            returns.enqueue(region="x")
        message = str(excinfo.value)
        assert "Job 'flow.returns'" in message and "limit_by=" in message
        assert repr(returned)[:20] in message
        assert not Job.objects.exists()
    finally:
        registry.unregister("flow.returns")


# --- per-key concurrency ----------------------------------------------------------------


def test_concurrency_applies_per_key(t0):
    for index in range(3):
        enqueue(PER_TENANT, {"tenant": "a", "key": str(index)})
    enqueue(PER_TENANT, {"tenant": "b"})
    first = claimed_at(t0)
    assert tenants(first) == ["a", "a", "b"]
    assert claimed_at(t0, worker="w2") == []
    lifecycle.complete_success(next(j for j in first if j.payload["tenant"] == "a"), now=t0)
    assert tenants(claimed_at(t0, worker="w3")) == ["a"]
    assert Job.objects.filter(name=PER_TENANT, status="running").count() == 3


def test_keys_that_differ_in_case_or_trailing_spaces_are_distinct(t0):
    for tenant in ("acme", "Acme", "acme ", "ACME"):
        for index in range(3):
            enqueue(PER_TENANT, {"tenant": tenant, "key": str(index)})
    claimed = claimed_at(t0, limit=20)
    assert tenants(claimed) == sorted(["acme", "Acme", "acme ", "ACME"] * 2)


def test_a_name_wide_rate_limit_and_concurrency_apply_to_the_whole_name(t0):
    for index in range(5):
        enqueue(NAME_RATED, {"key": str(index)})
    first = claimed_at(t0)
    assert len(first) == 2  # concurrency 2
    for job in first:
        lifecycle.complete_success(job, now=t0)
    second = claimed_at(t0)
    assert len(second) == 1  # 3 starts an hour
    lifecycle.complete_success(second[0], now=t0)
    assert claimed_at(t0 + dt.timedelta(minutes=59, seconds=59)) == []
    assert len(claimed_at(t0 + dt.timedelta(hours=1))) == 2


# --- sliding-window rate limits ---------------------------------------------------------


def test_a_rate_limit_is_a_sliding_window_of_starts(t0):
    for index in range(10):
        enqueue(RATED, {"tenant": "a", "key": str(index)})
    second = dt.timedelta(seconds=1)
    assert len(claimed_at(t0, limit=1)) == 1
    assert len(claimed_at(t0 + 30 * second)) == 1  # 2/m: one start left
    assert claimed_at(t0 + 45 * second) == []
    assert claimed_at(t0 + 60 * second - dt.timedelta(microseconds=1)) == []
    # At t0 + 60 s the first start leaves the window, the one at t0 + 30 s does not:
    # one more, not a fresh bucket of two.
    assert len(claimed_at(t0 + 60 * second)) == 1
    assert claimed_at(t0 + 89 * second) == []
    assert len(claimed_at(t0 + 90 * second)) == 1
    starts = list(JobStart.objects.filter(name=RATED).values_list("started_at", flat=True))
    assert len(starts) == 4
    assert max_in_window(starts, dt.timedelta(minutes=1)) == 2


def test_a_rate_limit_applies_per_key_and_is_used_in_full(t0):
    for tenant in ("a", "b"):
        for index in range(5):
            enqueue(RATED, {"tenant": tenant, "key": str(index)})
    assert tenants(claimed_at(t0)) == ["a", "a", "b", "b"]
    assert claimed_at(t0) == []
    assert tenants(claimed_at(t0 + dt.timedelta(minutes=1))) == ["a", "a", "b", "b"]


def test_every_claim_counts_as_a_start_a_retry_too(t0):
    job = enqueue(RATED, {"tenant": "a"})
    for _ in range(2):
        [claimed] = claimed_at(t0)
        lifecycle.complete_failure(
            claimed, RuntimeError("boom"), now=t0, definition=registry.get(RATED)
        )
        Job.objects.filter(pk=job.pk).update(run_at=early(t0))  # the retry is due at once
    assert claimed_at(t0) == []  # one row, two claims: the minute is used up
    assert JobStart.objects.filter(name=RATED).count() == 2
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 2)


def test_starts_a_faster_clock_logged_ahead_of_ours_count_too(t0):
    """Another worker whose clock runs ahead logged starts 'in our future': they are in
    every window that ends after them, ours included."""
    JobStart.objects.create(name=RATED, limit_key="a", started_at=t0 + dt.timedelta(seconds=10))
    JobStart.objects.create(name=RATED, limit_key="a", started_at=t0 + dt.timedelta(seconds=20))
    enqueue(RATED, {"tenant": "a"})
    enqueue(RATED, {"tenant": "b"})
    assert tenants(claimed_at(t0)) == ["b"]


def test_the_tick_honours_rate_limits(t0):
    for index in range(5):
        enqueue(RATED, {"tenant": "a", "key": str(index)})
    assert jobs.tick(now=t0).claimed == 2
    assert jobs.tick(now=t0 + dt.timedelta(seconds=59)).claimed == 0
    assert jobs.tick(now=t0 + dt.timedelta(seconds=60)).claimed == 2


# --- jobs over their limit, and the jobs behind them -----------------------------------


def test_jobs_over_their_limit_are_left_exactly_as_they_were(t0):
    rows = [enqueue(RATED, {"tenant": "a", "key": str(index)}) for index in range(6)]
    before = {
        row["id"]: row
        for row in Job.objects.values("id", "status", "attempts", "run_at", "worker_id")
    }
    claimed = claimed_at(t0)
    assert len(claimed) == 2
    after = {
        row["id"]: row
        for row in Job.objects.values("id", "status", "attempts", "run_at", "worker_id")
    }
    untouched = [row.pk for row in rows if row.pk not in {job.id for job in claimed}]
    assert len(untouched) == 4
    assert all(after[pk] == before[pk] for pk in untouched)


@pytest.mark.parametrize("job", [PER_TENANT, RATED])
def test_a_saturated_backlog_does_not_hold_up_another_key(t0, job):
    """10,000 due rows of saturated tenant A, first in claim order: one claim of a single
    job still finds tenant B's, behind them all."""
    jobs.enqueue_many(
        job, [{"tenant": "A", "key": str(i)} for i in range(10_000)], run_at=early(t0), priority=9
    )
    assert tenants(claimed_at(t0, limit=2)) == ["A", "A"]  # A is at its limit now
    enqueue(job, {"tenant": "B"})
    assert tenants(claimed_at(t0, limit=1)) == ["B"]
    assert Job.objects.filter(limit_key="A", status="pending", attempts=0).count() == 9_998


def test_a_lost_hint_costs_one_empty_claim_not_a_violation(t0):
    """FlowLock rows deleted by hand: the first claim picks saturated A's row, counts,
    claims nothing and writes the hint back; the next one finds B."""
    jobs.enqueue_many(RATED, [{"tenant": "A", "key": str(i)} for i in range(5)], run_at=early(t0))
    assert len(claimed_at(t0)) == 2
    enqueue(RATED, {"tenant": "B"}, run_at=timezone.now())
    FlowLock.objects.all().delete()
    assert claimed_at(t0, limit=1) == []
    assert FlowLock.objects.get(limit_key="A").blocked_until == _minute_after_first_start()
    assert tenants(claimed_at(t0, limit=1)) == ["B"]


def _minute_after_first_start():
    first = JobStart.objects.filter(limit_key="A").order_by("started_at").first()
    return first.started_at + dt.timedelta(minutes=1)


def test_limited_names_take_the_locked_step_and_can_be_left_out():
    assert is_capped(PER_TENANT) and is_capped(RATED) and is_capped(BY_REGION)
    assert not is_capped(test_jobs.record.name)
    request = claim_request(timezone.now(), queues=None, limit=5, worker_id="w")
    assert set(request.limited) >= {PER_TENANT, RATED, NAME_RATED, BY_REGION}
    assert not set(request.limited) & set(request.names)
    skipped = claim_request(
        timezone.now(), queues=None, limit=5, worker_id="w", include_capped=False
    )
    assert not skipped.limited and not skipped.capped


# --- the count under the lock ----------------------------------------------------------


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite serialises limited claims (BEGIN IMMEDIATE)"
)
@pytest.mark.parametrize("job", [PER_TENANT, RATED])
def test_a_claim_counts_what_another_claim_committed_before_it_got_the_key(monkeypatch, t0, job):
    """Claim X has read its candidate (tenant A's top job) and not yet locked A's key
    when claim Y takes A's whole allowance and commits. X then locks and counts: it must
    see Y's claims and take nothing, even on a REPEATABLE READ connection."""
    from tests.db.claiming.test_claiming import repeatable_read

    for key in ("a", "b"):
        enqueue(job, {"tenant": "A", "key": key}, queue="other")
    enqueue(job, {"tenant": "A", "key": "top"}, priority=10)
    backend = import_module(f"django_cronqueue.claiming.{VENDOR_MODULES[connection.vendor]}")
    paused, resume = threading.Event(), threading.Event()
    seen: dict = {}
    real_lock_keys = backend.lock_keys

    def pausing_lock_keys(cursor, keys):
        if threading.current_thread().name == "x-claimer":
            paused.set()
            assert resume.wait(30)
        return real_lock_keys(cursor, keys)

    def x_claimer():
        wrapper = connections[database_alias()]
        options = repeatable_read(wrapper.settings_dict.get("OPTIONS", {}))
        wrapper.settings_dict = {**wrapper.settings_dict, "OPTIONS": options}
        try:
            seen["claimed"] = claim(
                claim_request(t0, queues=None, limit=1, worker_id="x"), using=database_alias()
            )
        except BaseException as exc:
            seen["error"] = exc
        finally:
            paused.set()
            wrapper.close()

    monkeypatch.setattr(backend, "lock_keys", pausing_lock_keys)
    claimer = threading.Thread(target=x_claimer, name="x-claimer")
    claimer.start()
    try:
        assert paused.wait(30)
        taken = claim(
            claim_request(t0, queues=["other"], limit=5, worker_id="y"), using=database_alias()
        )
        assert len(taken) == 2
    finally:
        resume.set()
        claimer.join(30)
    assert "error" not in seen, seen
    assert seen["claimed"] == []
    assert Job.objects.filter(name=job, status="running").count() == 2
    assert Job.objects.get(payload__key="top").status == "pending"


# --- statements -------------------------------------------------------------------------


def statements_of(run) -> list[str]:
    """The SQL statements ``run`` executes, transaction control (SQLite's explicit BEGIN
    and COMMIT) aside."""
    statements: list[str] = []

    def capture(execute, sql, params, many, context):
        if not sql.startswith(("BEGIN", "COMMIT", "ROLLBACK", "SET TRANSACTION")):
            statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        run()
    return statements


def test_a_limited_claim_costs_a_few_statements_whatever_it_takes(t0):
    """Candidates, lock, count, writes: the writes are one statement on PostgreSQL; on
    MySQL and SQLite one each (UPDATE, INSERT of the starts, the saturated keys' hint).
    SQLite has no key rows to lock."""
    for tenant in "abcdef":
        for index in range(3):
            enqueue(RATED, {"tenant": tenant, "key": str(index)})
    request = claim_request(t0, queues=None, limit=20, worker_id="w")._replace(names=[], capped={})
    found: list = []
    statements = statements_of(lambda: found.extend(claim(request, using=database_alias())))
    assert len(found) == 12
    expected = {"postgresql": 4, "mysql": 6, "sqlite": 5}[connection.vendor]
    assert len(statements) <= expected, statements


def test_names_without_limits_keep_their_one_statement_claim(t0):
    enqueue(test_jobs.record, {"key": "k"})
    request = claim_request(t0, queues=None, limit=5, worker_id="w", include_capped=False)
    statements = statements_of(lambda: claim(request, using=database_alias()))
    expected = 1 if connection.vendor in ("postgresql", "sqlite") else 2
    assert len(statements) == expected, statements
    assert not any(flow.FLOW_TABLE in sql or flow.START_TABLE in sql for sql in statements)


# --- pruning ----------------------------------------------------------------------------


def test_pruning_keeps_what_a_window_can_still_count(t0):
    window = dt.timedelta(minutes=1)
    keep = t0 - window - START_MARGIN + dt.timedelta(seconds=1)
    drop = t0 - window - START_MARGIN - dt.timedelta(seconds=1)
    for at in (keep, drop, t0):
        JobStart.objects.create(name=RATED, limit_key="a", started_at=at)
    JobStart.objects.create(name="gone.job", limit_key="", started_at=t0 - dt.timedelta(hours=2))
    JobStart.objects.create(name="gone.job", limit_key="", started_at=t0 - FLOW_IDLE_AGE * 2)
    FlowLock.objects.create(name=RATED, limit_key="idle")
    FlowLock.objects.create(name=RATED, limit_key="old", blocked_until=t0 - FLOW_IDLE_AGE * 2)
    FlowLock.objects.create(name=RATED, limit_key="blocked", blocked_until=t0)
    assert prune_flow(t0) == 4  # a start of each name, two lock rows
    assert sorted(JobStart.objects.filter(name=RATED).values_list("started_at", flat=True)) == [
        keep,
        t0,
    ]
    assert JobStart.objects.filter(name="gone.job").count() == 1
    assert list(FlowLock.objects.values_list("limit_key", flat=True)) == ["blocked"]


def test_a_hostile_limit_key_reaches_the_database_only_as_a_parameter(t0):
    hostile = "x'); DROP TABLE django_cronqueue_job; -- %s \\' \""
    for index in range(3):
        enqueue(RATED, {"tenant": hostile, "key": str(index)})
        enqueue(PER_TENANT, {"tenant": hostile, "key": str(index)})
    statements = statements_of(lambda: claimed_at(t0))
    assert Job.objects.filter(limit_key=hostile, status="running").count() == 4
    assert statements and not [sql for sql in statements if "DROP TABLE" in sql]
    assert JobStart.objects.filter(name=RATED, limit_key=hostile).count() == 2


def test_paused_names_and_queues_are_not_claimed_by_the_limited_step(t0):
    enqueue(RATED, {"tenant": "a"})
    enqueue(PER_TENANT, {"tenant": "a"}, queue="slow")
    enqueue(BY_REGION, {"address": {"region": "eu"}})
    jobs.pause(name=RATED)
    jobs.pause(queue="slow", until=t0 + dt.timedelta(minutes=1))
    jobs.pause(queue="elsewhere")
    assert [job.name for job in claimed_at(t0)] == [BY_REGION]
    assert claimed_at(t0) == []
    jobs.resume(name=RATED)
    assert [job.name for job in claimed_at(t0)] == [RATED]
    assert [job.name for job in claimed_at(t0 + dt.timedelta(minutes=1))] == [PER_TENANT]


LOCK_WAITS = {
    "postgresql": "SELECT COUNT(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
    # MariaDB's innodb_trx may not list a statement waiting for its first lock yet.
    "mysql": "SELECT COUNT(*) FROM information_schema.processlist "
    "WHERE db = DATABASE() AND command = 'Query' AND id <> CONNECTION_ID()",
}


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite serialises writers")
def test_pruning_lock_rows_waits_for_a_claim_holding_them_without_deadlocking(t0):
    """A claim locks its keys' FlowLock rows in (name, key) order. A prune of idle lock
    rows meanwhile (another worker's first pass) waits for the key the claim holds, and
    holds no key the claim locks next: both finish, and the idle rows go."""
    FlowLock.objects.create(name=PER_TENANT, limit_key="b")  # the lower id
    FlowLock.objects.create(name=PER_TENANT, limit_key="a")
    backend = import_module(f"django_cronqueue.claiming.{VENDOR_MODULES[connection.vendor]}")
    claimer = connections.create_connection(database_alias())
    outcome: dict = {}

    def pruner():
        try:
            outcome["deleted"] = prune_flow(t0)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connections[database_alias()].close()

    thread = threading.Thread(target=pruner)
    try:
        claimer.set_autocommit(False)
        with claimer.cursor() as cursor:
            backend.lock_keys(cursor, [(PER_TENANT, "a")])
            thread.start()
            wait_until(lambda: lock_waits() == 1, timeout=10, interval=0.05)
            time.sleep(0.3)  # the prune's statement reaches the lock it waits for
            backend.lock_keys(cursor, [(PER_TENANT, "b")])
        claimer.commit()
    finally:
        claimer.rollback()
        claimer.close()
        thread.join(30)
    assert "error" not in outcome, outcome
    assert outcome["deleted"] == 2
    assert not FlowLock.objects.exists()


def lock_waits() -> int:
    with connection.cursor() as cursor:
        cursor.execute(LOCK_WAITS[connection.vendor])
        return cursor.fetchone()[0]
