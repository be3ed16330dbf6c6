"""The admin and sensitive arguments (SPEC section 16): a job's page shows
``[encrypted]`` or ``[erased]``, never a value nor its token; a dynamic schedule's form
keeps the stored values encrypted through an edit and encrypts a value typed in clear."""

import json

import pytest
from django.test import override_settings
from django.urls import reverse

from django_cronqueue.integrations import encryption
from django_cronqueue.models import CronSchedule, Job
from tests.sensitive_keys import KEY_A, SECRET, registered, unregistered_handles
from tests.testapp.sensitive_jobs import charge

pytestmark = pytest.mark.django_db

HANDLES = unregistered_handles()
ARGS = {"order_id": 3, "card_token": SECRET, "email": "e@example.com"}


@pytest.fixture(autouse=True)
def sensitive_defined():
    with registered(HANDLES), override_settings(CRONQUEUE={"ENCRYPTION_KEYS": [KEY_A]}):
        yield


def form_data(payload):
    return {
        "name": "ignored",
        "job": "sensitive.charge",
        "payload": payload,
        "expression": "0 4 * * *",
        "tz": "UTC",
        "catch_up": "latest",
        "catch_up_window": "",
        "max_catch_up": "10",
        "overlap": "allow",
        "retries": "",
        "queue": "",
        "priority": "",
    }


def test_a_jobs_page_shows_neither_value_nor_token(admin_client):
    job = charge.enqueue(**ARGS)
    token = Job.objects.get(pk=job.pk).payload["card_token"]["$encrypted"]
    html = admin_client.get(reverse("admin:django_cronqueue_job_change", args=[job.pk])).content
    page = html.decode()
    assert "[encrypted]" in page and "order_id" in page
    assert SECRET not in page and token not in page


def test_a_schedule_edit_keeps_the_values_encrypted_and_encrypts_new_ones(admin_client):
    schedule = CronSchedule.objects.create_dynamic(
        name="sensitive.nightly", job="sensitive.charge", payload=ARGS, expression="0 3 * * *"
    )
    schedule.refresh_from_db()
    url = reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk])
    page = admin_client.get(url).content.decode()
    assert SECRET not in page
    # Saved as shown (the stored values, an argument changed): still the same secrets.
    edited = {**schedule.payload, "order_id": 4}
    response = admin_client.post(url, form_data(json.dumps(edited)))
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule.refresh_from_db()
    assert encryption.decrypt_payload(schedule.payload, "s") == {**ARGS, "order_id": 4}
    # A value typed in clear is stored encrypted.
    typed = {**schedule.payload, "card_token": "typed-SECRET"}
    assert admin_client.post(url, form_data(json.dumps(typed))).status_code == 302
    schedule.refresh_from_db()
    assert "typed-SECRET" not in json.dumps(schedule.payload)
    assert encryption.decrypt_payload(schedule.payload, "s")["card_token"] == "typed-SECRET"
