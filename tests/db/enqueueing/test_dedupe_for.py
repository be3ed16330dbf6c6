"""dedupe_for (SPEC section 9): at most one job of a name and key created within any
span of that length, whatever its status. On every database."""

import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)


def enqueue(key="report-42", span=HOUR, **options):
    return jobs.enqueue(test_jobs.record, {"key": key}, dedupe_key=key, dedupe_for=span, **options)


def end_span(job):
    """As if the span of ``job``'s key had passed."""
    Job.objects.filter(pk=job.pk).update(dedupe_until=timezone.now() - dt.timedelta(seconds=1))


@pytest.mark.parametrize("status", ["pending", "running", "succeeded", "failed", "cancelled"])
def test_within_the_span_enqueue_returns_the_job_whatever_its_status(status):
    first = enqueue()
    Job.objects.filter(pk=first.pk).update(
        status=status,
        active_dedupe_key=first.dedupe_key if status in ("pending", "running") else None,
    )
    again = enqueue()
    assert again.pk == first.pk
    assert Job.objects.count() == 1


def test_the_span_runs_from_the_creation_of_the_job():
    before = timezone.now()
    job = enqueue()
    assert (job.window_dedupe_key, job.dedupe_key) == ("report-42", "report-42")
    assert before + HOUR <= job.dedupe_until <= timezone.now() + HOUR


def test_after_the_span_a_finished_job_gives_its_key_up_to_a_new_one():
    first = enqueue()
    Job.objects.filter(pk=first.pk).update(status="succeeded", active_dedupe_key=None)
    end_span(first)
    second = enqueue()
    assert second.pk != first.pk
    first.refresh_from_db()
    assert first.window_dedupe_key is None
    assert enqueue().pk == second.pk  # the new span holds


def test_after_the_span_a_job_still_pending_keeps_its_key():
    first = enqueue()
    end_span(first)
    assert enqueue().pk == first.pk
    assert Job.objects.count() == 1


def test_keys_of_other_names_and_other_keys_are_independent():
    first = enqueue("a")
    assert enqueue("b").pk != first.pk
    other = jobs.enqueue(test_jobs.noop, dedupe_key="a", dedupe_for=HOUR)
    assert other.pk != first.pk


def test_without_dedupe_for_a_key_is_free_once_its_job_ended():
    """Section 3's meaning is unchanged, also beside a key held for a span."""
    first = enqueue()
    Job.objects.filter(pk=first.pk).update(status="succeeded", active_dedupe_key=None)
    plain = jobs.enqueue(test_jobs.record, {"key": "k"}, dedupe_key="report-42")
    assert plain.pk != first.pk
    assert plain.window_dedupe_key is None
    assert enqueue().pk == first.pk  # the span still holds for span enqueues


def test_the_job_option_is_the_default_span_of_enqueues_with_a_key():
    @jobs.job(name="tests.hourly_report", dedupe_for=HOUR)
    def hourly_report(tenant: int) -> None: ...

    try:
        first = hourly_report.using(dedupe_key="t1").enqueue(tenant=1)
        Job.objects.filter(pk=first.pk).update(status="succeeded", active_dedupe_key=None)
        assert hourly_report.using(dedupe_key="t1").enqueue(tenant=1).pk == first.pk
        # without a key the option does nothing
        assert hourly_report.enqueue(tenant=1).pk != hourly_report.enqueue(tenant=1).pk
        # the call's span wins over the option's
        shorter = hourly_report.using(dedupe_key="t2", dedupe_for=dt.timedelta(minutes=5))
        assert shorter.enqueue(tenant=2).dedupe_until <= timezone.now() + dt.timedelta(minutes=5)
    finally:
        registry.unregister("tests.hourly_report")


def test_a_span_enqueue_inside_a_transaction_rolls_back_with_it():
    def enqueue_then_fail():
        with transaction.atomic():
            enqueue()
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert not Job.objects.exists()
    with transaction.atomic():
        first = enqueue()
        assert enqueue().pk == first.pk
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dedupe_for": HOUR}, "needs a dedupe_key"),
        ({"dedupe_key": "k", "dedupe_for": 3600}, "must be a timedelta > 0, got 3600"),
        ({"dedupe_key": "k", "dedupe_for": dt.timedelta(0)}, "must be a timedelta > 0"),
        ({"dedupe_key": "k", "dedupe_for": -HOUR}, "must be a timedelta > 0"),
    ],
)
def test_a_bad_dedupe_for_at_the_call_is_a_value_error_naming_job_and_value(options, message):
    with pytest.raises(ValueError, match=message) as caught:
        jobs.enqueue(test_jobs.record, {"key": "k"}, **options)
    assert "testapp.record" in str(caught.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize("value", [3600, dt.timedelta(0), "1h"])
def test_a_bad_dedupe_for_option_fails_at_import(value):
    with pytest.raises(ImproperlyConfigured, match=r"tests\.bad_span.*dedupe_for="):

        @jobs.job(name="tests.bad_span", dedupe_for=value)
        def bad_span() -> None: ...

    assert registry.get("tests.bad_span") is None


def test_enqueue_many_takes_no_dedupe_for():
    with pytest.raises(TypeError, match="dedupe_for"):
        test_jobs.record.using(dedupe_for=HOUR).enqueue_many([{"key": "a"}])


def test_a_cron_schedule_takes_no_dedupe_for():
    with pytest.raises(ImproperlyConfigured, match="dedupe_for"):

        @jobs.cron("* * * * *", name="tests.cron_span", dedupe_for=HOUR)
        def cron_span(run) -> None: ...


def test_keys_that_differ_in_case_or_trailing_spaces_are_distinct_keys():
    """On MySQL and MariaDB too: the key is compared byte for byte, holder lookup included."""
    first = enqueue("Invoice-42")
    others = [enqueue(key) for key in ("invoice-42", "Invoice-42 ", "INVOICE-42")]
    assert len({first.pk, *(job.pk for job in others)}) == 4
    assert enqueue("Invoice-42 ").pk == others[1].pk
    assert enqueue("Invoice-42").pk == first.pk
    Job.objects.update(status="succeeded", active_dedupe_key=None)
    end_span(Job.objects.get(pk=others[0].pk))
    assert enqueue("invoice-42").pk not in {first.pk, *(job.pk for job in others)}
    assert enqueue("Invoice-42").pk == first.pk  # its span still holds
