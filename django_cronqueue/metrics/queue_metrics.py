"""The queue's gauges in Prometheus form, read from the database at each scrape through
the read model (``observe.gauges``; from ``CRONQUEUE["READ_DATABASE"]`` when set). Every
(name, queue) pair that has rows gets a series for every status, zeros included, so a
backlog that drains reads 0 rather than vanishing; beyond ``MAX_LABEL_VALUES`` queues (or
names) the rest are summed under ``_other``."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..models import JobStatus
from ..observe.base import from_read_database
from ..observe.gauges import QueueGauges, queue_gauges
from .client import MAX_LABEL_VALUES, OTHER, client

__all__ = ["queue_registry", "render"]


def kept_values(totals: Mapping[str, int], limit: int | None = None) -> set[str]:
    """The ``limit`` (``MAX_LABEL_VALUES``) values with the most rows, ties by value:
    those get series of their own."""
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    return {value for value, _ in ranked[: MAX_LABEL_VALUES if limit is None else limit]}


class Bounded:
    """The label values that get series of their own: the ``MAX_LABEL_VALUES`` names and
    queues with the most rows (a paused queue or name with none counts too); the others
    are read as ``_other``."""

    def __init__(self, gauges: QueueGauges) -> None:
        names: Counter[str] = Counter(dict.fromkeys(gauges.paused_names, 0))
        queues: Counter[str] = Counter(dict.fromkeys(gauges.paused_queues, 0))
        for (_, name, queue), n in gauges.jobs.items():
            names[name] += n
            queues[queue] += n
        self.names, self.queues = kept_values(names), kept_values(queues)

    def name(self, value: str) -> str:
        return value if value in self.names else OTHER

    def queue(self, value: str) -> str:
        return value if value in self.queues else OTHER


def bounded_job_counts(gauges: QueueGauges, bounded: Bounded) -> dict[tuple[str, str, str], int]:
    """The rows per (status, name, queue), with rare names and queues under ``_other``
    and every status present for each (name, queue)."""
    counts: dict[tuple[str, str, str], int] = {}
    for (status, name, queue), n in gauges.jobs.items():
        pair = (bounded.name(name), bounded.queue(queue))
        for each in JobStatus.values:
            counts.setdefault((each, *pair), 0)
        counts[(status, *pair)] += n
    return counts


def bounded_queue_gauges(
    gauges: QueueGauges, bounded: Bounded
) -> tuple[dict[str, float], dict[str, int]]:
    """Per queue label (``_other`` summing the rare ones): the oldest due pending age (the
    largest of the queues it stands for) and whether a pause holds it (any of them), for
    every queue that has rows or a pause."""
    ages = {bounded.queue(queue): 0.0 for _, _, queue in gauges.jobs}
    for queue, age in gauges.oldest_due_age.items():
        label = bounded.queue(queue)
        ages[label] = max(ages.get(label, 0.0), age)
    paused = dict.fromkeys(ages, 0)
    for queue in gauges.paused_queues:
        paused[bounded.queue(queue)] = 1
    return ages, paused


class QueueCollector:
    """A ``prometheus_client`` collector that reads the gauges when scraped."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def describe(self) -> Iterable[Any]:
        return []  # read only when collected: registering must not query

    def collect(self) -> Iterator[Any]:
        with from_read_database():  # READ_DATABASE, a replica, when set
            gauges = queue_gauges(self.now)
        yield from families(gauges)


def families(gauges: QueueGauges) -> Iterator[Any]:
    gauge = client().core.GaugeMetricFamily
    jobs = gauge(
        "cronqueue_jobs", "Job rows per status, name and queue.", labels=["status", "name", "queue"]
    )
    bounded = Bounded(gauges)
    counts = bounded_job_counts(gauges, bounded)
    for labels, n in sorted(counts.items()):
        jobs.add_metric(list(labels), n)
    yield jobs
    ages, paused = bounded_queue_gauges(gauges, bounded)
    oldest = gauge(
        "cronqueue_oldest_due_pending_age_seconds",
        "How long the oldest due, unblocked pending job of each queue has waited (0: none).",
        labels=["queue"],
    )
    for queue, age in sorted(ages.items()):
        oldest.add_metric([queue], age)
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
        "How late the most overdue active dynamic schedule is (0: none is).",
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
    yield from pause_families(gauges, bounded, paused)
    yield from storage_families(gauges)


def pause_families(gauges: QueueGauges, bounded: Bounded, paused: dict[str, int]) -> Iterator[Any]:
    gauge = client().core.GaugeMetricFamily
    queues = gauge(
        "cronqueue_queue_paused", "1 while a pause holds the queue back.", labels=["queue"]
    )
    for queue, held in sorted(paused.items()):
        queues.add_metric([queue], held)
    yield queues
    names = gauge(
        "cronqueue_name_paused", "1 while a pause holds a job name back.", labels=["name"]
    )
    for name in sorted({bounded.name(name) for name in gauges.paused_names}):
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


def storage_families(gauges: QueueGauges) -> Iterator[Any]:
    """PostgreSQL only: absent on the other databases."""
    if gauges.storage is None:
        return
    gauge = client().core.GaugeMetricFamily
    yield gauge(
        "cronqueue_oldest_transaction_age_seconds",
        "How long the oldest transaction open on the queue's database has been open "
        "(0: none); dead rows older than it cannot be vacuumed.",
        value=gauges.storage.oldest_transaction_age,
    )
    yield gauge(
        "cronqueue_job_dead_tuples",
        "Dead row versions in the job table, by PostgreSQL's statistics (n_dead_tup).",
        value=gauges.storage.dead_tuples,
    )
