"""retry_on=, discard_on= and jobs.Discard: which failures are retried."""

import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.definitions.registry import registry
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import Job

pytestmark = pytest.mark.django_db

FAILED: list[tuple[int, str]] = []
RAISE: dict[str, BaseException] = {}


def remember(job, exc) -> None:
    FAILED.append((job.pk, type(exc).__name__))


def options(**extra):
    return {"retries": 3, "backoff": lambda attempt: 0, "on_failed": remember, **extra}


@jobs.job(name="policy.picky", **options(retry_on=(TimeoutError, ConnectionError)))
def picky(key: str) -> None:
    raise RAISE[key]


@jobs.job(name="policy.discarding", **options(discard_on=ValueError))
def discarding(key: str) -> None:
    raise RAISE[key]


@jobs.job(name="policy.default", **options())
def default(key: str) -> None:
    raise RAISE[key]


@pytest.fixture(autouse=True)
def _clean():
    FAILED.clear()
    RAISE.clear()


def run_until_done(job: Job, ticks: int = 6) -> Job:
    for _ in range(ticks):
        jobs.tick()
        job.refresh_from_db()
        if job.status != "pending":
            break
    return job


@pytest.mark.parametrize(
    ("handle", "error", "attempts"),
    [
        # retry_on: its classes and their subclasses are retried, anything else is not
        (picky, TimeoutError("slow"), 4),
        (picky, ConnectionResetError("reset"), 4),  # a ConnectionError
        (picky, KeyError("k"), 1),
        (picky, jobs.Discard("closed"), 1),
        # discard_on: its classes (and subclasses) fail at once, anything else is retried
        (discarding, ValueError("bad"), 1),
        (discarding, UnicodeDecodeError("utf-8", b"", 0, 1, "x"), 1),  # a ValueError
        (discarding, RuntimeError("flaky"), 4),
        # the default retries every exception, except jobs.Discard
        (default, RuntimeError("flaky"), 4),
        (default, jobs.Discard("account closed"), 1),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_the_policy_decides_which_failures_are_retried(handle, error, attempts):
    RAISE["k"] = error
    job = run_until_done(handle.enqueue(key="k"))
    assert job.status == "failed"
    assert job.attempts == attempts
    assert job.last_error.startswith(type(error).__name__)
    assert [(job.pk, type(error).__name__)] == FAILED  # on_failed once, with the exception


def test_discard_puts_its_reason_in_last_error():
    RAISE["k"] = jobs.Discard("account closed")
    job = run_until_done(default.enqueue(key="k"))
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.last_error == "Discard: account closed"


def test_a_lost_lease_is_retried_whatever_retry_on_says():
    """A lost lease (a crashed worker, a handler past its timeout) is not an exception
    the handler raised: it is retried by ``retries`` alone, as every job's is."""
    job = picky.enqueue(key="k")
    now = timezone.now()
    claim_due(now, queues=None, limit=1, worker_id="crashed")
    maintenance.recover_expired_leases(now + dt.timedelta(hours=1))
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("pending", 1)
    assert "lease lost" in job.last_error
    assert FAILED == []


def test_a_discard_is_final_in_eager_mode_too(settings):
    settings.CRONQUEUE = {**settings.CRONQUEUE, "EAGER": True}
    RAISE["k"] = ValueError("bad")
    job = discarding.enqueue(key="k")
    assert (job.status, job.attempts) == ("failed", 1)


def test_retry_policy_reads_in_words():
    assert picky.retry_policy == "3 retries; retry_on: TimeoutError, ConnectionError"
    assert discarding.retry_policy == "3 retries; discard_on: ValueError"
    assert default.retry_policy == "3 retries"


@pytest.mark.parametrize(
    ("option", "value"),
    [("retry_on", "TimeoutError"), ("retry_on", (TimeoutError, 3)), ("discard_on", int)],
)
def test_options_that_are_not_exception_classes_are_refused(option, value):
    with pytest.raises(ImproperlyConfigured, match=rf"option {option}= must be an exception"):
        jobs.job(name="policy.refused", **{option: value})(lambda: None)
    assert "policy.refused" not in registry


def test_a_cron_schedule_takes_the_policy_too():
    handle = jobs.cron("0 3 * * *", name="policy.nightly", retry_on=TimeoutError)(lambda run: None)
    try:
        assert handle.retry_on == (TimeoutError,)
        assert handle.gives_up_on(KeyError()) and not handle.gives_up_on(TimeoutError())
    finally:
        registry.unregister("policy.nightly")


def test_the_job_page_of_the_admin_shows_the_policy(admin_client):
    job = picky.enqueue(key="k")
    response = admin_client.get(reverse("admin:django_cronqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    assert "Retry policy" in response.text
    assert "3 retries; retry_on: TimeoutError, ConnectionError" in response.text


def test_the_policy_never_judges_a_run_the_worker_ended():
    assert not picky.gives_up_on(jobs.LeaseLost("lease lost"))
    assert not discarding.gives_up_on(jobs.LeaseLost("lease lost"))


def test_a_time_limit_and_a_dead_child_are_judged_by_the_policy():
    overran = jobs.TimeLimitExceeded("went past its timeout of 5 s")
    died = jobs.ChildDied("the child was killed by SIGKILL")
    assert picky.gives_up_on(overran) and picky.gives_up_on(died)  # retry_on lists neither
    assert not default.gives_up_on(overran) and not default.gives_up_on(died)
    assert not discarding.gives_up_on(overran)
