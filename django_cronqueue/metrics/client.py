"""The one place that imports ``prometheus_client``: whether it is installed, and the
error that names the extra to install when it is not. It is imported when first used (a
scrape, ``--metrics-port``), not when a site's urls.py imports ``MetricsView``."""

from __future__ import annotations

from functools import cache
from types import ModuleType

from django.core.exceptions import ImproperlyConfigured

MISSING = (
    "Metrics need prometheus_client: pip install 'django-cronqueue[prometheus]' "
    "(or prometheus-client)."
)
#: At most this many values of one label (queues, names) make series of their own; the
#: rest are summed under OTHER, so a queue per tenant cannot flood Prometheus.
MAX_LABEL_VALUES = 200
OTHER = "_other"


@cache
def _prometheus_client() -> ModuleType | None:
    try:
        import prometheus_client
        import prometheus_client.core  # the metric families of custom collectors
        import prometheus_client.exposition
    except ImportError:  # the [prometheus] extra is not installed
        return None
    return prometheus_client


def installed() -> bool:
    return _prometheus_client() is not None


def client() -> ModuleType:
    """``prometheus_client``, or ImproperlyConfigured saying how to install it."""
    prometheus_client = _prometheus_client()
    if prometheus_client is None:
        raise ImproperlyConfigured(MISSING)
    return prometheus_client
