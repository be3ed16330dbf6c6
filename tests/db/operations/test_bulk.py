"""django_cronqueue.operations.bulk: the operator actions on a whole queryset, in batches: what they
change, what they skip and why, and what they cost."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_cronqueue import lifecycle
from django_cronqueue.models import Job, JobDependency
from django_cronqueue.operations import bulk
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(rows):
    return dict(Job.objects.filter(pk__in=[r.pk for r in rows]).values_list("pk", "status"))


def test_retry_jobs_retries_the_failed_and_cancelled_jobs_and_counts_the_rest():
    past = timezone.now() - dt.timedelta(hours=1)
    failed = JobFactory.create_batch(
        3, status="failed", attempts=4, finished_at=past, dedupe_key="f", worker_id="w"
    )
    Job.objects.filter(pk__in=[failed[1].pk, failed[2].pk]).update(dedupe_key=None)
    cancelled = JobFactory(status="cancelled", finished_at=past)
    running = JobFactory(status="running")
    succeeded = JobFactory.create_batch(2, status="succeeded")
    now = timezone.now()
    outcome = bulk.retry_jobs(Job.objects.all(), now=now, batch_size=2)
    retried = [*failed, cancelled]
    assert outcome.changed == bulk.Tally(4, sorted(job.pk for job in retried))
    assert outcome.not_applicable == {
        "running": bulk.Tally(1, [running.pk]),
        "succeeded": bulk.Tally(2, [job.pk for job in succeeded]),
    }
    assert outcome.dedupe_key_taken.count == outcome.changed_meanwhile.count == 0
    rows = Job.objects.filter(pk__in=[job.pk for job in retried]).values_list(
        "status", "attempts", "run_at", "finished_at", "worker_id"
    )
    assert set(rows) == {("pending", 0, now, None, "")}
    assert Job.objects.get(pk=failed[0].pk).active_dedupe_key == "f"
    assert statuses([running, *succeeded]) == {
        running.pk: "running",
        **{job.pk: "succeeded" for job in succeeded},
    }


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_retry_jobs_leaves_the_jobs_whose_dedupe_key_is_taken(batch_size):
    holder = JobFactory(dedupe_key="held", active_dedupe_key="held")
    blocked = JobFactory(status="failed", dedupe_key="held")
    first, second = JobFactory.create_batch(2, status="cancelled", dedupe_key="twice")
    other_name = JobFactory(name="testapp.noop", status="failed", dedupe_key="held")
    outcome = bulk.retry_jobs(Job.objects.exclude(pk=holder.pk), batch_size=batch_size)
    assert outcome.changed == bulk.Tally(2, [first.pk, other_name.pk])
    assert outcome.dedupe_key_taken == bulk.Tally(2, [blocked.pk, second.pk])
    assert statuses([blocked, first, second, other_name]) == {
        blocked.pk: "failed",
        first.pk: "pending",
        second.pk: "cancelled",
        other_name.pk: "pending",
    }


def test_retry_jobs_goes_row_by_row_when_a_key_is_taken_after_it_was_checked(monkeypatch):
    keyed = JobFactory(status="failed", dedupe_key="k")
    plain = JobFactory(status="failed")
    checked = bulk._split_by_dedupe_key

    def check_then_race(rows):
        result = checked(rows)
        JobFactory(dedupe_key="k", active_dedupe_key="k")  # enqueued meanwhile
        return result

    monkeypatch.setattr(bulk, "_split_by_dedupe_key", check_then_race)
    outcome = bulk.retry_jobs(Job.objects.filter(pk__in=[keyed.pk, plain.pk]))
    assert outcome.changed == bulk.Tally(1, [plain.pk])
    assert outcome.dedupe_key_taken == bulk.Tally(1, [keyed.pk])
    assert statuses([keyed, plain]) == {keyed.pk: "failed", plain.pk: "pending"}


def test_cancel_jobs_cancels_the_pending_jobs_with_the_reason():
    pending = JobFactory.create_batch(3, dedupe_key=None)
    keyed = JobFactory(dedupe_key="d", active_dedupe_key="d")
    failed = JobFactory(status="failed")
    now = timezone.now()
    outcome = bulk.cancel_jobs(Job.objects.all(), reason="bad\x00 batch", now=now)
    assert outcome.changed.count == 4
    assert outcome.not_applicable == {"failed": bulk.Tally(1, [failed.pk])}
    rows = Job.objects.filter(pk__in=[job.pk for job in [*pending, keyed]]).values_list(
        "status", "finished_at", "last_error", "active_dedupe_key"
    )
    assert set(rows) == {("cancelled", now, "bad\\x00 batch", None)}


def test_cancel_jobs_asks_the_running_jobs_to_stop_and_records_who_asked():
    pending = JobFactory()
    running = JobFactory.create_batch(2, status="running", attempts=1)
    asked_before = JobFactory(
        status="running", cancel_requested_at=timezone.now(), cancel_requested_by="earlier"
    )
    now = timezone.now()
    outcome = bulk.cancel_jobs(Job.objects.all(), reason="duplicate", by="ops (admin)", now=now)
    assert outcome.changed == bulk.Tally(1, [pending.pk])
    assert outcome.requested == bulk.Tally(2, [job.pk for job in running])
    assert outcome.already_requested == bulk.Tally(1, [asked_before.pk])
    assert outcome.not_applicable == {}
    rows = Job.objects.filter(pk__in=[job.pk for job in running]).values_list(
        "status", "cancel_requested_at", "cancel_requested_by", "cancel_reason"
    )
    assert set(rows) == {("running", now, "ops (admin)", "duplicate")}
    assert Job.objects.get(pk=asked_before.pk).cancel_requested_by == "earlier"
    assert Job.objects.get(pk=pending.pk).last_error == "cancelled by ops (admin): duplicate"


@pytest.mark.parametrize(
    ("reason", "by", "text"),
    [
        ("", "", "cancelled"),
        ("duplicate", "", "duplicate"),
        ("", "ops (admin)", "cancelled by ops (admin)"),
        ("duplicate", "ops (admin)", "cancelled by ops (admin): duplicate"),
    ],
)
def test_the_last_error_of_a_cancelled_pending_job(reason, by, text):
    assert lifecycle.cancel_text(reason, by) == text


def test_run_jobs_now_makes_the_pending_jobs_due():
    later = timezone.now() + dt.timedelta(days=1)
    pending = JobFactory.create_batch(3, run_at=later)
    failed = JobFactory(status="failed", run_at=later)
    now = timezone.now()
    outcome = bulk.run_jobs_now(Job.objects.all(), now=now, batch_size=2)
    assert outcome.changed == bulk.Tally(3, [job.pk for job in pending])
    assert outcome.not_applicable == {"failed": bulk.Tally(1, [failed.pk])}
    assert set(Job.objects.filter(status="pending").values_list("run_at", flat=True)) == {now}
    assert Job.objects.get(pk=failed.pk).run_at == later


def read_then(change, monkeypatch):
    """Between reading each batch and its UPDATE, ``change()`` happens (a worker)."""
    read = bulk._batches

    def read_then_change(jobs, size):
        for batch in read(jobs, size):
            change()
            yield batch

    monkeypatch.setattr(bulk, "_batches", read_then_change)


def test_a_job_that_changed_after_it_was_read_is_counted_as_such(monkeypatch):
    """Between reading a batch and its UPDATE a worker runs a job to its end: the UPDATE,
    guarded by status, leaves it alone, and the outcome counts it."""
    done, other = JobFactory.create_batch(2)
    read_then(lambda: Job.objects.filter(pk=done.pk).update(status="succeeded"), monkeypatch)
    outcome = bulk.cancel_jobs(Job.objects.all())
    assert (outcome.changed.count, outcome.changed_meanwhile.count) == (1, 1)
    assert outcome.requested.count == 0
    assert statuses([done, other]) == {done.pk: "succeeded", other.pk: "cancelled"}


def test_a_pending_job_claimed_after_it_was_read_is_asked_to_stop(monkeypatch):
    """As ``jobs.cancel()`` does: a job that a worker claimed meanwhile is running, so
    its handler is asked to stop."""
    claimed, other = JobFactory.create_batch(2)
    read_then(lambda: Job.objects.filter(pk=claimed.pk).update(status="running"), monkeypatch)
    outcome = bulk.cancel_jobs(Job.objects.all(), by="ops")
    assert (outcome.changed.count, outcome.requested.count) == (1, 1)
    assert outcome.changed_meanwhile.count == 0
    assert statuses([claimed, other]) == {claimed.pk: "running", other.pk: "cancelled"}
    assert Job.objects.get(pk=claimed.pk).cancel_requested_by == "ops"


def recorder():
    """An ``on_batch`` that keeps what each batch named, and whether it ran inside a
    transaction."""
    calls = []

    def on_batch(changes):
        calls.append((changes.changed, changes.requested, connection.in_atomic_block))

    return calls, on_batch


def test_on_batch_names_each_batchs_changed_jobs_inside_its_transaction():
    failed = JobFactory.create_batch(5, status="failed", finished_at=timezone.now())
    running = JobFactory(status="running")
    calls, on_batch = recorder()
    bulk.retry_jobs(Job.objects.all(), batch_size=2, on_batch=on_batch)
    named = [(job.pk, job.name) for job in failed]
    # the batch of the running job and the last failed one names only the latter
    assert calls == [
        (named[0:2], [], True),
        (named[2:4], [], True),
        (named[4:5], [], True),
    ]
    assert running.pk not in {pk for changed, _, _ in calls for pk, _ in changed}


def test_on_batch_names_only_the_jobs_an_update_changed(monkeypatch):
    """A job claimed after its batch was read is asked to stop, not cancelled; one that
    finished meanwhile is neither: each named where it belongs (read back by the values
    the UPDATE set)."""
    claimed, finished, other = JobFactory.create_batch(3)

    def workers_act():
        Job.objects.filter(pk=claimed.pk).update(status="running")
        Job.objects.filter(pk=finished.pk).update(status="succeeded")

    read_then(workers_act, monkeypatch)
    calls, on_batch = recorder()
    outcome = bulk.cancel_jobs(Job.objects.all(), on_batch=on_batch)
    assert calls == [([(other.pk, other.name)], [(claimed.pk, claimed.name)], True)]
    assert (outcome.changed.count, outcome.requested.count) == (1, 1)
    assert outcome.changed_meanwhile.count == 1


def test_run_now_names_the_jobs_it_made_due(monkeypatch):
    due, claimed = JobFactory.create_batch(2)
    read_then(lambda: Job.objects.filter(pk=claimed.pk).update(status="running"), monkeypatch)
    calls, on_batch = recorder()
    outcome = bulk.run_jobs_now(Job.objects.all(), on_batch=on_batch)
    assert calls == [([(due.pk, due.name)], [], True)]
    assert outcome.changed_meanwhile.count == 1


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        bulk.retry_jobs(Job.objects.all(), batch_size=0)


@pytest.mark.parametrize(
    ("action", "status", "keyed"),
    [
        (bulk.retry_jobs, "failed", False),
        (bulk.retry_jobs, "cancelled", True),
        (bulk.cancel_jobs, "pending", False),
        (bulk.cancel_jobs, "running", False),
        (bulk.run_jobs_now, "pending", False),
    ],
)
def test_set_based_actions_cost_a_few_queries_per_batch(action, status, keyed):
    """3,000 rows: six batches of 500, each a read, a dedupe-key check (retry of keyed
    rows), the rows locked, the UPDATE, the batch's transaction (and within it, for a
    retry, the savepoint that an IntegrityError rolls back), and for a retry the lock of the
    counts of finished rows (made by the first one), the read of what the retried rows wait
    for (their batch callbacks, their upstream jobs: jobs.chain, jobs.group) and on MariaDB
    the move of the retried rows back to the hot partition, then one read that finds no
    more and a NOTIFY (PostgreSQL): never a query per row."""
    Job.objects.bulk_create(
        JobFactory.build(status=status, dedupe_key=f"k{n}" if keyed else None) for n in range(3000)
    )
    with CaptureQueriesContext(connection) as captured:
        outcome = action(Job.objects.all())
    assert outcome.changed.count + outcome.requested.count == 3000
    batches = 3000 // bulk.BATCH_SIZE
    per_batch = 13 if action is bulk.retry_jobs and connection.vendor == "mysql" else 12
    assert len(captured) <= batches * per_batch + 4, "\n".join(q["sql"][:120] for q in captured)


def test_retrying_many_jobs_that_waited_for_others_costs_a_few_queries_per_batch():
    """A retried job with upstream jobs waits again for what it still waits for: 1,000
    of them (two batches) are settled by one UPDATE per outcome, never one per row (and
    each batch, in its own transaction, locks the counts of finished rows, whose row the
    first one makes)."""
    upstream = JobFactory(status="succeeded")
    waiting = Job.objects.bulk_create(
        JobFactory.build(status="cancelled", blocked=True, waiting_for=1) for _ in range(1000)
    )
    ids = list(Job.objects.exclude(pk=upstream.pk).values_list("pk", flat=True))
    JobDependency.objects.bulk_create(
        JobDependency(upstream_id=upstream.pk, downstream_id=pk) for pk in ids
    )
    with CaptureQueriesContext(connection) as captured:
        outcome = bulk.retry_jobs(Job.objects.filter(pk__in=ids))
    assert outcome.changed.count == len(waiting) == 1000
    assert len(captured) <= 2 * 15 + 4, "\n".join(q["sql"][:120] for q in captured)
    released = Job.objects.filter(pk__in=ids, status="pending", blocked=False, waiting_for=0)
    assert released.count() == 1000  # their upstream job had succeeded: due at once
