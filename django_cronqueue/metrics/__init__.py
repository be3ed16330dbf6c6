"""Prometheus metrics, with the optional extra ``django-cronqueue[prometheus]``
(``prometheus_client``); without it the app works unchanged and only these two entry
points say what is missing.

- ``MetricsView`` (mount it in your urls.py; staff-only by default): the queue's gauges,
  read from the database at each scrape (``django_cronqueue.observe.gauges``).
- ``runjobs --metrics-port PORT`` (``worker_metrics.serve``): a worker's counters and
  histograms, fed by the job signals of that process.

Metric names and labels: docs/metrics-and-traces.md.

May import ``observe``, ``models``, ``signals`` and ``exceptions``; imported by no module
of the package but ``management``'s ``runjobs``.
"""

from __future__ import annotations

from .view import MetricsView

__all__ = ["MetricsView"]
