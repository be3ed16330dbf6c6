"""The live refresh and the ``key:value`` search in headless Chromium, at 1280 and 1400
pixels with Django's navigation sidebar open: a row's status changes on screen without a
reload, the selection (one row, or "select all") and the scroll position survive a
refresh, the pause control stops it, the rate is remembered, a job's page and the
dashboard follow the database, and a search for a payload value lists its jobs.

Launched as tests/admin/test_browser.py launches Chromium (see there).
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone

from django_cronqueue.models import Job, JobStatus
from tests.admin import test_browser
from tests.admin.test_browser import expect_sidebar_open, launch, log_in, sync_playwright
from tests.factories import JobFactory

if sync_playwright is not None:
    from playwright.sync_api import expect

#: Skipped without Playwright or Chromium; a live server needs committed rows.
pytestmark = test_browser.pytestmark
#: The live server, serving the admin's static files and ours.
admin_static = test_browser.admin_static
server = test_browser.server

LIST = "/admin/django_cronqueue/job/"
#: Long enough for a refresh at the fastest rate on a busy machine.
WAIT = 20_000


@pytest.fixture
def browser_page(server, monkeypatch, request):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # see tests/admin/test_browser.py
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    width = getattr(request, "param", 1400)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": width, "height": 700})
            yield page
        finally:
            browser.close()
            connections.close_all()


def jobs_to_list(count: int = 40) -> list[Job]:
    now = timezone.now()
    return [
        JobFactory(
            name="shop.sync" if i % 2 else "mail.send",
            queue="default",
            payload={"order": {"id": 1000 + i}, "tags": ["eu"] if i % 3 else ["us"]},
            run_at=now + dt.timedelta(hours=1, minutes=i),
        )
        for i in range(count)
    ]


def set_rate(page, seconds: str) -> None:
    page.select_option(".cq-live .cq-live-rate", seconds)


def mark_the_window(page) -> None:
    """A marker a reload would wipe out, and the count of navigations so far."""
    page.evaluate("window.cqMarker = 'still here'")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.cqMarker") == "still here"
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert page.evaluate("performance.getEntriesByType('navigation')[0].type") == "navigate"


def refreshes(page) -> int:
    return int(page.locator(".cq-live").get_attribute("data-refreshed") or 0)


def wait_for_a_refresh(page, after: int) -> None:
    page.wait_for_function(
        f"Number(document.querySelector('.cq-live').dataset.refreshed || 0) > {after}",
        timeout=WAIT,
    )


def change_status(job: Job, status: str) -> None:
    Job.objects.filter(pk=job.pk).update(status=status, last_error="RuntimeError: late")
    connections.close_all()


@pytest.mark.parametrize("browser_page", [1280, 1400], indirect=True)
def test_the_list_follows_the_database_and_keeps_the_selection_and_the_scroll(server, browser_page):
    page = browser_page
    listed = jobs_to_list()
    log_in(page, server, LIST)
    page.goto(f"{server.url}{LIST}?status=pending&name=shop.sync")
    expect(page.locator("#result_list")).to_be_visible()
    expect_sidebar_open(page)
    control = page.locator(".cq-live")
    expect(control).to_be_visible()
    expect(control.locator(".cq-live-toggle")).to_have_text("Pause")
    set_rate(page, "2")
    mark_the_window(page)

    shown = [job for job in listed if job.name == "shop.sync"]
    target, selected = shown[-1], shown[-2]  # the newest: at the top of the list
    page.check(f"input.action-select[value='{selected.pk}']")
    expect(page.locator(".action-counter")).to_have_text(f"1 of {len(shown)} selected")
    page.select_option("select[name=action]", "run_jobs_now")  # a control in use
    page.mouse.wheel(0, 400)
    page.wait_for_function("window.scrollY > 0")
    scrolled = page.evaluate("window.scrollY")

    row = page.locator(f"#result_list tbody tr:has(input[value='{target.pk}'])")
    expect(row.locator(".cq-status-pending")).to_be_visible()
    change_status(target, JobStatus.FAILED)  # it leaves the pending filter
    before = refreshes(page)
    expect(row).to_have_count(0, timeout=WAIT)
    expect(page.locator(".cq-count-failed .cq-count-n")).to_have_text("1", timeout=WAIT)
    wait_for_a_refresh(page, before)

    assert_not_reloaded(page)
    assert page.url.endswith(LIST + "?status=pending&name=shop.sync")
    assert page.is_checked(f"input.action-select[value='{selected.pk}']")
    expect(page.locator(f"tr.selected input[value='{selected.pk}']")).to_have_count(1)
    expect(page.locator("tr.selected")).to_have_count(1)
    expect(page.locator(".action-counter")).to_have_text(f"1 of {len(shown) - 1} selected")
    assert page.input_value("select[name=action]") == "run_jobs_now"
    assert abs(page.evaluate("window.scrollY") - scrolled) <= 1
    # The list refreshed rows can be selected and acted on as before.
    page.check(f"input.action-select[value='{shown[0].pk}']")
    expect(page.locator(".action-counter")).to_have_text(f"2 of {len(shown) - 1} selected")


def test_select_all_survives_a_refresh_and_covers_new_rows(server, browser_page):
    page = browser_page
    jobs_to_list(10)
    log_in(page, server, LIST + "?status=pending")
    expect(page.locator("#result_list")).to_be_visible()
    set_rate(page, "2")
    mark_the_window(page)
    page.check("#action-toggle")
    expect(page.locator(".action-counter")).to_have_text("10 of 10 selected")

    newcomer = JobFactory(name="mail.send", payload={"order": {"id": 1}})
    connections.close_all()
    row = page.locator(f"#result_list tbody tr:has(input[value='{newcomer.pk}'])")
    expect(row).to_have_count(1, timeout=WAIT)
    assert_not_reloaded(page)
    # The page's old rows stay selected, the new row is not (the selection is what was
    # picked), and the header's "all" box says so.
    expect(page.locator(".action-counter")).to_have_text("10 of 11 selected")
    assert not page.is_checked("#action-toggle")
    assert not page.is_checked(f"input.action-select[value='{newcomer.pk}']")
    # Selecting all again takes in the new row.
    page.check("#action-toggle")
    expect(page.locator("tr input.action-select:checked")).to_have_count(11)
    expect(page.locator(".action-counter")).to_have_text("11 of 11 selected")


def test_select_all_matching_jobs_survives_a_refresh(server, browser_page):
    """Django's "Select all N jobs" (every matching job, on every page) stays chosen, and
    takes in the job that arrived."""
    page = browser_page
    Job.objects.bulk_create(JobFactory.build(name="mail.send") for _ in range(105))
    log_in(page, server, LIST)
    expect(page.locator("#result_list")).to_be_visible()
    set_rate(page, "2")
    mark_the_window(page)
    page.check("#action-toggle")
    page.get_by_role("button", name="Select all 105 jobs").click()
    expect(page.locator(".actions span.all")).to_have_text("All 105 selected")

    newcomer = JobFactory(name="mail.send")
    connections.close_all()
    box = page.locator(f"#result_list input.action-select[value='{newcomer.pk}']")
    expect(box).to_have_count(1, timeout=WAIT)
    assert_not_reloaded(page)
    expect(page.locator(".actions span.all")).to_have_text("All 106 selected")
    expect(page.locator(".actions span.all")).to_be_visible()
    assert page.input_value("input.select-across") == "1"
    assert box.is_checked()
    expect(page.locator("tr input.action-select:not(:checked)")).to_have_count(0)


def test_an_empty_list_gets_its_first_rows_and_their_actions(server, browser_page):
    page = browser_page
    [job] = jobs_to_list(1)
    log_in(page, server, LIST)
    page.goto(f"{server.url}{LIST}?status=failed")
    expect(page.locator(".paginator")).to_contain_text("0 jobs")
    set_rate(page, "2")
    mark_the_window(page)
    change_status(job, JobStatus.FAILED)
    box = page.locator(f"#result_list input.action-select[value='{job.pk}']")
    expect(box).to_have_count(1, timeout=WAIT)
    assert_not_reloaded(page)
    box.check()
    expect(page.locator(".action-counter")).to_have_text("1 of 1 selected")
    page.select_option("select[name=action]", "retry_jobs")
    page.locator(".actions button[name=index]").click()  # "Go", "Run" from Django 6.0
    expect(page.locator(".messagelist .success")).to_have_text(f"Retried 1 job: #{job.pk}.")


def test_paused_the_list_stays_as_it_is_and_the_rate_is_remembered(server, browser_page):
    page = browser_page
    [job] = jobs_to_list(1)
    log_in(page, server, LIST)
    expect(page.locator("#result_list")).to_be_visible()
    set_rate(page, "2")
    toggle = page.locator(".cq-live-toggle")
    toggle.click()
    expect(toggle).to_have_text("Resume")
    expect(page.locator(".cq-live-state")).to_have_text("paused")
    mark_the_window(page)
    change_status(job, JobStatus.FAILED)
    page.wait_for_timeout(5_000)  # two and a half turns of the rate
    row = page.locator(f"#result_list tbody tr:has(input[value='{job.pk}'])")
    expect(row.locator(".cq-status-pending")).to_be_visible()
    assert refreshes(page) == 0

    toggle.click()  # resumed: refreshes at once
    expect(toggle).to_have_text("Pause")
    expect(row.locator(".cq-status-failed")).to_be_visible(timeout=WAIT)
    assert_not_reloaded(page)

    page.reload()
    assert page.input_value(".cq-live .cq-live-rate") == "2"


#: What the browser does when the tab is hidden or shown again.
SET_VISIBILITY = """state => {
    Object.defineProperty(document, 'visibilityState', {value: state, configurable: true});
    document.dispatchEvent(new Event('visibilitychange'));
}"""


def test_a_hidden_tab_does_not_refresh(server, browser_page):
    page = browser_page
    jobs_to_list(2)
    log_in(page, server, LIST)
    set_rate(page, "2")
    page.evaluate(SET_VISIBILITY, "hidden")
    page.wait_for_timeout(5_000)
    assert refreshes(page) == 0
    page.evaluate(SET_VISIBILITY, "visible")
    wait_for_a_refresh(page, 0)


def test_a_jobs_page_and_the_dashboard_follow_the_database(server, browser_page):
    page = browser_page
    [job] = jobs_to_list(1)
    log_in(page, server, f"{LIST}{job.pk}/change/")
    expect(page.locator(".field-status_display .cq-status-pending")).to_be_visible()
    set_rate(page, "2")
    mark_the_window(page)
    change_status(job, JobStatus.FAILED)
    expect(page.locator(".field-status_display .cq-status-failed")).to_be_visible(timeout=WAIT)
    expect(page.get_by_role("button", name="Retry")).to_be_visible()
    # Django 5.2's places, then 6.0's
    subtitle = page.locator("#content > h2, #content > .titles-and-tools h2")
    expect(subtitle).to_contain_text(f"#{job.pk} (failed)")
    expect(page.locator(".breadcrumbs")).to_contain_text(f"#{job.pk} (failed)")
    assert_not_reloaded(page)

    page.goto(f"{server.url}{LIST}dashboard/")
    expect(page.locator(".cq-card-failed .cq-card-n").first).to_have_text("1")
    mark_the_window(page)
    page.click("#cq-pauses summary")  # open: must stay open across a refresh
    change_status(job, JobStatus.CANCELLED)
    expect(page.locator(".cq-card-cancelled .cq-card-n")).to_have_text("1", timeout=WAIT)
    assert page.locator("#cq-pauses details").evaluate("d => d.open")
    assert_not_reloaded(page)


@pytest.mark.parametrize("browser_page", [1280, 1400], indirect=True)
def test_a_key_value_search_lists_the_jobs_holding_that_value(server, browser_page):
    page = browser_page
    listed = jobs_to_list(6)
    JobFactory(name="shop.sync", payload={"order": {"id": "1003"}})  # the same, as a string
    log_in(page, server, LIST)
    expect_sidebar_open(page)
    page.fill("#searchbar", "order.id:1003")
    page.press("#searchbar", "Enter")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f"#result_list input[value='{listed[3].pk}']")).to_have_count(1)

    page.fill("#searchbar", 'tags:us order.id:"1003"')  # a list element; a string only
    page.press("#searchbar", "Enter")
    expect(page.locator(".paginator")).to_contain_text("0 jobs")
    page.fill("#searchbar", "tags:us")
    page.press("#searchbar", "Enter")
    expect(rows).to_have_count(2)  # jobs 0 and 3
    # The search is kept by the live refresh, and typing in the box is left alone.
    set_rate(page, "2")
    page.fill("#searchbar", "half-typed")
    mark_the_window(page)
    wait_for_a_refresh(page, 0)
    expect(rows).to_have_count(2)
    assert page.input_value("#searchbar") == "half-typed"
    assert_not_reloaded(page)
