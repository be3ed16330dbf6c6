"""A worker's Prometheus counters and histograms (``metrics.worker_metrics``), moved by
the jobs that run in this process (``jobs.tick()`` runs them inline, as a ``runjobs`` slot
does), and served over HTTP by ``serve``. The real ``runjobs --metrics-port`` process is
tested in tests/e2e/test_metrics_processes.py."""

import datetime as dt
import urllib.request

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.metrics import worker_metrics
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db

RECORD = {"name": "testapp.record", "queue": "default"}
FAILS = {"name": "testapp.always_fails", "queue": "default"}


@pytest.fixture
def metrics():
    counted = worker_metrics.WorkerMetrics()
    counted.connect()
    yield counted
    counted.close()


def sample(metrics, metric, /, **labels):
    return metrics.registry.get_sample_value(metric, labels) or 0.0


def drain(now=None):
    while jobs.tick(now=now).claimed:
        pass


def test_successes_retries_and_a_final_failure_are_counted_per_name_and_queue(metrics):
    test_jobs.record.enqueue(key="a")
    test_jobs.record.using(queue="emails").enqueue(key="b")
    test_jobs.always_fails.enqueue()  # retries=2: two retries, then failed
    drain()
    assert sample(metrics, "cronqueue_jobs_started_total", **RECORD) == 1
    assert sample(metrics, "cronqueue_jobs_succeeded_total", **RECORD) == 1
    emails = {**RECORD, "queue": "emails"}
    assert sample(metrics, "cronqueue_jobs_succeeded_total", **emails) == 1
    assert sample(metrics, "cronqueue_jobs_started_total", **FAILS) == 3
    assert sample(metrics, "cronqueue_jobs_retried_total", **FAILS) == 2
    assert sample(metrics, "cronqueue_jobs_failed_total", **FAILS) == 1
    assert sample(metrics, "cronqueue_jobs_lease_lost_total", **FAILS) == 0
    duration = "cronqueue_job_duration_seconds_count"
    assert sample(metrics, duration, **RECORD, outcome="succeeded") == 1
    assert sample(metrics, duration, **FAILS, outcome="retried") == 2
    assert sample(metrics, duration, **FAILS, outcome="failed") == 1
    assert sample(metrics, "cronqueue_job_pickup_latency_seconds_count", **FAILS) == 3


def test_pickup_latency_is_measured_from_the_time_the_job_was_due(metrics):
    test_jobs.record.using(run_at=timezone.now() - dt.timedelta(seconds=90)).enqueue(key="late")
    drain()
    waited = sample(metrics, "cronqueue_job_pickup_latency_seconds_sum", **RECORD)
    assert 90 <= waited < 120
    assert sample(metrics, "cronqueue_job_pickup_latency_seconds_bucket", **RECORD, le="60.0") == 0
    assert sample(metrics, "cronqueue_job_pickup_latency_seconds_bucket", **RECORD, le="300.0") == 1


def test_a_lost_lease_is_counted_by_the_process_that_returns_it(metrics):
    test_jobs.record.enqueue(key="k")
    now = timezone.now()
    claim_due(now, queues=None, limit=1, worker_id="crashed-worker")
    drain(now=now + dt.timedelta(seconds=31))  # returns the lease, then runs the job again
    assert sample(metrics, "cronqueue_jobs_lease_lost_total", **RECORD) == 1
    assert sample(metrics, "cronqueue_jobs_retried_total", **RECORD) == 1
    assert sample(metrics, "cronqueue_jobs_succeeded_total", **RECORD) == 1
    # the run that lost its lease was not this process's: no duration for it
    assert sample(metrics, "cronqueue_job_duration_seconds_count", **RECORD, outcome="retried") == 0


def test_nothing_is_counted_once_disconnected(metrics):
    metrics.disconnect()
    test_jobs.record.enqueue(key="k")
    drain()
    assert sample(metrics, "cronqueue_jobs_started_total", **RECORD) == 0


def test_serve_exposes_the_counters_over_http():
    served = worker_metrics.serve(0, "127.0.0.1")
    try:
        test_jobs.record.enqueue(key="k")
        drain()
        url = f"http://127.0.0.1:{served.server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        served.close()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    [started] = [s for s in families["cronqueue_jobs_started"].samples if s.name.endswith("_total")]
    assert (started.labels, started.value) == (RECORD, 1.0)
    assert "process_cpu_seconds" in families  # the process's own metrics come along
