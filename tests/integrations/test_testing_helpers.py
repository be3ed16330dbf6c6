"""django_cronqueue.testing, testing.eager() and the pytest plugin's fixtures (eager mode
itself: tests/db/enqueueing/test_eager.py)."""

import datetime as dt

import pytest
from django.test import TestCase
from django.utils import timezone

import django_cronqueue.pytest_plugin
from django_cronqueue import jobs, testing
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


@jobs.job(name="helpers.chain")
def chain(depth: int) -> None:
    """Enqueues itself until depth reaches 0: a job that enqueues jobs."""
    SideEffect.objects.create(key=f"chain-{depth}")
    if depth > 0:
        chain.enqueue(depth=depth - 1)


# --- running ------------------------------------------------------------------------


def test_run_due_jobs_runs_what_is_due_at_the_injected_now():
    now = timezone.now()
    jobs.enqueue(test_jobs.record, {"key": "later"}, delay=dt.timedelta(minutes=10))

    assert testing.run_due_jobs() == jobs.TickResult(claimed=0, ran=0, failed=0)
    assert not SideEffect.objects.exists()

    result = testing.run_due_jobs(now=now + dt.timedelta(minutes=11))
    assert result == jobs.TickResult(claimed=1, ran=1, failed=0)
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["later"]


def test_run_due_jobs_filters_queues():
    jobs.enqueue(test_jobs.record, {"key": "a"}, queue="emails")
    jobs.enqueue(test_jobs.record, {"key": "b"}, queue="reports")
    assert testing.run_due_jobs(queues=["emails"]).ran == 1
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["a"]


def test_run_until_idle_runs_jobs_enqueued_by_jobs():
    chain.enqueue(depth=3)
    assert testing.run_due_jobs().ran == 1  # one tick runs only what was there
    result = testing.run_until_idle()
    assert result == jobs.TickResult(claimed=3, ran=3, failed=0)
    assert SideEffect.objects.count() == 4


def test_run_until_idle_gives_up_after_max_ticks():
    chain.enqueue(depth=10)
    with pytest.raises(AssertionError, match="still claiming jobs after 3 ticks"):
        testing.run_until_idle(max_ticks=3)


# --- enqueued / assert_enqueued / assert_not_enqueued -------------------------------


def test_enqueued_filters_by_name_or_handle_and_payload_subset():
    first = jobs.enqueue(test_jobs.record, {"key": "a"})
    second = jobs.enqueue(test_jobs.sleep_then_record, {"key": "a", "seconds": 0})
    third = jobs.enqueue(test_jobs.record, {"key": "b"})

    assert testing.enqueued() == [first, second, third]
    assert testing.enqueued(test_jobs.record) == [first, third]
    assert testing.enqueued("testapp.record") == [first, third]
    assert testing.enqueued(key="a") == [first, second]
    assert testing.enqueued("testapp.sleep_then_record", key="a", seconds=0) == [second]
    assert testing.enqueued("testapp.record", key="c") == []


def test_payload_values_compare_as_json():
    job = jobs.enqueue(test_jobs.record, {"key": "x"})
    job.payload = {"key": ["a", 1]}
    job.save()
    assert testing.enqueued("testapp.record", key=("a", 1)) == [job]  # a tuple is a list


def test_a_name_that_no_code_defines_is_an_error_not_a_silent_pass():
    with pytest.raises(jobs.UnknownJob, match=r"testapp\.recrod"):
        testing.assert_not_enqueued("testapp.recrod")
    with pytest.raises(TypeError, match="Expected a job name"):
        testing.enqueued(42)


def test_assert_enqueued_returns_the_matching_rows():
    job = jobs.enqueue(test_jobs.record, {"key": "a"})
    jobs.enqueue(test_jobs.record, {"key": "b"})
    assert testing.assert_enqueued(test_jobs.record, {"key": "a"}) == [job]
    assert len(testing.assert_enqueued("testapp.record", count=2)) == 2
    assert testing.assert_enqueued("testapp.noop", count=0) == []


def test_assert_enqueued_failure_lists_what_was_enqueued():
    job = jobs.enqueue(test_jobs.record, {"key": "b"})
    other = jobs.enqueue(test_jobs.noop)
    with pytest.raises(AssertionError) as failure:
        testing.assert_enqueued(test_jobs.record, {"key": "a"})
    message = str(failure.value)
    assert "Expected at least 1 job 'testapp.record' with a payload containing {'key': 'a'}" in (
        message
    )
    assert "found 0" in message
    assert "Jobs enqueued (2):" in message
    assert f'#{job.pk} testapp.record {{"key": "b"}} [pending, queue default]' in message
    assert f"#{other.pk} testapp.noop {{}} [pending" in message


def test_assert_enqueued_with_count_checks_the_exact_number():
    jobs.enqueue(test_jobs.record, {"key": "a"})
    jobs.enqueue(test_jobs.record, {"key": "a"})
    with pytest.raises(AssertionError, match=r"Expected 1 job 'testapp.record'.*found 2"):
        testing.assert_enqueued(test_jobs.record, {"key": "a"}, count=1)


def test_assert_enqueued_lists_at_most_fifty_rows():
    jobs.enqueue_many(test_jobs.record, [{"key": f"k{i}"} for i in range(60)])
    with pytest.raises(AssertionError) as failure:
        testing.assert_enqueued(test_jobs.noop)
    assert "Jobs enqueued (60):" in str(failure.value)
    assert "... and 10 more" in str(failure.value)


def test_assert_not_enqueued():
    testing.assert_not_enqueued()
    job = jobs.enqueue(test_jobs.record, {"key": "a"})
    testing.assert_not_enqueued(test_jobs.record, {"key": "b"})
    testing.assert_not_enqueued(test_jobs.noop)
    with pytest.raises(AssertionError) as failure:
        testing.assert_not_enqueued(test_jobs.record, {"key": "a"})
    assert "Expected no job 'testapp.record' with a payload containing {'key': 'a'}, found 1" in (
        str(failure.value)
    )
    assert f"#{job.pk} testapp.record" in str(failure.value)
    with pytest.raises(AssertionError, match="Expected no job, found 1"):
        testing.assert_not_enqueued()


def test_capture_jobs_sees_only_the_rows_created_inside_it():
    before = jobs.enqueue(test_jobs.record, {"key": "before"})
    with testing.capture_jobs() as captured:
        inside = jobs.enqueue(test_jobs.record, {"key": "inside"})
        assert captured.jobs() == [inside]
    after = jobs.enqueue(test_jobs.record, {"key": "after"})

    assert captured.jobs() == [inside]
    captured.assert_enqueued(test_jobs.record, {"key": "inside"}, count=1)
    captured.assert_not_enqueued(test_jobs.record, {"key": "before"})
    captured.assert_not_enqueued(test_jobs.record, {"key": "after"})
    assert testing.enqueued(test_jobs.record) == [before, inside, after]


def test_a_capture_can_be_cleared():
    with testing.capture_jobs() as captured:
        jobs.enqueue(test_jobs.record, {"key": "a"})
        captured.clear()
        later = jobs.enqueue(test_jobs.record, {"key": "b"})
    assert captured.jobs() == [later]


# --- eager mode ---------------------------------------------------------------------


def test_eager_can_be_turned_off_inside_an_eager_block():
    with testing.eager(), testing.eager(False):
        job = jobs.enqueue(test_jobs.record, {"key": "a"})
    assert job.status == "pending"


# --- the pytest plugin --------------------------------------------------------------


def test_the_plugin_is_loaded_through_its_entry_point(request):
    plugin = request.config.pluginmanager.get_plugin("cronqueue")
    assert plugin is django_cronqueue.pytest_plugin


def test_the_cronqueue_fixture(cronqueue):
    now = timezone.now()
    test_jobs.record.using(delay=60).enqueue(key="a")
    cronqueue.assert_enqueued(test_jobs.record, {"key": "a"}, count=1)
    assert cronqueue.tick(now=now).ran == 0
    assert cronqueue.tick(now=now + dt.timedelta(minutes=2)).ran == 1
    assert cronqueue.enqueued(test_jobs.record)[0].status == "succeeded"
    with cronqueue.capture() as captured:
        test_jobs.noop.enqueue()
    captured.assert_enqueued(test_jobs.noop)
    captured.assert_not_enqueued(test_jobs.record)
    assert cronqueue.run_until_idle().ran == 1


def test_the_cronqueue_eager_fixture(cronqueue_eager):
    job = test_jobs.returns_value.enqueue(value=2)
    assert (job.status, job.result) == ("succeeded", {"doubled": 4})
    [row] = cronqueue_eager.assert_enqueued(test_jobs.returns_value, {"value": 2})
    assert row.status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_the_fixtures_work_in_transactional_tests(cronqueue_eager):
    job = test_jobs.record.enqueue(key="t")
    assert job.status == "succeeded"
    assert SideEffect.objects.filter(key="t").exists()


class EagerDecoratorTests(TestCase):
    """testing.eager() as a decorator, and the helpers in a django.test.TestCase."""

    @testing.eager()
    def test_decorated_method_is_eager(self):
        job = test_jobs.record.enqueue(key="decorated")
        assert job.status == "succeeded"
        testing.assert_enqueued("testapp.record", {"key": "decorated"}, count=1)

    def test_not_eager_outside(self):
        job = test_jobs.record.enqueue(key="plain")
        assert job.status == "pending"
        assert testing.run_due_jobs().ran == 1
