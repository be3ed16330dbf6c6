"""Workflows (SPEC section 11) on every database: signatures, chains, groups with their
callbacks, using(after=...), blocked jobs the claim never sees, failures that cancel the
downstream, and retries that let a batch complete."""

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs, lifecycle
from django_cronqueue.claiming import claim_due
from django_cronqueue.models import Job, JobDependency
from django_cronqueue.running import execution
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

record = test_jobs.record
fails_now = test_jobs.fails_now
collect_batch = test_jobs.collect_batch


@pytest.fixture(autouse=True)
def _forget_batches_seen():
    test_jobs.BATCHES_SEEN.clear()
    yield
    test_jobs.BATCHES_SEEN.clear()


def keys():
    return list(SideEffect.objects.order_by("id").values_list("key", flat=True))


def drain(limit=50):
    """Tick until nothing is claimed."""
    for _ in range(limit):
        if not jobs.tick().claimed:
            return
    raise AssertionError("still claiming after 50 ticks")


def status(job):
    job.refresh_from_db()
    return job.status


# --- signatures ----------------------------------------------------------------------


def test_a_signature_is_checked_when_it_is_made():
    with pytest.raises(jobs.InvalidPayload, match="'nope' is not an argument"):
        record.s(nope=1)
    with pytest.raises(jobs.InvalidPayload, match="'key' is missing"):
        record.s()
    with pytest.raises(TypeError, match=r"a signature \(\.s\(\)\) takes no dedupe_key"):
        record.using(dedupe_key="x").s(key="a")
    assert Job.objects.count() == 0


def test_a_workflow_takes_signatures_only():
    with pytest.raises(TypeError, match=r"takes signatures \(handle.s\(\*\*payload\)\)"):
        jobs.chain(record.s(key="a"), record)
    with pytest.raises(TypeError, match="takes signatures"):
        jobs.group([record.s(key="a")]).then("testapp.record")
    with pytest.raises(ValueError, match="at least one signature"):
        jobs.chain()


def test_signature_options_shape_the_row():
    later = timezone.now() + dt.timedelta(hours=1)
    [row] = jobs.chain(record.using(priority=5, queue="q", run_at=later).s(key="a")).enqueue()
    assert (row.priority, row.queue, row.run_at, row.blocked) == (5, "q", later, False)


# --- chains ------------------------------------------------------------------------


def test_a_chain_is_written_at_once_and_runs_in_order():
    first, second, third = jobs.chain(
        record.s(key="a"), record.s(key="b"), record.s(key="c")
    ).enqueue()
    assert [first.blocked, second.blocked, third.blocked] == [False, True, True]
    assert [first.has_downstream, second.has_downstream, third.has_downstream] == [
        True,
        True,
        False,
    ]
    assert set(JobDependency.objects.values_list("upstream_id", "downstream_id")) == {
        (first.pk, second.pk),
        (second.pk, third.pk),
    }
    drain()
    assert keys() == ["a", "b", "c"]
    assert [status(job) for job in (first, second, third)] == ["succeeded"] * 3


def test_the_claim_never_sees_a_blocked_job_however_overdue():
    _, second = jobs.chain(record.s(key="a"), record.s(key="b")).enqueue()
    Job.objects.filter(pk=second.pk).update(run_at=timezone.now() - dt.timedelta(days=1))
    claimed = claim_due(timezone.now(), queues=None, limit=10, worker_id="w")
    assert [job.name for job in claimed] == ["testapp.record"]
    assert second.pk not in {job.id for job in claimed}


def test_a_released_job_is_due_now_at_the_latest():
    _, second = jobs.chain(record.s(key="a"), record.s(key="b")).enqueue()
    before = timezone.now()
    jobs.tick()
    second.refresh_from_db()
    assert (second.blocked, second.waiting_for) == (False, 0)
    assert second.run_at >= before


def test_a_failure_cancels_the_rest_of_the_chain_naming_the_job_it_waited_for():
    _, second, third = jobs.chain(
        record.s(key="a"), fails_now.s(key="b"), record.s(key="c")
    ).enqueue()
    drain()
    assert keys() == ["a"]
    third.refresh_from_db()
    second.refresh_from_db()
    assert (second.status, third.status) == ("failed", "cancelled")
    assert third.last_error == f"upstream job #{second.pk} (testapp.fails_now) failed"


def test_cancelling_a_pending_upstream_cancels_its_downstream():
    first, second, third = jobs.chain(
        record.s(key="a"), record.s(key="b"), record.s(key="c")
    ).enqueue()
    assert jobs.cancel(first, reason="not today")
    assert [status(job) for job in (first, second, third)] == ["cancelled"] * 3
    second.refresh_from_db()
    third.refresh_from_db()
    assert second.last_error == f"upstream job #{first.pk} (testapp.record) was cancelled"
    assert third.last_error == f"upstream job #{second.pk} (testapp.record) was cancelled"


def test_retrying_the_failed_job_lets_the_chain_go_on():
    _, second, third = jobs.chain(
        record.s(key="a"), fails_now.s(key="b"), record.s(key="c")
    ).enqueue()
    drain()
    Job.objects.filter(pk=second.pk).update(name="testapp.record", payload={"key": "b"})
    second.refresh_from_db()
    assert second.retry()
    third.refresh_from_db()
    assert (third.status, third.blocked, third.last_error) == ("pending", True, "")
    drain()
    assert keys() == ["a", "b", "c"]


def test_a_job_reads_the_results_of_the_jobs_it_waited_for():
    test_jobs.UPSTREAM_SEEN.clear()
    first, _ = jobs.chain(
        test_jobs.returns_value.s(value=2), test_jobs.collect_upstream.s(key="chained")
    ).enqueue()
    a = test_jobs.returns_value.enqueue(value=5)
    b = record.enqueue(key="b")
    test_jobs.collect_upstream.using(after=[a, b]).enqueue(key="after")
    test_jobs.collect_upstream.enqueue(key="alone")
    drain()
    assert sorted(test_jobs.UPSTREAM_SEEN) == [
        ("after", {a.pk: {"doubled": 10}, b.pk: None}),
        ("alone", {}),
        ("chained", {first.pk: {"doubled": 4}}),
    ]


# --- groups --------------------------------------------------------------------------


def test_a_group_runs_its_then_callback_once_after_every_member_succeeded():
    batch = (
        jobs.group([test_jobs.returns_value.s(value=n) for n in range(3)])
        .then(collect_batch.s(key="then"))
        .finally_(collect_batch.s(key="finally"))
        .enqueue()
    )
    assert isinstance(batch, jobs.Batch)
    assert (batch.size, batch.succeeded, batch.failed, batch.finished_at) == (3, 0, 0, None)
    assert (batch.then_job.blocked, batch.finally_job.blocked) == (True, True)
    drain()
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed) == (3, 0)
    assert batch.finished_at is not None
    members = batch.member_ids
    results = {pk: {"doubled": 2 * n} for n, pk in enumerate(members)}
    assert sorted(test_jobs.BATCHES_SEEN) == [
        ("finally", 3, 3, 0, members, results),
        ("then", 3, 3, 0, members, results),
    ]
    assert keys().count("then") == 1


def test_a_failed_member_cancels_then_and_still_runs_finally():
    batch = (
        jobs.group([record.s(key="a"), fails_now.s(key="b"), record.s(key="c")])
        .then(collect_batch.s(key="then"))
        .finally_(collect_batch.s(key="finally"))
        .enqueue()
    )
    drain()
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed) == (2, 1)
    then_job, finally_job = batch.then_job, batch.finally_job
    failed = Job.objects.get(name="testapp.fails_now")
    assert then_job.status == "cancelled"
    assert then_job.last_error.startswith(f"upstream job #{failed.pk} (testapp.fails_now) failed")
    assert finally_job.status == "succeeded"
    assert [seen[0] for seen in test_jobs.BATCHES_SEEN] == ["finally"]


def test_retrying_a_failed_member_lets_the_batch_complete():
    batch = (
        jobs.group([record.s(key="a"), fails_now.s(key="b")])
        .then(collect_batch.s(key="then"))
        .enqueue()
    )
    drain()
    failed = Job.objects.get(name="testapp.fails_now")
    Job.objects.filter(pk=failed.pk).update(name="testapp.record", payload={"key": "b"})
    failed.refresh_from_db()
    assert failed.retry()
    batch.refresh_from_db()
    assert (batch.failed, batch.finished_at, batch.then_job.status) == (0, None, "pending")
    drain()
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed, batch.then_job.status) == (2, 0, "succeeded")
    assert [seen[0] for seen in test_jobs.BATCHES_SEEN] == ["then"]


def test_an_empty_group_has_finished_and_its_callback_runs():
    batch = jobs.group([]).then(collect_batch.s(key="then")).enqueue()
    assert batch.finished_at is not None and not batch.then_job.blocked
    drain()
    assert keys() == ["then"]


def test_a_large_group_is_written_in_one_transaction():
    batch = jobs.group([record.s(key=f"k{n}") for n in range(2500)]).enqueue()
    assert batch.members.count() == 2500 == batch.size


# --- after= --------------------------------------------------------------------------


def test_after_waits_for_every_job_named():
    a, b = record.enqueue(key="a"), record.enqueue(key="b")
    report = record.using(after=[a, b.pk]).enqueue(key="report")
    assert (report.blocked, report.waiting_for) == (True, 2)
    assert set(
        Job.objects.filter(pk__in=[a.pk, b.pk]).values_list("has_downstream", flat=True)
    ) == {True}
    drain()
    assert keys()[-1] == "report"


def test_after_a_job_that_succeeded_already_runs_at_once():
    done = record.enqueue(key="a")
    drain()
    report = record.using(after=[done]).enqueue(key="report")
    assert (report.blocked, report.waiting_for) == (False, 0)


def test_after_a_job_that_failed_is_written_cancelled():
    failed = fails_now.enqueue(key="x")
    drain()
    report = record.using(after=[failed]).enqueue(key="report")
    assert report.status == "cancelled"
    assert report.last_error == f"upstream job #{failed.pk} (testapp.fails_now) failed"


def test_after_refuses_what_is_not_a_job():
    with pytest.raises(ValueError, match=r"do not exist: #999999"):
        record.using(after=[999999]).enqueue(key="x")
    with pytest.raises(TypeError, match="takes jobs or job ids"):
        record.using(after=["x"]).enqueue(key="x")
    with pytest.raises(TypeError, match="takes no dedupe_key"):
        record.using(after=[1], dedupe_key="k").enqueue(key="x")


def test_a_downstream_job_added_while_its_upstream_runs_is_released_by_its_success(caplog):
    """The claim read has_downstream false; a batch of quick successes leaves the row to
    be recorded alone, which releases the new downstream job in the same transaction
    (and logs no discarded success: the lease was never lost)."""
    upstream = test_jobs.noop.enqueue()
    [claimed] = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    assert not claimed.has_downstream
    waiting = record.using(after=[upstream]).enqueue(key="after")
    recorder = execution.Recorder(timezone.now)
    recorder.add(execution.Call(job=claimed, definition=test_jobs.noop, duration=0.0))
    recorder.flush()
    assert status(upstream) == "succeeded"
    waiting.refresh_from_db()
    assert (waiting.blocked, waiting.waiting_for) == (False, 0)
    assert not [r for r in caplog.records if getattr(r, "outcome", "") == "discarded"]


# --- retries and cancels that must not strand a waiting job ---------------------------


def test_a_job_cancelled_before_its_handler_started_cancels_its_downstream():
    """A worker gives back a claimed job whose cancel was requested meanwhile (at
    shutdown): it ends cancelled, and what waited for it too."""
    first, second = jobs.chain(record.s(key="1"), record.s(key="2")).enqueue()
    claimed = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    jobs.cancel(first, "not needed")
    lifecycle.release_unstarted(claimed)
    assert (status(first), status(second)) == ("cancelled", "cancelled")
    assert second.last_error == f"upstream job #{first.pk} (testapp.record) was cancelled"


def test_a_member_cancelled_before_its_handler_started_still_finishes_its_batch():
    batch = jobs.group([record.s(key="1")]).finally_(record.s(key="finally")).enqueue()
    claimed = claim_due(timezone.now(), queues=None, limit=1, worker_id="w")
    jobs.cancel(claimed[0].id)
    lifecycle.release_unstarted(claimed)
    drain()
    batch.refresh_from_db()
    assert (batch.failed, batch.finished_at is not None) == (1, True)
    assert keys() == ["finally"]


def test_a_job_waiting_for_two_is_released_after_a_retry_of_the_one_that_failed():
    """b succeeded while d was cancelled because of a: retrying a counts b as done."""
    a = fails_now.enqueue(key="a")
    b = record.enqueue(key="b")
    d = record.using(after=[a, b]).enqueue(key="d")
    drain()
    assert (status(a), status(b), status(d)) == ("failed", "succeeded", "cancelled")
    Job.objects.filter(pk=a.pk).update(name="testapp.record", payload={"key": "a"})
    a.refresh_from_db()
    assert a.retry()
    d.refresh_from_db()
    assert (d.status, d.blocked, d.waiting_for) == ("pending", True, 1)
    drain()
    assert status(d) == "succeeded"
    assert sorted(keys()) == ["a", "b", "d"]


def test_a_reopened_job_stays_cancelled_while_another_of_its_upstream_jobs_has_failed():
    a = fails_now.enqueue(key="a")
    b = fails_now.enqueue(key="b")
    d = record.using(after=[a, b]).enqueue(key="d")
    drain()
    d.refresh_from_db()
    assert d.last_error == f"upstream job #{a.pk} (testapp.fails_now) failed"
    a.retry()  # fails again (it still raises), but first: d names b now
    d.refresh_from_db()
    assert (d.status, d.last_error) == (
        "cancelled",
        f"upstream job #{b.pk} (testapp.fails_now) failed",
    )
    Job.objects.filter(pk__in=[a.pk, b.pk]).update(name="testapp.record", payload={"key": "x"})
    for upstream in (a, b):
        upstream.refresh_from_db()
        upstream.retry()
    drain()
    assert status(d) == "succeeded"


def test_retrying_a_cancelled_then_callback_cancels_it_again_while_its_batch_failed():
    batch = jobs.group([fails_now.s(key="a")]).then(record.s(key="then")).enqueue()
    drain()
    then_job = Job.objects.get(pk=batch.then_job_id)
    assert then_job.status == "cancelled"
    then_job.retry()
    then_job.refresh_from_db()
    assert then_job.status == "cancelled"
    assert "member(s) of batch" in then_job.last_error


def test_retrying_a_callback_cancelled_by_hand_releases_it_once_its_batch_finished():
    batch = jobs.group([record.s(key="a")]).then(record.s(key="then")).enqueue()
    jobs.cancel(batch.then_job_id, "not now")
    drain()
    then_job = Job.objects.get(pk=batch.then_job_id)
    assert then_job.status == "cancelled"
    assert then_job.retry()
    then_job.refresh_from_db()
    assert (then_job.status, then_job.blocked) == ("pending", False)
    drain()
    assert keys() == ["a", "then"]


def test_retrying_a_job_cancelled_while_it_waited_waits_for_what_is_left():
    _, second = jobs.chain(record.s(key="1"), record.s(key="2")).enqueue()
    jobs.cancel(second, "by hand")
    drain()  # first succeeds; second stays cancelled
    second.refresh_from_db()
    assert second.retry()
    second.refresh_from_db()
    assert (second.status, second.blocked, second.waiting_for) == ("pending", False, 0)
    drain()
    assert keys() == ["1", "2"]


# --- eager mode ----------------------------------------------------------------------


@override_settings(CRONQUEUE={"EAGER": True})
def test_eager_mode_runs_a_chain_and_a_group_in_order():
    jobs.chain(record.s(key="a"), record.s(key="b")).enqueue()
    batch = (
        jobs.group([record.s(key="m1"), record.s(key="m2")])
        .then(collect_batch.s(key="then"))
        .enqueue()
    )
    assert keys() == ["a", "b", "m1", "m2", "then"]
    assert batch.finished_at is not None


@override_settings(CRONQUEUE={"EAGER": True})
def test_eager_mode_runs_a_snoozing_job_once_instead_of_looping():
    first, _ = jobs.chain(test_jobs.snoozes.s(seconds=60), record.s(key="after")).enqueue()
    first.refresh_from_db()
    assert first.status == "pending"
    assert keys() == []
