"""The app imports and runs with neither optional extra (``[prometheus]``, ``[otel]``):
real processes in which importing ``prometheus_client`` or ``opentelemetry`` fails
(tests/without_extras.py). Jobs are enqueued and run; only ``--metrics-port`` and the
metrics view say what to install."""

import pytest

from django_cronqueue.models import Job
from tests.sensitive_keys import KEY_A

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ENQUEUE_AND_SCRAPE = """
import sys
from django.contrib.auth.models import User
from django.test import Client
from django_cronqueue import jobs
from tests.testapp import jobs as test_jobs

assert "prometheus_client" not in sys.modules and "opentelemetry" not in sys.modules
test_jobs.record.enqueue(key="without extras")
jobs.chain(test_jobs.record.s(key="chain 1"), test_jobs.record.s(key="chain 2")).enqueue()
client = Client()
client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
response = client.get("/metrics/")
print("metrics view:", response.status_code, response.content.decode().strip())
assert "prometheus_client" not in sys.modules and "opentelemetry" not in sys.modules
"""


def finish(runjobs, process):
    code = process.wait(120)
    return code, runjobs.log(process)


def test_jobs_are_enqueued_and_run_without_either_extra(runjobs):
    code, log = finish(
        runjobs,
        runjobs.start("-c", ENQUEUE_AND_SCRAPE, module="tests.without_extras", command="shell"),
    )
    assert code == 0, log
    assert "metrics view: 501 Metrics need prometheus_client" in log
    assert "django-cronqueue[prometheus]" in log
    code, log = finish(runjobs, runjobs.start("--burst", module="tests.without_extras"))
    assert code == 0, log
    assert sorted(Job.objects.values_list("status", flat=True)) == ["succeeded"] * 3


def test_metrics_port_without_prometheus_client_names_the_extra(runjobs):
    code, log = finish(runjobs, runjobs.start("--metrics-port", "0", module="tests.without_extras"))
    assert code != 0
    assert "--metrics-port: Metrics need prometheus_client" in log
    assert "pip install 'django-cronqueue[prometheus]'" in log


def test_sensitive_jobs_without_cryptography_fail_the_checks_naming_the_extra(runjobs):
    """E052: the jobs of tests/testapp/sensitive_jobs.py, discovered, need ``cryptography``;
    a site without sensitive jobs nor keys never imports it (the runs above)."""
    settings = {"DISCOVER": ["jobs", "sensitive_jobs"], "ENCRYPTION_KEYS": [KEY_A]}
    code, log = finish(
        runjobs, runjobs.start(module="tests.without_extras", command="check", settings=settings)
    )
    assert code != 0, log
    assert "django_cronqueue.E052" in log
    assert "'sensitive.charge'" in log
    assert "pip install 'django-cronqueue[encryption]'" in log
