"""django_cronqueue/leases.py: a job claimed in advance starts only while its lease
holds, by the worker's clock, or once renewed under its own claim."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue.claiming import claim_due
from django_cronqueue.housekeeping.maintenance import recover_expired_leases
from django_cronqueue.models import Job
from django_cronqueue.worker.leases import lease_holds, renew_held_leases
from tests.db.row_locks import row_held_elsewhere
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = dt.timedelta(seconds=30)


def claim(now):
    [claimed] = claim_due(now, queues=None, limit=1, worker_id="w")
    return claimed


def test_a_claim_knows_its_lease_and_a_fresh_one_starts_without_a_query():
    JobFactory()
    now = timezone.now()
    job = claim(now)
    row = Job.objects.get(pk=job.id)
    assert job.lease_until == row.locked_until
    with CaptureQueriesContext(connection) as queries:
        assert lease_holds(job, now, LEASE) is True
    assert queries.captured_queries == []


def test_a_lease_near_its_end_is_renewed_while_the_row_is_still_this_claims():
    JobFactory()
    now = timezone.now()
    job = claim(now)
    later = job.lease_until - LEASE / 4  # less than half a lease left
    assert lease_holds(job, later, LEASE) is True
    assert job.lease_until == later + LEASE
    assert Job.objects.get(pk=job.id).locked_until == later + LEASE


def test_a_lease_that_ran_out_and_was_taken_over_is_not_started():
    JobFactory()
    now = timezone.now()
    job = claim(now)
    after = job.lease_until + dt.timedelta(seconds=1)  # the worker was stopped meanwhile
    assert recover_expired_leases(after) == 1
    again = claim(after)  # another worker's claim of the row
    assert lease_holds(job, after, LEASE) is False
    row = Job.objects.get(pk=job.id)
    assert (row.status, row.lock_token, row.locked_until) == (
        "running",
        again.token,
        again.lease_until,
    )


def test_a_heartbeat_sets_the_known_lease_end_of_the_rows_it_renewed():
    JobFactory.create_batch(2)
    now = timezone.now()
    first, second = claim_due(now, queues=None, limit=2, worker_id="w")
    renew_held_leases([first, second], until=now + 2 * LEASE)
    assert first.lease_until == second.lease_until == now + 2 * LEASE
    Job.objects.filter(pk=second.id).update(lock_token="someone-else")
    renew_held_leases([first, second], until=now + 3 * LEASE)
    assert (first.lease_until, second.lease_until) == (now + 3 * LEASE, now + 2 * LEASE)
    assert lease_holds(second, now + 2 * LEASE, LEASE) is False  # not started


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no row locks")
def test_a_heartbeat_leaves_a_row_another_transaction_holds_to_its_next_beat():
    """The statement that writes a claim's outcome holds its rows while the heartbeat
    renews the same claims: the renewal must not wait on them (two UPDATEs of the same
    rows, locking them in different orders, deadlock)."""
    JobFactory.create_batch(2)
    now = timezone.now()
    first, second = claim_due(now, queues=None, limit=2, worker_id="w")
    claimed_until = second.lease_until
    with row_held_elsewhere(second.id):
        renew_held_leases([first, second], until=now + 2 * LEASE)
        assert (first.lease_until, second.lease_until) == (now + 2 * LEASE, claimed_until)
        assert Job.objects.get(pk=second.id).locked_until == claimed_until
    renew_held_leases([first, second], until=now + 3 * LEASE)
    assert first.lease_until == second.lease_until == now + 3 * LEASE
