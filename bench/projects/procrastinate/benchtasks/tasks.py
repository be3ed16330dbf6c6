"""The benchmark's tasks, defined the procrastinate way (found as <app>/tasks.py)."""

from benchlib.jobs import record_start
from procrastinate.contrib.django import app


@app.task(name="noop")
def noop(n: int) -> None:
    """The no-op job every system runs."""


@app.task(name="record")
def record(n: int) -> None:
    """Pickup latency: write down when the task started."""
    record_start(n)
