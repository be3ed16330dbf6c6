"""The claim floor (``claiming.floor``): while a transaction is held open, a worker's
claims start after the last row it claimed, and a full claim every poll interval still
finds what the floor skips. Claims after a floor on the three databases; the hold, the
dead index entries it keeps and the worker on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import ClaimFloor, claim, claim_request, complete_and_claim
from django_cronqueue.claiming import floor as floor_module
from django_cronqueue.claiming.base import ORDER, TABLE, due_filter
from django_cronqueue.claiming.floor import ClaimFloors
from django_cronqueue.conf import database_alias
from django_cronqueue.models import Job
from django_cronqueue.worker import Worker as RunjobsWorker
from django_cronqueue.worker.storage_watch import HoldWatch
from tests.db.observe.test_storage_health import transaction_held_open
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="held transactions keep dead rows on PostgreSQL"
)
HOUR_AGO = dt.timedelta(hours=1)
DEAD_ENTRIES = 10_000
HELD_ROWS = 300_000  # finished while a transaction was held (the plan test)


def request(limit: int, after: ClaimFloor | None = None, include_capped: bool = False):
    return claim_request(
        timezone.now(),
        queues=None,
        limit=limit,
        worker_id="w",
        include_capped=include_capped,
        after=after,
    )


def floor_of(job: Job) -> ClaimFloor:
    return ClaimFloor(job.priority, job.run_at, job.pk)


def test_a_claim_after_a_floor_takes_the_rows_after_it_at_its_priority_only():
    start = timezone.now() - HOUR_AGO
    rows = [
        jobs.enqueue(test_jobs.record, {"key": f"k{i}"}, run_at=start + dt.timedelta(seconds=i))
        for i in range(5)
    ]
    urgent = jobs.enqueue(test_jobs.record, {"key": "urgent"}, priority=5, run_at=start)
    lower = jobs.enqueue(test_jobs.record, {"key": "lower"}, priority=-1, run_at=start)
    claimed = claim(request(10, after=floor_of(rows[1])), using=database_alias())
    assert [job.id for job in claimed] == [row.pk for row in rows[2:]]
    # A full claim takes what the floor left, in claim order.
    claimed = claim(request(10), using=database_alias())
    assert [job.id for job in claimed] == [urgent.pk, rows[0].pk, rows[1].pk, lower.pk]


def test_a_floor_leaves_the_capped_names_claim_alone():
    """Their rows wait behind their caps, not behind the floor."""
    start = timezone.now() - HOUR_AGO
    capped = jobs.enqueue(test_jobs.capped, {"key": "c"}, run_at=start)
    plain = jobs.enqueue(test_jobs.record, {"key": "p"}, run_at=start + dt.timedelta(seconds=1))
    later = jobs.enqueue(test_jobs.record, {"key": "l"}, run_at=start + dt.timedelta(seconds=2))
    claimed = claim(request(10, after=floor_of(plain), include_capped=True), using=database_alias())
    assert sorted(job.id for job in claimed) == sorted([capped.pk, later.pk])


def test_a_worker_s_floors_find_back_dated_and_urgent_rows_at_the_next_full_claim(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(floor_module.time, "monotonic", lambda: now[0])
    floors = ClaimFloors(full_every=1.0)
    floors.set_held(True)

    def worker_claim(limit: int) -> list[int]:
        floor = floors.take()
        claimed, _ = complete_and_claim(
            request(limit, after=floor), [], finished_at=timezone.now(), using=database_alias()
        )
        floors.advance(floor, claimed)
        return [job.id for job in claimed]

    start = timezone.now() - HOUR_AGO
    first = [
        jobs.enqueue(test_jobs.record, {"key": f"a{i}"}, run_at=start + dt.timedelta(seconds=i))
        for i in range(4)
    ]
    assert worker_claim(2) == [first[0].pk, first[1].pk]  # full: the floor starts
    back_dated = jobs.enqueue(test_jobs.record, {"key": "b"}, run_at=start - HOUR_AGO)
    urgent = jobs.enqueue(test_jobs.record, {"key": "u"}, priority=9)
    assert worker_claim(10) == [first[2].pk, first[3].pk]  # after the floor
    newer = jobs.enqueue(test_jobs.record, {"key": "n"})
    assert worker_claim(10) == [newer.pk]
    assert worker_claim(10) == []
    now[0] += 1.0
    assert worker_claim(10) == [urgent.pk, back_dated.pk]  # the interval's full claim
    assert Job.objects.filter(status="pending").count() == 0


@postgresql_only
def test_a_claim_after_the_floor_skips_the_dead_entries_a_held_transaction_keeps():
    """Every row claimed and finished while a transaction is held open leaves a claim
    index entry that nothing may remove yet: a claim from the head of the order reads
    them all, one after the floor reads past none."""
    with transaction_held_open():
        last = run_jobs(DEAD_ENTRIES)
        jobs.enqueue_many(test_jobs.noop.name, [{}] * 10)
        full = blocks_read(request(10))
        after = blocks_read(request(10, after=ClaimFloor(last.priority, last.run_at, last.id)))
    assert full > DEAD_ENTRIES / 50  # the index pages and heap pages of the dead entries
    assert after < 10  # a descent of the index, the page of the rows after the floor


@postgresql_only
def test_a_completion_finds_its_rows_by_id_beside_the_dead_entries_a_held_transaction_keeps():
    """The indexes on status hold an entry for every version of a row that ever ran. The
    statistics count a few live running rows: the completion must still find its rows by
    their ids, never through those entries."""
    with transaction_held_open():
        run_jobs(DEAD_ENTRIES)
        jobs.enqueue_many(test_jobs.noop.name, [{}] * 20)
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {TABLE}")
        running, _ = complete_and_claim(
            request(10), [], finished_at=timezone.now(), using=database_alias()
        )
        statements: list[tuple[str, list]] = []

        def capture(execute, sql, params, many, context):
            statements.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            complete_and_claim(
                request(10), running, finished_at=timezone.now(), using=database_alias()
            )
        [(sql, params)] = [statement for statement in statements if "WITH done" in statement[0]]
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            [[plan]] = cursor.fetchall()
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    [done] = [node for node in plan["Plans"] if node.get("Subplan Name") == "CTE done"]
    assert job_table_indexes(done) == {f"{TABLE}_pkey"}
    assert Job.objects.filter(status="succeeded").count() == DEAD_ENTRIES + 10


@postgresql_only
@pytest.mark.parametrize("queues", [None, ["default"]], ids=["all queues", "given queues"])
@pytest.mark.parametrize("floored", [False, True], ids=["from the head", "after a floor"])
def test_a_claim_reads_the_claim_index_only_beside_a_hold_s_dead_entries(queues, floored):
    """While held, the finished rows stay in the job table (their move to history waits)
    and an ANALYZE sees few pending rows beside them. A claim from the head planned to
    read the pending rows through the index of finished rows (whole before migration
    0021), then through the whole (queue, status) index (before 0022), and sort them all:
    every pending version since the hold began, and the whole backlog once one grows. A
    claim after the floor must start in the claim index, the only one in claim order."""
    with transaction_held_open():
        fill_as_a_held_drain_leaves_it()
        first = Job.objects.filter(status="pending").order_by("run_at", "id").first()
        plan = planned_claim(queues, after=floor_of(first) if floored else None)
    # The primary key finds the rows chosen, to lock and update them.
    assert job_table_indexes(plan) - {"django_cronqueue_job_pkey"} == {"cronqueue_job_claim"}
    assert not index_conditions_on(plan, ("name", "queue", "status"))


def fill_as_a_held_drain_leaves_it() -> None:
    """``HELD_ROWS`` rows enqueued, then finished, all while held; then 300 pending ones
    and fresh statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (name, payload, status, queue, priority, attempts, "
            "max_attempts, run_at, worker_id, last_error, traceback, created_at) "
            "SELECT %s, '{}'::jsonb, 'pending', 'default', 0, 0, 4, now(), '', '', '', now() "
            "FROM generate_series(1, %s)",
            [test_jobs.noop.name, HELD_ROWS],
        )
        cursor.execute(
            f"UPDATE {TABLE} SET status = 'succeeded', attempts = 1, finished_at = now()"
        )
        jobs.enqueue_many(test_jobs.noop.name, [{}] * 300)
        cursor.execute(f"ANALYZE {TABLE}")


def planned_claim(queues: list[str] | None, after: ClaimFloor | None) -> dict:
    """The plan of the claim statement a worker's slot runs (with no success to write)."""
    now = timezone.now()
    statements: list[tuple[str, list]] = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    claim = claim_request(
        now, queues=queues, limit=10, worker_id="w", include_capped=False, after=after
    )
    with connection.execute_wrapper(capture):
        complete_and_claim(claim, [], finished_at=now, using=database_alias())
    [(sql, params)] = [s for s in statements if "SKIP LOCKED" in s[0]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        [[plan]] = cursor.fetchall()
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def index_conditions_on(node: dict, columns: tuple[str, ...]) -> list[str]:
    """The index conditions under a plan node that test one of ``columns``."""
    found = [
        condition
        for condition in [node.get("Index Cond", "")]
        if any(f"({column})" in condition for column in columns)
    ]
    for child in node.get("Plans", []):
        found += index_conditions_on(child, columns)
    return found


def job_table_indexes(node: dict) -> set[str | None]:
    """The index of each scan of the job table under a plan node (None: no index)."""
    found = set()
    if node.get("Relation Name") == TABLE and "Scan" in node["Node Type"]:
        found.add(node.get("Index Name"))
    for child in node.get("Plans", []):
        found |= job_table_indexes(child)
    return found


def run_jobs(count: int):
    """Enqueue ``count`` jobs, then claim and complete them all as a worker's slot does;
    returns the last one claimed."""
    jobs.enqueue_many(test_jobs.noop.name, [{}] * count)
    done: list = []
    last = None
    while claimed := complete_and_claim(
        request(100), done, finished_at=timezone.now(), using=database_alias()
    )[0]:
        done, last = claimed, claimed[-1]
    complete_and_claim(request(0), done, finished_at=timezone.now(), using=database_alias())
    return last


def blocks_read(claim_request_: object) -> int:
    """Shared buffers read by the claim's selection of rows (run, not only planned)."""
    where, params = due_filter(claim_request_, claim_request_.names, names_as_array=True)
    sql = f"SELECT id FROM ONLY {TABLE} WHERE {where} {ORDER} LIMIT 10"
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        [[plan]] = cursor.fetchall()
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


@postgresql_only
def test_the_hold_watch_keeps_the_floor_from_the_hold_until_a_vacuum_after_it(monkeypatch, caplog):
    """What died while the transaction was open stays in the indexes until a vacuum
    removes it: the floor stays until one ended after the transaction did."""
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.HELD_AFTER", 0.5)
    floors = ClaimFloors(full_every=1.0)
    watch = HoldWatch(floors)

    def check() -> bool:
        watch.next_check = 0.0
        watch.check()
        return floors.held

    assert check() is False
    with caplog.at_level(logging.INFO, logger="django_cronqueue"):
        with transaction_held_open() as pid:
            run_jobs(100)
            time.sleep(1.0)
            assert check() is True
        assert check() is True  # ended, not vacuumed yet
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM {TABLE}")
        assert check() is False
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"(pid {pid}, idle in transaction)" in m and "claims start" in m for m in messages)
    assert any(m.startswith("The held transaction ended (") for m in messages)


@postgresql_only
def test_the_floor_is_left_at_most_some_minutes_after_the_hold_without_a_vacuum(monkeypatch):
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.HELD_AFTER", 0.5)
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.AFTER_HOLD_AT_MOST", dt.timedelta(0))
    floors = ClaimFloors(full_every=1.0)
    watch = HoldWatch(floors)
    with transaction_held_open():
        time.sleep(1.0)
        watch.check()
        assert floors.held is True
    watch.next_check = 0.0
    watch.check()
    assert floors.held is False


@postgresql_only
def test_a_worker_under_a_held_transaction_runs_every_job_back_dated_and_urgent_ones_too(
    monkeypatch,
):
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.HELD_AFTER", 0.0)
    monkeypatch.setattr("django_cronqueue.worker.storage_watch.HOLD_CHECK_EVERY", 0.1)
    worker = RunjobsWorker(poll_interval=0.2, concurrency=2)
    errors: list[BaseException] = []

    def feed_and_stop() -> None:
        try:
            wait_for(lambda: worker.floors.held, "the worker to see the hold")
            jobs.enqueue_many(test_jobs.noop.name, [{}] * 200)
            wait_for(lambda: not Job.objects.filter(status="pending").exists(), "the drain")
            jobs.enqueue(test_jobs.noop, run_at=timezone.now() - HOUR_AGO)
            jobs.enqueue(test_jobs.noop, priority=9)
            jobs.enqueue_many(test_jobs.noop.name, [{}] * 50)
            wait_for(lambda: not Job.objects.exclude(status="succeeded").exists(), "the rest")
            assert worker.floors.held
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
        finally:
            worker.stop()

    with transaction_held_open():
        feeder = threading.Thread(target=feed_and_stop)
        feeder.start()
        assert worker.run() == 0
        feeder.join(10)
    assert errors == []
    assert Job.objects.filter(status="succeeded").count() == 252


def wait_for(condition, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
