"""Fair shares in the admin: the "Fair shares" list beside pauses, weights edited in
place through jobs.set_weight() (and refused out of range), read-only for viewers; a
job's page and list line show its fair key and, with PRIORITY_AGING, the priority a
waiting job ranks as."""

import datetime as dt
from html import unescape

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import FairShare
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

SHARES = reverse("admin:django_cronqueue_fairshare_changelist")
JOBS = reverse("admin:django_cronqueue_job_changelist")


def change_url(share):
    return reverse("admin:django_cronqueue_fairshare_change", args=[share.pk])


def test_the_list_shows_each_key_with_its_weight(admin_client):
    jobs.set_weight("reports", "acme", 4)
    jobs.set_weight("reports", "globex", 1)
    html = unescape(admin_client.get(SHARES).content.decode())
    assert "acme" in html and "globex" in html and "reports" in html


def test_an_operator_changes_a_weight_in_place(admin_client):
    jobs.set_weight("reports", "acme", 4)
    share = FairShare.objects.get()
    response = admin_client.post(change_url(share), {"weight": 7})
    assert response.status_code == 302
    assert FairShare.objects.get().weight == 7


def test_a_weight_out_of_range_is_refused_by_the_form(admin_client):
    jobs.set_weight("reports", "acme", 4)
    share = FairShare.objects.get()
    response = admin_client.post(change_url(share), {"weight": 5000})
    assert response.status_code == 200  # the form again, with its error
    assert FairShare.objects.get().weight == 4


def test_a_viewer_sees_the_weights_but_cannot_change_them(viewer_client):
    jobs.set_weight("reports", "acme", 4)
    share = FairShare.objects.get()
    assert viewer_client.get(SHARES).status_code == 200
    assert viewer_client.post(change_url(share), {"weight": 9}).status_code == 403
    assert FairShare.objects.get().weight == 4


def test_a_job_shows_its_fair_key_in_the_list_and_on_its_page(admin_client):
    job = JobFactory(fair_key="acme", queue="reports")
    assert "key acme" in unescape(admin_client.get(JOBS).content.decode())
    page = unescape(
        admin_client.get(
            reverse("admin:django_cronqueue_job_change", args=[job.pk])
        ).content.decode()
    )
    assert "acme" in page


@override_settings(CRONQUEUE={"PRIORITY_AGING": {"AFTER": 60, "EVERY": 30}})
def test_a_waiting_job_shows_the_priority_it_ranks_as(admin_client):
    job = JobFactory(priority=1, run_at=timezone.now() - dt.timedelta(seconds=300))
    page = unescape(
        admin_client.get(
            reverse("admin:django_cronqueue_job_change", args=[job.pk])
        ).content.decode()
    )
    assert "1 (waiting: ranks as 9)" in page
    assert "priority 1 ranks as 9" in unescape(admin_client.get(JOBS).content.decode())
