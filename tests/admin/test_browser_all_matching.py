"""In headless Chromium, as an operator does it: tick the page's rows, take Django's
"Select all N jobs", pick Retry, read the confirmation page that states N and the
filters, confirm, and find every matching job retried (the other queue's left alone).
Shares the set-up of ``test_browser`` (Playwright's Python package and Debian's
``chromium``; skipped, saying which is missing, without them)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone

from django_cronqueue.models import Job, JobStatus
from tests.admin.test_browser import (  # noqa: F401 - admin_static and server are fixtures
    VIEWPORT,
    admin_static,
    expect,
    launch,
    log_in,
    pytestmark,
    server,
    shoot,
    sync_playwright,
)
from tests.factories import JobFactory

#: More than a page of the list (100 rows), so that Django offers "Select all".
MATCHING = 150


@pytest.fixture
def failed_emails():
    finished = timezone.now()
    Job.objects.bulk_create(
        JobFactory.build(
            name="emails.send_welcome",
            queue=queue,
            status=JobStatus.FAILED,
            finished_at=finished,
            last_error="SMTPServerDisconnected: Connection unexpectedly closed",
        )
        for queue in ["emails"] * MATCHING + ["reports"] * 3
    )


def test_retry_all_matching_jobs_through_the_confirmation(
    server,  # noqa: F811 - the fixture
    failed_emails,
    monkeypatch,
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # as in test_browser
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            log_in(page, server, quote("/admin/django_cronqueue/job/?status=failed&queue=emails"))
            expect(page.locator("#result_list")).to_be_visible()
            page.click("#action-toggle")
            question = page.locator(".actions .question")
            expect(question).to_be_visible()
            question.locator("a").click()
            expect(page.locator(".actions .all")).to_be_visible()
            page.select_option("select[name=action]", "retry_jobs")
            page.locator(".actions button[name=index]").click()  # "Go", "Run" from Django 6.0

            expect(page.locator(".cq-all-matching-count")).to_contain_text(
                f"Retry all {MATCHING} jobs that match these filters"
            )
            filters = page.locator(".cq-all-matching-filters")
            expect(filters).to_contain_text("status: failed")
            expect(filters).to_contain_text("queue: emails")
            assert Job.objects.filter(status=JobStatus.FAILED).count() == MATCHING + 3
            connections.close_all()  # the greenlet's own connection (see test_browser)
            shoot(page, "all-matching-confirmation.png")

            page.get_by_role("button", name=f"Yes, retry all {MATCHING} jobs").click()
            expect(page.locator(".messagelist .success")).to_contain_text(
                f"Retried {MATCHING} jobs: #"
            )
        finally:
            browser.close()
    assert set(Job.objects.filter(queue="emails").values_list("status", flat=True)) == {
        JobStatus.PENDING
    }
    assert set(Job.objects.filter(queue="reports").values_list("status", flat=True)) == {
        JobStatus.FAILED
    }
