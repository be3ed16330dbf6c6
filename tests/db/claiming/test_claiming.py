"""Claiming: complete_and_claim (a slot's quick successes written with its next claim),
and the capped claim's transaction whatever the connection's isolation level."""

import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import base, claim, claim_request, complete_and_claim
from django_cronqueue.conf import database_alias
from django_cronqueue.models import Job, NameLock
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def request(limit, include_capped=False):
    now = timezone.now()
    return claim_request(
        now, queues=None, limit=limit, worker_id="w", include_capped=include_capped
    )


def test_successes_are_written_and_more_jobs_claimed_in_one_call():
    for i in range(5):
        jobs.enqueue(test_jobs.record, {"key": f"k{i}"})
    first, written = complete_and_claim(
        request(2), [], finished_at=timezone.now(), using=database_alias()
    )
    assert len(first) == 2 and written == set()
    second, written = complete_and_claim(
        request(3), first, finished_at=timezone.now(), using=database_alias()
    )
    assert written == {job.id for job in first}
    assert len(second) == 3
    assert Job.objects.filter(status="succeeded").count() == 2
    assert Job.objects.filter(status="running").count() == 3
    assert {job.id for job in second}.isdisjoint(written)


def test_a_success_whose_lease_was_lost_is_not_written():
    job = jobs.enqueue(test_jobs.record, {"key": "k"})
    [claimed] = complete_and_claim(
        request(1), [], finished_at=timezone.now(), using=database_alias()
    )[0]
    Job.objects.filter(pk=job.pk).update(lock_token="someone-else")
    _, written = complete_and_claim(
        request(1), [claimed], finished_at=timezone.now(), using=database_alias()
    )
    assert written == set()
    job.refresh_from_db()
    assert job.status == "running"


def test_successes_are_written_even_when_nothing_is_left_to_claim():
    jobs.enqueue(test_jobs.record, {"key": "k"})
    claimed, _ = complete_and_claim(
        request(5), [], finished_at=timezone.now(), using=database_alias()
    )
    more, written = complete_and_claim(
        request(5), claimed, finished_at=timezone.now(), using=database_alias()
    )
    assert more == [] and written == {claimed[0].id}
    assert Job.objects.get().status == "succeeded"


# --- the capped claim's isolation ---------------------------------------------------


def repeatable_read(options: dict) -> dict:
    if connection.vendor == "postgresql":
        from django.db.backends.postgresql.psycopg_any import IsolationLevel

        return {**options, "isolation_level": IsolationLevel.REPEATABLE_READ}
    return {**options, "isolation_level": "repeatable read"}


def transaction_isolation() -> str:
    """This thread's connection's isolation level, as a transaction sees it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW default_transaction_isolation")
            default = cursor.fetchone()[0]
            raw_level = connection.connection.isolation_level
            return raw_level.name.lower().replace("_", " ") if raw_level else default
        cursor.execute("SELECT @@tx_isolation")
        return cursor.fetchone()[0].lower().replace("-", " ")


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite serialises capped claims (BEGIN IMMEDIATE)"
)
def test_a_capped_claim_counts_the_rows_claimed_meanwhile_even_at_repeatable_read(monkeypatch):
    """Two claims of a name capped at 2 interleave: the first has begun its transaction
    and read the running counts (none) when the second claims two rows and commits. The
    first then locks the name and counts again: it must see those two rows, even on a
    connection set to REPEATABLE READ (whose snapshot predates them), and claim none."""
    capped = test_jobs.capped.name
    NameLock.objects.create(name=capped)
    for key in ("a", "b"):
        jobs.enqueue(capped, {"key": key}, queue="other")
    jobs.enqueue(capped, {"key": "c"}, priority=10)
    now = timezone.now()
    paused, resume = threading.Event(), threading.Event()
    seen: dict = {}
    real_saturated_names = base.saturated_names

    def pausing_saturated_names(cursor, names):
        full = real_saturated_names(cursor, names)
        if threading.current_thread().name == "rr-claimer":
            paused.set()
            assert resume.wait(30)
        return full

    def rr_claimer():
        wrapper = connections[database_alias()]
        options = repeatable_read(wrapper.settings_dict.get("OPTIONS", {}))
        wrapper.settings_dict = {**wrapper.settings_dict, "OPTIONS": options}
        try:
            seen["isolation"] = transaction_isolation()
            request = claim_request(now, queues=None, limit=1, worker_id="rr")
            seen["claimed"] = claim(request, using=database_alias())
        except BaseException as exc:
            seen["error"] = exc
        finally:
            paused.set()
            wrapper.close()

    monkeypatch.setattr(base, "saturated_names", pausing_saturated_names)
    claimer = threading.Thread(target=rr_claimer, name="rr-claimer")
    claimer.start()
    try:
        assert paused.wait(30)
        taken = claim(
            claim_request(now, queues=["other"], limit=2, worker_id="rc"), using=database_alias()
        )
        assert len(taken) == 2
    finally:
        resume.set()
        claimer.join(30)

    assert "error" not in seen, seen
    assert seen["isolation"] == "repeatable read"
    assert seen["claimed"] == []
    assert Job.objects.filter(name=capped, status="running").count() == 2
