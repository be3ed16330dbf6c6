"""``runjobs --metrics-port``: a real worker process serves its counters over HTTP, they
move as its jobs run, and the exposition parses with ``prometheus_client``'s parser."""

import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_cronqueue.models import Job
from tests.testapp import jobs as test_jobs

from .conftest import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SERVING = re.compile(r"Serving this worker's metrics on http://127\.0\.0\.1:(\d+)/metrics")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def counter(found, metric, name):
    return found.get((metric, (("name", name), ("queue", "default"))), 0.0)


def test_the_counters_of_a_runjobs_process_move_as_its_jobs_run(runjobs):
    worker = runjobs.start(
        "--metrics-port", "0", "--metrics-addr", "127.0.0.1", settings={"POLL_INTERVAL": 0.2}
    )
    port = int(wait_until(lambda: SERVING.search(runjobs.log(worker)), timeout=30).group(1))
    before = scrape(port)
    assert counter(before, "cronqueue_jobs_started_total", "testapp.record") == 0
    for n in range(5):
        test_jobs.record.enqueue(key=f"k{n}")
    test_jobs.fails_now.enqueue(key="x")
    wait_until(lambda: not Job.objects.filter(status__in=["pending", "running"]).exists(), 60)

    def counted():
        found = scrape(port)
        return found if counter(found, "cronqueue_jobs_failed_total", "testapp.fails_now") else None

    found = wait_until(counted, timeout=30)  # a failure is counted after its row is written
    assert counter(found, "cronqueue_jobs_started_total", "testapp.record") == 5
    assert counter(found, "cronqueue_jobs_succeeded_total", "testapp.record") == 5
    assert counter(found, "cronqueue_jobs_failed_total", "testapp.fails_now") == 1
    duration = ("name", "testapp.record"), ("outcome", "succeeded"), ("queue", "default")
    assert found[("cronqueue_job_duration_seconds_count", duration)] == 5
    runjobs.stop(worker)


def test_a_taken_metrics_port_stops_runjobs_with_a_clear_error(runjobs):
    first = runjobs.start("--metrics-port", "0", "--metrics-addr", "127.0.0.1")
    port = wait_until(lambda: SERVING.search(runjobs.log(first)), timeout=30).group(1)
    second = runjobs.start("--metrics-port", port, "--metrics-addr", "127.0.0.1")
    assert second.wait(60) != 0
    assert f"--metrics-port {port}: cannot serve on 127.0.0.1:{port}" in runjobs.log(second)
    runjobs.stop(first)
