"""A job's timeline and a schedule's admin log in headless Chromium, at 1280 and 1400
pixels with Django's navigation sidebar open: a job that failed, was retried by an
operator from its page and ran again through the worker's lifecycle shows its enqueue,
every attempt with its outcome and error, each traceback opening on click and the
operator's retry with the user; the timeline fits the viewport; with the live refresh on,
the attempt a worker runs next appears without a reload. A schedule paused from its page
lists that action with the user. Saves the screenshots of a job's timeline and of a
``key:value`` search shown in the README and docs/admin.md.

Launched as tests/admin/test_browser.py launches Chromium (see there).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import CronSchedule, JobStatus
from tests.admin import test_browser
from tests.admin.test_browser import (
    EXPORT_CALLS,
    VIEWPORT,
    arrange_schedules,
    expect_sidebar_open,
    fill_history,
    launch,
    log_in,
    make_failed_export,
    shoot,
    sync_playwright,
)

if sync_playwright is not None:
    from playwright.sync_api import expect

#: Skipped without Playwright or Chromium; a live server needs committed rows.
pytestmark = test_browser.pytestmark
admin_static = test_browser.admin_static
server = test_browser.server
demo_jobs = test_browser.demo_jobs

JOBS = "/admin/django_cronqueue/job/"
#: Long enough for a live refresh at the fastest rate on a busy machine.
WAIT = 20_000
WAREHOUSE = "TimeoutError: warehouse API did not answer within 30 s"


@pytest.fixture
def operator(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls made between
    # browser steps (jobs.tick()) are plain synchronous calls (see test_browser.py).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
    return User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")


@pytest.fixture
def browser():
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()
            connections.close_all()


def timeline_rows(page):
    return page.locator("#cq-timeline tbody tr")


def assert_fits_the_viewport(page, width: int) -> None:
    """No sideways scrolling of the page, and the timeline's right edge in view."""
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the job's page at {width}px scrolls sideways: {scroll}"
    box = page.locator("#cq-timeline").bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= width, (box, width)


def run_the_next_attempt() -> None:
    result = jobs.tick(queues=["reports"])
    assert (result.claimed, result.ran) == (1, 1)
    # The ORM calls of the Playwright block get a connection of their own: close it, or
    # it would outlive the test database.
    connections.close_all()


@pytest.mark.parametrize("width", [1280, 1400])
def test_a_retried_jobs_timeline_shows_every_attempt_and_the_operator(
    server, demo_jobs, operator, browser, width
):
    failed = make_failed_export(timezone.now())  # two attempts, both timed out
    page = browser.new_page(viewport={"width": width, "height": 900})
    log_in(page, server, f"{JOBS}{failed.pk}/change/")
    expect_sidebar_open(page)
    rows = timeline_rows(page)
    expect(rows.first).to_contain_text("Enqueued")
    failures = rows.filter(has=page.locator(".cq-status-failed"))
    expect(failures).to_have_count(2)
    for n in (1, 2):
        attempt = rows.filter(has_text=f"Attempt {n} failed")
        expect(attempt.locator(".cq-timeline-error")).to_have_text(
            f"{WAREHOUSE} (GET /v2/invoices?day=2026-06-01)"
        )

    # Each attempt's traceback is folded away, and opens on a click.
    second = rows.filter(has_text="Attempt 2 failed")
    traceback = second.locator("details pre.cq-attempt-traceback")
    expect(traceback).to_be_hidden()
    second.locator("details summary").click()
    expect(traceback).to_be_visible()
    expect(traceback).to_contain_text("Traceback (most recent call last)")
    expect(traceback).to_contain_text("export_invoices")
    expect(traceback).to_contain_text(WAREHOUSE)
    assert_fits_the_viewport(page, width)

    # The operator retries it from its page: the timeline names them.
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".messagelist .success")).to_have_text(f"Retried 1 job: #{failed.pk}.")
    retry = rows.filter(has_text="Retry (admin action)")
    expect(retry).to_have_count(1)
    expect(retry.locator("td").nth(2)).to_have_text("ops")

    # Live: the attempt a worker runs next appears without a reload, with the open
    # traceback left open.
    page.select_option(".cq-live .cq-live-rate", "2")
    expect(page.locator(".cq-live-toggle")).to_have_text("Pause")
    second.locator("details summary").click()
    page.evaluate("window.cqMarker = 'still here'")
    run_the_next_attempt()
    succeeded = rows.filter(has=page.locator(".cq-status-succeeded"))
    expect(succeeded).to_have_count(1, timeout=WAIT)
    # An operator's retry starts the count of attempts again.
    expect(succeeded).to_contain_text("Attempt 1 succeeded")
    expect(page.locator(".field-status_display .cq-status-succeeded")).to_be_visible()
    assert page.evaluate("window.cqMarker") == "still here"
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    expect(second.locator("details pre")).to_be_visible()
    # The whole story, oldest first: the operator's retry comes before the attempt it led to.
    titles = [title.strip() for title in rows.locator("td:nth-child(2)").all_text_contents()]
    assert titles[0] == "Enqueued", titles
    attempts = [title for title in titles if title.startswith("Attempt")]
    assert attempts == ["Attempt 1 failed", "Attempt 2 failed", "Attempt 1 succeeded"], titles
    assert titles.index("Retry (admin action)") < titles.index("Attempt 1 succeeded"), titles
    assert_fits_the_viewport(page, width)
    assert EXPORT_CALLS == ["2026-06-01"] * 3


def test_a_schedule_paused_from_its_page_lists_the_action_and_the_user(
    server, demo_jobs, operator, browser
):
    arrange_schedules(timezone.now())
    nightly = CronSchedule.objects.get(name="reports.nightly_digest")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, server, f"/admin/django_cronqueue/cronschedule/{nightly.pk}/change/")
    expect_sidebar_open(page)
    log = page.locator("#cq-admin-log")
    expect(log).to_contain_text("No operator action on this schedule")

    page.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".messagelist .success")).to_be_visible()
    entries = log.locator("tbody tr")
    expect(entries).to_have_count(1)
    expect(entries.locator("td").nth(1)).to_have_text("ops")
    expect(entries.locator("td").nth(2)).to_contain_text("ause")
    assert CronSchedule.objects.get(pk=nightly.pk).paused
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_the_screenshots_of_a_timeline_and_of_an_argument_search(
    server, demo_jobs, operator, browser
):
    """The README's pictures of a job's several attempts and of the list's ``key:value``
    search, with the live control (saved with CRONQUEUE_UPDATE_SCREENSHOTS=1)."""
    now = timezone.now()
    fill_history(now)
    arrange_schedules(now)
    failed = make_failed_export(now)
    page = browser.new_page(viewport=VIEWPORT)
    log_in(page, server, f"{JOBS}{failed.pk}/change/")
    expect_sidebar_open(page)
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".messagelist .success")).to_be_visible()
    run_the_next_attempt()
    page.goto(f"{server.url}{JOBS}{failed.pk}/change/")
    rows = timeline_rows(page)
    expect(rows.filter(has_text="Attempt 1 succeeded")).to_have_count(1)
    rows.filter(has_text="Attempt 2 failed").locator("details summary").click()
    # The last screen of the page: the job's last failure above its timeline.
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    timeline = page.locator("#cq-timeline").bounding_box()
    assert timeline is not None and timeline["y"] >= 0
    assert timeline["y"] + timeline["height"] <= VIEWPORT["height"]
    shoot(page, "job-timeline.png")

    page.goto(f"{server.url}{JOBS}")
    page.fill("#searchbar", "day:2026-06-01")
    page.press("#searchbar", "Enter")
    results = page.locator("#result_list tbody tr")
    expect(results).to_have_count(7)  # the six digests of that day and the export
    expect(page.locator(".cq-live")).to_be_visible()
    assert page.input_value("#searchbar") == "day:2026-06-01"
    shoot(page, "job-list-search.png")
    failed.refresh_from_db()
    assert failed.status == JobStatus.SUCCEEDED
