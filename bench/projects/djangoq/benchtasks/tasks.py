"""The benchmark's tasks: django-q2 runs any importable function, named by its path."""

from benchlib.jobs import record_start


def noop(n: int) -> None:
    """The no-op job every system runs."""


def record(n: int) -> None:
    """Pickup latency: write down when the task started."""
    record_start(n)
