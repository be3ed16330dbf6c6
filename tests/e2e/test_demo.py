"""The demo site: an order placed through its view is processed by runjobs --burst."""

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.e2e

ENQUEUE_THROUGH_THE_VIEW = """
import django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="localhost")
for email in ["a@example.com", "b@example.com"]:
    response = client.post("/", {"email": email})
    assert response.status_code == 302, response.status_code
response = client.post("/", {"email": "c@example.com", "fail": "1"})
assert response.status_code == 302
"""

CHECK = """
import django
django.setup()
from django_cronqueue.models import Job
from shop.models import Order
assert Order.objects.count() == 3
assert Order.objects.filter(receipt_sent_at__isnull=True).count() == 0
# The demo's */5 cron schedule may add an occurrence if the run crosses a boundary: only
# the jobs the view enqueued are asserted.
statuses = sorted(Job.objects.filter(scheduled_for=None).values_list("name", "status"))
print(statuses)
assert statuses == [("shop.flaky_export", "failed")] + [("shop.send_receipt", "succeeded")] * 3
"""


def test_runjobs_burst_drains_what_the_demo_view_enqueued(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'testproject'}",
    }
    manage = [sys.executable, str(ROOT / "testproject" / "manage.py")]

    def run(*args):
        result = subprocess.run(
            args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    run(*manage, "migrate", "--noinput")
    run(sys.executable, "-c", ENQUEUE_THROUGH_THE_VIEW)
    run(*manage, "runjobs", "--burst")
    run(sys.executable, "-c", CHECK)
