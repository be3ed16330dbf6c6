"""The live refresh's server side: a refresh (``X-CronQueue-Live: 1``) is the page's own
view, costs no more statements than a page load, and leaves the session's messages for
the next page load. The browser side is in test_live_browser.py."""

from __future__ import annotations

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_cronqueue.conf import database_alias
from django_cronqueue.models import JobStatus
from tests.admin.conftest import messages_of
from tests.factories import JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db

LIVE = {"HTTP_X_CRONQUEUE_LIVE": "1"}


@pytest.fixture
def some_jobs():
    JobFactory.create_batch(3, name="shop.sync", payload={"order": {"id": 7}})
    WorkerFactory()
    return JobFactory(
        name="shop.charge", status=JobStatus.FAILED, attempts=4, last_error="RuntimeError: x"
    )


def pages(job) -> dict[str, str]:
    changelist = reverse("admin:django_cronqueue_job_changelist")
    return {
        "list": changelist,
        "list, filtered and searched": changelist + "?status=failed&q=order.id:7+shop",
        "a job's page": reverse("admin:django_cronqueue_job_change", args=[job.pk]),
        "dashboard": reverse("admin:django_cronqueue_job_dashboard"),
    }


def statements(client, url: str, **headers: str) -> tuple[int, str]:
    connection = connections[database_alias()]
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200, url
    return len(captured), response.content.decode()


@pytest.mark.parametrize(
    "page", ["list", "list, filtered and searched", "a job's page", "dashboard"]
)
def test_a_refresh_costs_no_more_statements_than_a_page_load(admin_client, some_jobs, page):
    url = pages(some_jobs)[page]
    statements(admin_client, url)  # warm the caches a first load fills
    loaded, html = statements(admin_client, url)
    refreshed, live_html = statements(admin_client, url, **LIVE)
    assert refreshed <= loaded, (page, refreshed, loaded)
    assert loaded > 0
    assert 'data-cq-live="' in html and "django_cronqueue/live.js" in html
    assert live_html.count("<tr") == html.count("<tr")


@pytest.mark.parametrize(
    ("page", "mode"),
    [("list", "changelist"), ("a job's page", "page"), ("dashboard", "page")],
)
def test_each_live_page_has_the_control_hidden_until_its_script_runs(
    admin_client, some_jobs, page, mode
):
    html = admin_client.get(pages(some_jobs)[page]).content.decode()
    assert f'<div class="cq-live" data-cq-live="{mode}" hidden>' in html
    for rate in ("2", "5", "10", "30"):
        assert f'<option value="{rate}"' in html


def test_the_dashboard_reloads_itself_only_without_javascript(admin_client, some_jobs):
    html = admin_client.get(pages(some_jobs)["dashboard"]).content.decode()
    assert '<noscript><meta http-equiv="refresh" content="60"></noscript>' in html
    assert html.count('http-equiv="refresh"') == 1


def test_a_refresh_leaves_the_messages_for_the_next_page_load(admin_client, some_jobs):
    job = some_jobs
    changelist = pages(job)["list"]
    response = admin_client.post(changelist, {"action": "retry_jobs", "_selected_action": [job.pk]})
    assert response.status_code == 302
    refreshed = admin_client.get(changelist, **LIVE)
    assert f"Retried 1 job: #{job.pk}." in refreshed.content.decode()
    loaded = admin_client.get(changelist)
    assert messages_of(loaded) == [f"Retried 1 job: #{job.pk}."]
    assert messages_of(admin_client.get(changelist)) == []  # used up by that page load


def test_a_refresh_of_a_search_adds_no_warning(admin_client, some_jobs):
    url = pages(some_jobs)["list"] + "?q=k:" + "v" * 2000
    assert "too long" in " ".join(messages_of(admin_client.get(url)))
    for _ in range(3):
        admin_client.get(url, **LIVE)
    assert messages_of(admin_client.get(pages(some_jobs)["list"])) == []
