"""The benchmark's tasks, defined the Django Tasks way (``@task``)."""

from benchlib.jobs import record_start
from django.tasks import task


@task
def noop(n: int) -> None:
    """The no-op job every system runs."""


@task
def record(n: int) -> None:
    """Pickup latency: write down when the task started."""
    record_start(n)
