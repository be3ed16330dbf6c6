"""The queue's gauges in Prometheus form, read from the database at each scrape through
the read model (``observe.gauges``). Every (name, queue) pair that has rows gets a
series for every status, zeros included, so a backlog that drains reads 0 rather than
vanishing; beyond ``MAX_LABEL_VALUES`` queues (or names) the rest are summed under
``_other``."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..models import JobStatus
from ..observe.gauges import QueueGauges, queue_gauges
from .client import MAX_LABEL_VALUES, OTHER, client

__all__ = ["queue_registry", "render"]


def kept_values(totals: Mapping[str, int], limit: int | None = None) -> set[str]:
    """The ``limit`` (``MAX_LABEL_VALUES``) values with the most rows, ties by value:
    those get series of their own."""
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    return {value for value, _ in ranked[: MAX_LABEL_VALUES if limit is None else limit]}


def bounded_job_counts(gauges: QueueGauges) -> dict[tuple[str, str, str], int]:
    """The rows per (status, name, queue), with rare names and queues under ``_other``
    and every status present for each (name, queue)."""
    names: Counter[str] = Counter()
    queues: Counter[str] = Counter()
    for (_, name, queue), n in gauges.jobs.items():
        names[name] += n
        queues[queue] += n
    keep_names, keep_queues = kept_values(names), kept_values(queues)
    counts: dict[tuple[str, str, str], int] = {}
    for (status, name, queue), n in gauges.jobs.items():
        pair = (name if name in keep_names else OTHER, queue if queue in keep_queues else OTHER)
        for each in JobStatus.values:
            counts.setdefault((each, *pair), 0)
        counts[(status, *pair)] += n
    return counts


class QueueCollector:
    """A ``prometheus_client`` collector that reads the gauges when scraped."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def describe(self) -> Iterable[Any]:
        return []  # read only when collected: registering must not query

    def collect(self) -> Iterator[Any]:
        yield from families(queue_gauges(self.now))


def families(gauges: QueueGauges) -> Iterator[Any]:
    gauge = client().core.GaugeMetricFamily
    jobs = gauge(
        "cronqueue_jobs", "Job rows per status, name and queue.", labels=["status", "name", "queue"]
    )
    counts = bounded_job_counts(gauges)
    for labels, n in sorted(counts.items()):
        jobs.add_metric(list(labels), n)
    yield jobs
    queues = sorted({queue for _, _, queue in counts} | set(gauges.oldest_due_age))
    oldest = gauge(
        "cronqueue_oldest_due_pending_age_seconds",
        "How long the oldest due, unblocked pending job of each queue has waited (0: none).",
        labels=["queue"],
    )
    for queue in queues:
        oldest.add_metric([queue], gauges.oldest_due_age.get(queue, 0.0))
    yield oldest
    lag = gauge(
        "cronqueue_schedule_lag_seconds",
        "How late each code cron schedule's next occurrence is (0: on time).",
        labels=["schedule"],
    )
    for name, seconds in sorted(gauges.code_schedule_lag.items()):
        lag.add_metric([name], seconds)
    yield lag
    yield gauge(
        "cronqueue_dynamic_schedule_lag_seconds",
        "How late the latest active dynamic schedule is (0: none is).",
        value=gauges.dynamic_schedule_lag,
    )
    overdue = gauge(
        "cronqueue_schedules_overdue",
        "Schedules late by more than the grace, per source (code, dynamic).",
        labels=["source"],
    )
    for source, n in sorted(gauges.overdue_schedules.items()):
        overdue.add_metric([source], n)
    yield overdue
    yield gauge(
        "cronqueue_workers_live", "Workers seen within three leases.", value=gauges.live_workers
    )
    yield from pause_families(gauges, queues)


def pause_families(gauges: QueueGauges, queues: list[str]) -> Iterator[Any]:
    gauge = client().core.GaugeMetricFamily
    paused = gauge(
        "cronqueue_queue_paused", "1 while a pause holds the queue back.", labels=["queue"]
    )
    for queue in sorted(set(queues) | set(gauges.paused_queues)):
        paused.add_metric([queue], 1 if queue in gauges.paused_queues else 0)
    yield paused
    names = gauge(
        "cronqueue_name_paused", "1 while a pause holds a job name back.", labels=["name"]
    )
    for name in gauges.paused_names:
        names.add_metric([name], 1)
    yield names


def queue_registry(now: dt.datetime) -> Any:
    """A registry holding only the queue's gauges, as of ``now``."""
    registry = client().CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(now))
    return registry


def render(now: dt.datetime, accept: str = "") -> tuple[bytes, str]:
    """The exposition (text format, or OpenMetrics if ``accept`` asks for it) and its
    content type."""
    encoder, content_type = client().exposition.choose_encoder(accept)
    return encoder(queue_registry(now)), content_type
