"""``cronqueue_rotate_keys`` while a real worker runs the jobs it rotates (SPEC section
16): no write of either is lost. A success erases its row's values; a rotation of the
same row must neither fail it nor put a token back; every row left pending ends under
the new key alone."""

import io
import json

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_cronqueue.models import Job
from django_cronqueue.operations.key_rotation import rotate_keys
from tests.processes import wait_until
from tests.sensitive_keys import KEY_A, KEY_B, SECRET, registered, unregistered_handles
from tests.testapp.sensitive_jobs import charge

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HANDLES = unregistered_handles()
COUNT = 2000
BOTH_KEYS = {"ENCRYPTION_KEYS": [KEY_A, KEY_B]}


@pytest.fixture(autouse=True)
def sensitive_defined():
    with registered(HANDLES):
        yield


def test_rotating_while_a_worker_runs_the_jobs_loses_no_write(runjobs):
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_B]}):
        made = [
            job.pk
            for job in charge.enqueue_many(
                [{"order_id": n, "card_token": SECRET, "email": "e@x"} for n in range(COUNT)]
            )
        ]
    worker = runjobs.start(
        "--concurrency",
        "2",
        settings={**BOTH_KEYS, "DISCOVER": ["jobs", "sensitive_jobs"], "POLL_INTERVAL": 0.1},
    )
    wait_until(lambda: Job.objects.filter(status="succeeded").exists(), timeout=60)
    with override_settings(CRONQUEUE=BOTH_KEYS):
        # Passes over rows the worker is finishing meanwhile: the first finds most of them
        # pending still (a worker runs a few hundred a second here).
        rotated = [rotate_keys(batch_size=20).rotated for _ in range(3)]
    assert rotated[0] > 0, rotated
    wait_until(lambda: Job.objects.filter(status="succeeded").count() == COUNT, timeout=120)
    assert runjobs.stop(worker) == 0, runjobs.log(worker)
    rows = list(Job.objects.filter(pk__in=made).values_list("status", "payload"))
    assert {status for status, _ in rows} == {"succeeded"}
    # Every success erased its values, and no rotation wrote a token back over one.
    assert all(
        payload["card_token"] == {"$encrypted": None} and payload["email"] == {"$encrypted": None}
        for _, payload in rows
    ), json.dumps([p for _, p in rows if p["card_token"] != {"$encrypted": None}][:3])
    assert "DecryptionError" not in runjobs.log(worker)


def test_rows_the_worker_has_not_reached_end_under_the_new_key(runjobs):
    with override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_B]}):
        job = charge.enqueue(order_id=1, card_token=SECRET, email="e@x")
    with override_settings(CRONQUEUE=BOTH_KEYS):
        call_command("cronqueue_rotate_keys", stdout=io.StringIO())
    # A worker with the new key alone runs it: the old key is no longer needed.
    worker = runjobs.start(
        "--burst",
        settings={"ENCRYPTION_KEYS": [KEY_A], "DISCOVER": ["jobs", "sensitive_jobs"]},
    )
    assert worker.wait(60) == 0, runjobs.log(worker)
    assert Job.objects.get(pk=job.pk).status == "succeeded", runjobs.log(worker)
