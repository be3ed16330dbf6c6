"""The Grafana dashboard in docs/grafana/ asks only for metrics and labels that the app
exposes (a worker's ``--metrics-port`` and ``MetricsView``): a renamed metric or label
breaks this test, not an operator's dashboard."""

import datetime as dt
import json
import re

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_cronqueue import jobs
from django_cronqueue.claiming import claim_due
from django_cronqueue.metrics import worker_metrics
from django_cronqueue.metrics.queue_metrics import render
from tests.cron_helpers import schedule
from tests.processes import ROOT
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db

DASHBOARD = ROOT / "docs" / "grafana" / "django-cronqueue.json"


def gauges():
    """{gauge name: its label names}, read from a scrape of rows that give every gauge
    a sample: a job, a code schedule, pauses of a queue and of a name."""
    test_jobs.record.enqueue(key="k")
    jobs.pause(queue="emails")
    jobs.pause(name=test_jobs.noop)
    with schedule("*/5 * * * *", name="tests.dashboard"):
        jobs.tick(now=timezone.now())
        body, _ = render(timezone.now())
    names = {}
    for family in text_string_to_metric_families(body.decode()):
        assert family.samples, f"{family.name} has no sample to read its labels from"
        names[family.name] = set().union(*(sample.labels for sample in family.samples))
    return names


def exposed():
    """{metric name as queried: its label names}, for both sources."""
    return {**gauges(), **worker_metric_labels()}


def worker_metric_labels():
    """{metric name as queried: its label names} of a worker's metrics, once jobs have
    succeeded, failed, retried and lost a lease (a metric has labels once it has a sample)."""
    worker = worker_metrics.WorkerMetrics()
    worker.connect()
    try:
        test_jobs.record.enqueue(key="ok")
        test_jobs.fails_now.enqueue(key="failed")
        test_jobs.record.enqueue(key="lost")
        now = timezone.now()
        claim_due(now, queues=None, limit=1, worker_id="crashed-worker")
        while jobs.tick(now=now + dt.timedelta(seconds=31)).claimed:
            pass
    finally:
        worker.disconnect()
    names = {}
    for family in worker.registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def expressions():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_every_metric_and_label_the_dashboard_queries_is_exposed():
    names = exposed()
    used_labels = set()
    for expr in expressions():
        for metric in re.findall(r"\bcronqueue_\w+", expr):
            assert metric in names, f"{metric} (in {expr}) is not exposed"
            for selector in re.findall(rf"{metric}\{{([^}}]*)\}}", expr):
                used = set(re.findall(r"(\w+)\s*=~?", selector))
                assert used <= names[metric], f"{metric}: labels {used - names[metric]}"
        for grouping in re.findall(r"by \(([^)]*)\)", expr):
            used_labels |= {label.strip() for label in grouping.split(",")}
    every_label = set().union(*names.values())
    assert used_labels <= every_label, used_labels - every_label
