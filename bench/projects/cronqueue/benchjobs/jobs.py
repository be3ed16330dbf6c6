"""The benchmark's jobs, defined the django-cronqueue way (found as <app>/jobs.py)."""

from benchlib.jobs import record_start

from django_cronqueue import jobs


@jobs.job
def noop(n: int) -> None:
    """The no-op job every system runs."""


@jobs.job
def record(n: int) -> None:
    """Pickup latency: write down when the handler started."""
    record_start(n)
