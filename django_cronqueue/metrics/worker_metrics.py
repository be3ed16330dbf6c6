"""A ``runjobs`` worker's counters and histograms (``runjobs --metrics-port PORT``).

They are fed by the job signals this process sends (``django_cronqueue.signals``), so
the worker loop knows nothing of them, and served by ``prometheus_client``'s own HTTP
server on a thread of its own. Labels are the job's name and queue only, never an id or
a payload value; a process admits at most ``MAX_LABEL_VALUES`` queues (and names) and
counts the others under ``_other``.

A lost lease is counted by the process that returns it (its housekeeping, or the tick
of any worker), not by the one that held it: that one may be dead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.dispatch import Signal
from django.utils import timezone

from .. import signals
from ..exceptions import LeaseLost
from .client import MAX_LABEL_VALUES, OTHER, client

logger = logging.getLogger("django_cronqueue")

__all__ = ["DURATION_BUCKETS", "LATENCY_BUCKETS", "WorkerMetrics", "serve"]

#: Seconds: from a few milliseconds (most jobs) to an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Seconds from due to started: a poll interval is 1 s by default; a backlog takes longer.
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)
#: Runs whose end this process never sees (their lease was lost) are forgotten past this.
MAX_TRACKED_RUNS = 10_000
LABELS = ("name", "queue")


class LabelValues:
    """The first ``limit`` distinct values of a label; later ones become ``_other``."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen or len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return OTHER


class WorkerMetrics:
    """The metrics of one process, in a registry of their own, and the signal receivers
    that move them."""

    def __init__(self) -> None:
        prometheus = client()
        self.registry = prometheus.CollectorRegistry()
        prometheus.ProcessCollector(registry=self.registry)
        prometheus.PlatformCollector(registry=self.registry)
        self.names = LabelValues()
        self.queues = LabelValues()
        self._started_at: OrderedDict[int, float] = OrderedDict()
        self._lock = threading.Lock()

        def counter(name: str, help_text: str) -> Any:
            return prometheus.Counter(name, help_text, LABELS, registry=self.registry)

        self.started = counter("cronqueue_jobs_started", "Handler calls started.")
        self.succeeded = counter("cronqueue_jobs_succeeded", "Runs that succeeded.")
        self.failed = counter("cronqueue_jobs_failed", "Jobs that failed for good.")
        self.retried = counter("cronqueue_jobs_retried", "Runs that failed and will retry.")
        self.lease_lost = counter(
            "cronqueue_jobs_lease_lost", "Leases found expired and returned by this process."
        )
        self.cancelled = counter(
            "cronqueue_jobs_cancelled", "Claimed jobs that ended cancelled on a cancel request."
        )
        self.snoozed = counter("cronqueue_jobs_snoozed", "Runs that raised jobs.Snooze.")
        self.duration = prometheus.Histogram(
            "cronqueue_job_duration_seconds",
            "From the start of a handler to its outcome written (a success: the handler's "
            "own time), by outcome.",
            (*LABELS, "outcome"),
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.pickup_latency = prometheus.Histogram(
            "cronqueue_job_pickup_latency_seconds",
            "From the time a job was due (run_at) to the start of its handler.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._receivers: dict[Signal, Callable[..., None]] = {
            signals.job_started: self.on_started,
            signals.job_succeeded: self.on_succeeded,
            signals.job_failed: self.on_failed,
            signals.job_retrying: self.on_retrying,
            signals.job_snoozed: self.on_snoozed,
            signals.job_cancelled: self.on_cancelled,
        }

    # -- wiring

    server: Any = None  # the HTTP server of ``serve``

    def close(self) -> None:
        self.disconnect()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def connect(self) -> None:
        for signal, receiver in self._receivers.items():
            signal.connect(receiver, weak=False, dispatch_uid=self._uid(receiver))

    def disconnect(self) -> None:
        for signal, receiver in self._receivers.items():
            signal.disconnect(dispatch_uid=self._uid(receiver))

    def _uid(self, receiver: Any) -> str:
        return f"cronqueue-metrics-{id(self)}-{receiver.__name__}"

    def labels(self, job: Any) -> tuple[str, str]:
        return self.names(str(job.name)), self.queues(str(getattr(job, "queue", "") or ""))

    # -- receivers (sent from the slot threads and from housekeeping)

    def on_started(self, sender: str, job: Any, **kwargs: Any) -> None:
        labels = self.labels(job)
        self.started.labels(*labels).inc()
        run_at = getattr(job, "run_at", None)
        if run_at is not None:
            waited = (timezone.now() - run_at).total_seconds()
            self.pickup_latency.labels(*labels).observe(max(waited, 0.0))
        with self._lock:
            self._started_at[job.id] = time.monotonic()
            while len(self._started_at) > MAX_TRACKED_RUNS:
                self._started_at.popitem(last=False)

    def on_succeeded(self, sender: str, job: Any, duration: float, **kwargs: Any) -> None:
        labels = self.labels(job)
        self.succeeded.labels(*labels).inc()
        self._ran(job)
        self.duration.labels(*labels, "succeeded").observe(duration)

    def on_failed(self, sender: str, job: Any, exc: BaseException, **kwargs: Any) -> None:
        if job is None:  # its row was deleted meanwhile
            return
        labels = self.labels(job)
        self.failed.labels(*labels).inc()
        self._ended(job, labels, "failed", exc)

    def on_retrying(self, sender: str, job: Any, exc: BaseException, **kwargs: Any) -> None:
        if job is None:  # its row was deleted meanwhile
            return
        labels = self.labels(job)
        self.retried.labels(*labels).inc()
        self._ended(job, labels, "retried", exc)

    def on_snoozed(self, sender: str, job: Any, **kwargs: Any) -> None:
        if job is None:
            return
        labels = self.labels(job)
        self.snoozed.labels(*labels).inc()
        self._ended(job, labels, "snoozed")

    def on_cancelled(self, sender: str, job: Any, **kwargs: Any) -> None:
        if job is None:  # deleted meanwhile
            return
        labels = self.labels(job)
        self.cancelled.labels(*labels).inc()
        self._ended(job, labels, "cancelled")

    def _ended(
        self, job: Any, labels: tuple[str, str], outcome: str, exc: BaseException | None = None
    ) -> None:
        if isinstance(exc, LeaseLost):
            self.lease_lost.labels(*labels).inc()
        seconds = self._ran(job)
        if seconds is not None:
            self.duration.labels(*labels, outcome).observe(seconds)

    def _ran(self, job: Any) -> float | None:
        """Seconds since this process started the job's handler (None: it did not)."""
        with self._lock:
            started = self._started_at.pop(job.id, None)
        return None if started is None else time.monotonic() - started


def serve(port: int, addr: str = "0.0.0.0") -> WorkerMetrics:
    """Count this process's jobs and serve the counts on ``addr:port`` (``/metrics``,
    any path), from a daemon thread; ``close()`` stops both. OSError when the port is
    taken."""
    metrics = WorkerMetrics()
    metrics.server, _ = client().start_http_server(port, addr=addr, registry=metrics.registry)
    metrics.connect()
    logger.info(
        "Serving this worker's metrics on http://%s:%s/metrics",
        addr,
        metrics.server.server_port,
        extra={"metrics_port": metrics.server.server_port},
    )
    return metrics
