"""The tables of the counts of finished rows, which housekeeping keeps
(``django_cronqueue.history.counting``) and the dashboard, ``cronqueue_status`` and ``MetricsView``
read (``django_cronqueue.observe.counts``)."""

from __future__ import annotations

from django.db import models

from ..values.validation import MAX_NAME_LENGTH, MAX_QUEUE_LENGTH
from .fields import ExactCharField
from .statuses import JobStatus

__all__ = ["FinishedCount", "FinishedCountMark", "FinishedDayCount"]


class CountedRows(models.Model):
    """A count of finished rows of one status, job name and queue (abstract)."""

    status = models.CharField(max_length=16, choices=JobStatus.choices)
    name = ExactCharField(max_length=MAX_NAME_LENGTH)
    queue = ExactCharField(max_length=MAX_QUEUE_LENGTH)
    rows = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class FinishedCount(CountedRows):
    """Finished rows per (status, name, queue) up to ``FinishedCountMark.counted_until``,
    in all (``hour`` null) and per hour of ``finished_at`` over the last two days: kept by
    housekeeping (``django_cronqueue.history.counting``), read by ``observe.counts``."""

    hour = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "django_cronqueue"
        constraints = [
            models.UniqueConstraint(
                fields=["status", "name", "queue", "hour"], name="cronqueue_finishedcount_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rows} {self.status} {self.name} ({self.queue}) {self.hour or 'in all'}"


class FinishedDayCount(CountedRows):
    """The same counted rows per UTC day of ``finished_at``, kept while the day has rows:
    what lets a day's history table be dropped without reading it
    (``django_cronqueue.history.counting.uncount_day``)."""

    day = models.DateField()

    class Meta:
        app_label = "django_cronqueue"
        constraints = [
            models.UniqueConstraint(
                fields=["status", "name", "queue", "day"], name="cronqueue_finisheddaycount_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rows} {self.status} {self.name} ({self.queue}) on {self.day}"


class FinishedCountMark(models.Model):
    """One row (``ONLY``): the rows finished up to ``counted_until`` are in FinishedCount
    and FinishedDayCount (none when null). Locked by whatever changes those counts, one
    at a time. ``by_day``: the counts were made by a version that keeps FinishedDayCount
    (counts made before it are counted again)."""

    ONLY = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=ONLY)
    counted_until = models.DateTimeField(null=True, blank=True)
    by_day = models.BooleanField(default=False, db_default=False)

    class Meta:
        app_label = "django_cronqueue"

    def __str__(self) -> str:
        return f"finished rows counted until {self.counted_until}"
