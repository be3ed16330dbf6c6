"""Bounded label values of the metrics (no database): a process admits a fixed number of
queues and names as labels and sums the rest under ``_other``, and the gauges give every
(name, queue) pair every status."""

import datetime as dt

from django_cronqueue.metrics.client import OTHER
from django_cronqueue.metrics.queue_metrics import Bounded, bounded_job_counts, kept_values
from django_cronqueue.metrics.worker_metrics import LabelValues
from django_cronqueue.models import JobStatus
from django_cronqueue.observe.gauges import QueueGauges

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def test_label_values_admit_the_first_values_then_other():
    labels = LabelValues(limit=2)
    assert [labels(v) for v in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER, "a", OTHER, "b"]


def test_kept_values_are_those_with_the_most_rows():
    assert kept_values({"small": 1, "big": 50, "mid": 7}, limit=2) == {"big", "mid"}


def test_every_status_of_a_name_and_queue_is_present():
    gauges = QueueGauges(now=NOW, jobs={("pending", "shop.mail", "emails"): 3})
    counts = bounded_job_counts(gauges, Bounded(gauges))
    assert counts == {(status, "shop.mail", "emails"): 0 for status in JobStatus.values} | {
        ("pending", "shop.mail", "emails"): 3
    }


def test_queues_beyond_the_limit_are_summed_under_other(monkeypatch):
    monkeypatch.setattr("django_cronqueue.metrics.queue_metrics.MAX_LABEL_VALUES", 2)
    jobs = {("pending", "shop.mail", f"tenant-{n}"): 10 - n for n in range(5)}
    gauges = QueueGauges(now=NOW, jobs=jobs)
    counts = bounded_job_counts(gauges, Bounded(gauges))
    pending = {queue: n for (status, _, queue), n in counts.items() if status == "pending"}
    assert pending == {"tenant-0": 10, "tenant-1": 9, OTHER: 8 + 7 + 6}
    assert sum(counts.values()) == sum(jobs.values())


def test_the_age_and_pause_of_queues_beyond_the_limit_are_read_under_other(monkeypatch):
    from django_cronqueue.metrics.queue_metrics import bounded_queue_gauges

    monkeypatch.setattr("django_cronqueue.metrics.queue_metrics.MAX_LABEL_VALUES", 2)
    jobs = {("pending", "shop.mail", f"tenant-{n}"): 10 - n for n in range(5)}
    gauges = QueueGauges(
        now=NOW,
        jobs=jobs,
        oldest_due_age={"tenant-0": 5.0, "tenant-3": 600.0, "tenant-4": 90.0},
        paused_queues=["tenant-4"],
    )
    ages, paused = bounded_queue_gauges(gauges, Bounded(gauges))
    assert ages == {"tenant-0": 5.0, "tenant-1": 0.0, OTHER: 600.0}  # the oldest of the rest
    assert paused == {"tenant-0": 0, "tenant-1": 0, OTHER: 1}
