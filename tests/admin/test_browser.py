"""End to end in headless Chromium (Debian's ``chromium`` driven by Playwright's Python
package): log in, filter the failed jobs, open one, retry it, run a worker tick, reload
and see it succeeded; pause a queue from the dashboard, see a tick leave its jobs alone,
resume it; cancel a running job from its page, through its confirmation page; the lists'
key columns in view at 1280 and 1400 pixels with Django's navigation sidebar open. Saves
the screenshots shown in the README and docs/admin.md, as a newcomer sees the pages
(1400 x 900, the sidebar open).

Needs ``pip install playwright`` (the ``dev`` extra) and ``apt-get install chromium``;
Playwright's own browser download (``playwright install``) is not used.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.definitions.registry import registry
from django_cronqueue.models import CronSchedule, Job, JobStatus
from django_cronqueue.schedules import scheduler
from tests.factories import JobFactory, WorkerFactory

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

CHROMIUM = os.environ.get("CRONQUEUE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SCRATCH = Path(tempfile.gettempdir()) / "cronqueue-screenshots"

pytestmark = [
    pytest.mark.skipif(
        sync_playwright is None,
        reason="Playwright's Python package is not installed (pip install -e '.[dev]')",
    ),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"Chromium not found at {CHROMIUM} (apt-get install chromium)",
    ),
    pytest.mark.django_db(transaction=True),
]

EXPORT_CALLS: list[str] = []
DECLINED = "CardDeclined: card ending 4242 was declined (insufficient funds)"


@pytest.fixture(scope="session")
def admin_static(tmp_path_factory):
    """Serve the admin's CSS and ours from the live server: the test settings have no
    staticfiles app, so point STATIC_URL/STATIC_ROOT at a folder of links to them."""
    import django.contrib.admin

    root = tmp_path_factory.mktemp("static")
    (root / "admin").symlink_to(Path(django.contrib.admin.__file__).parent / "static" / "admin")
    package = Path(__file__).resolve().parents[2] / "django_cronqueue"
    (root / "django_cronqueue").symlink_to(package / "static" / "django_cronqueue")
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(root)):
        yield root


@pytest.fixture
def server(admin_static, live_server):
    url = f"{live_server.url}/static/django_cronqueue/admin.css"
    with urllib.request.urlopen(url) as response:
        assert response.status == 200, "the live server does not serve the admin's CSS"
    return live_server


@pytest.fixture
def demo_jobs():
    """Job and schedule definitions with realistic names, removed afterwards."""
    EXPORT_CALLS.clear()

    def export_invoices(day: str) -> None:
        EXPORT_CALLS.append(day)
        if len(EXPORT_CALLS) <= 2:
            raise TimeoutError(
                f"warehouse API did not answer within 30 s (GET /v2/invoices?day={day})"
            )

    def nothing(**kwargs: object) -> None:
        return None

    def nightly(run: jobs.CronRun) -> None:
        return None

    names = []
    names.append(
        jobs.job(name="reports.export_invoices", retries=1, backoff=lambda a: 0, queue="reports")(
            export_invoices
        ).name
    )
    for name, queue in [
        ("emails.send_welcome", "emails"),
        ("emails.digest", "emails"),
        ("billing.charge_card", "default"),
        ("search.reindex_product", "default"),
    ]:
        names.append(jobs.job(name=name, queue=queue)(nothing).name)
    for name, expression, tz in [
        ("reports.nightly_digest", "30 2 * * *", "America/New_York"),
        ("billing.reconcile", "0 * * * *", "UTC"),
        ("emails.weekly_newsletter", "0 9 * * 1", "Europe/Paris"),
        ("search.rebuild_index", "15 4 * * 0", "Asia/Tokyo"),
    ]:
        names.append(jobs.cron(expression, name=name, tz=tz)(nightly).name)
    yield
    for name in names:
        registry.unregister(name)


def fill_history(now: dt.datetime) -> None:
    """A day of history so that the list, the counts and the dashboard look lived in."""
    names = [
        "emails.send_welcome",
        "emails.digest",
        "billing.charge_card",
        "search.reindex_product",
    ]
    rows = []
    for hour in range(24):
        for i, name in enumerate(names):
            for k in range((hour * 7 + i * 3) % 6 + (2 if name == "emails.send_welcome" else 0)):
                finished = now - dt.timedelta(hours=hour, minutes=5 + 7 * k + i)
                failed = name == "billing.charge_card" and (hour + k) % 9 == 0
                rows.append(
                    JobFactory.build(
                        name=name,
                        queue="emails" if name.startswith("emails") else "default",
                        status=JobStatus.FAILED if failed else JobStatus.SUCCEEDED,
                        attempts=4 if failed else 1,
                        payload={"user_id": 1000 + hour * 10 + k},
                        created_at=finished - dt.timedelta(seconds=3),
                        run_at=finished - dt.timedelta(seconds=3),
                        started_at=finished - dt.timedelta(seconds=2),
                        finished_at=finished,
                        last_error=DECLINED if failed else "",
                    )
                )
    Job.objects.bulk_create(rows)
    for i in range(6):
        JobFactory(
            name="emails.digest",
            queue="emails",
            payload={"user_id": 2000 + i, "day": "2026-06-01"},
            run_at=now + dt.timedelta(minutes=20 + i * 15),
        )
    for i in range(3):
        JobFactory(
            name="search.reindex_product",
            payload={"product_id": 77 + i},
            status=JobStatus.RUNNING,
            attempts=1,
            started_at=now - dt.timedelta(seconds=4),
            # A lease no tick of the test can see expire, however slow the machine.
            locked_until=now + dt.timedelta(hours=1),
            worker_id="web-2:3108:9f2c" if i else "web-1:2231:7a1e",
        )
    JobFactory(
        name="shop.legacy_sync",
        payload={"batch": 17},
        run_at=now - dt.timedelta(minutes=95),
    )
    JobFactory(
        name="emails.send_welcome",
        queue="emails",
        payload={"user_id": 31},
        status=JobStatus.CANCELLED,
        finished_at=now - dt.timedelta(minutes=12),
        last_error="cancelled in the admin by ops",
    )
    WorkerFactory(
        id="web-1:2231:7a1e",
        hostname="web-1",
        pid=2231,
        concurrency=4,
        queues=[],
        started_at=now - dt.timedelta(hours=5),
        last_seen=now - dt.timedelta(seconds=3),
    )
    WorkerFactory(
        id="web-2:3108:9f2c",
        hostname="web-2",
        pid=3108,
        concurrency=2,
        queues=["default"],
        started_at=now - dt.timedelta(hours=2),
        last_seen=now - dt.timedelta(seconds=8),
    )


def make_failed_export(now: dt.datetime) -> Job:
    """A real failure: enqueued, run twice by the worker, failed with its traceback."""
    job = jobs.enqueue("reports.export_invoices", {"day": "2026-06-01"})
    for _ in range(2):
        jobs.tick(queues=["reports"])
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED, job.last_error
    return job


def arrange_schedules(now: dt.datetime) -> None:
    scheduler.sync_schedules(now)
    CronSchedule.objects.filter(name="emails.weekly_newsletter").update(paused=True)
    nightly = CronSchedule.objects.get(name="reports.nightly_digest")
    last = registry.cron_definitions()["reports.nightly_digest"].cron.occurrences(
        now - dt.timedelta(days=1), now
    )[-1]
    JobFactory(
        name=nightly.name,
        queue="default",
        payload={},
        scheduled_for=last,
        run_at=last,
        status=JobStatus.SUCCEEDED,
        attempts=1,
        finished_at=last + dt.timedelta(seconds=41),
    )
    CronSchedule.objects.filter(pk=nightly.pk).update(last_occurrence=last)


def shoot(page, name: str, *, full_page: bool = False) -> None:
    """Screenshots go to docs/screenshots with CRONQUEUE_UPDATE_SCREENSHOTS=1 (that is how
    the ones in the docs are made), else to a scratch folder so runs leave no changes."""
    folder = SCREENSHOTS if os.environ.get("CRONQUEUE_UPDATE_SCREENSHOTS") == "1" else SCRATCH
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=full_page)


def launch(playwright):
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    )


#: The size the README's screenshots are taken at: a common laptop screen.
VIEWPORT = {"width": 1400, "height": 900}


def expect_sidebar_open(page) -> None:
    """Django's navigation sidebar is open (its script, loaded with the page, opens it on a
    first visit); the wait allows for a busy machine serving the script late."""
    expect(page.locator("#main.shifted #nav-sidebar")).to_be_visible(timeout=30_000)


def row_heights(page, table: str) -> list[float]:
    return page.eval_on_selector_all(
        f"{table} tbody tr", "rows => rows.map(row => row.getBoundingClientRect().height)"
    )


def log_in(page, server, next_url: str) -> None:
    page.goto(f"{server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse battery")
    page.click("input[type=submit]")


def test_retry_a_failed_job_in_a_real_browser(server, demo_jobs, monkeypatch):
    # Playwright's sync API runs an event loop in this thread, so Django would refuse
    # the ORM calls made between browser steps (jobs.tick()); they are plain
    # synchronous calls, made while the browser waits.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
    now = timezone.now()
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    fill_history(now)
    arrange_schedules(now)
    failed = make_failed_export(now)

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            log_in(page, server, "/admin/django_cronqueue/job/")
            expect(page.locator("#result_list")).to_be_visible()
            expect_sidebar_open(page)  # as a newcomer sees it
            expect(page.locator(".cq-count-failed .cq-count-n")).not_to_have_text("0")
            shoot(page, "job-list.png")

            # Filter the failed jobs with the count above the list.
            page.click("a.cq-count-failed")
            expect(page).to_have_url(f"{server.url}/admin/django_cronqueue/job/?status=failed")
            rows = page.locator("#result_list tbody tr")
            expect(rows.first.locator(".cq-status-failed")).to_be_visible()
            expect(page.locator("#result_list tbody .cq-status-succeeded")).to_have_count(0)

            # Open the failed export and read why it failed.
            page.click(f"#result_list a[href*='/job/{failed.pk}/change/']")
            expect(page.locator(".field-status_display .cq-status-failed")).to_be_visible()
            expect(page.locator(".cq-traceback")).to_contain_text("TimeoutError: warehouse API")
            expect(page.locator(".field-payload_display pre")).to_contain_text(
                '"day": "2026-06-01"'
            )
            # What went wrong comes first: above the payload, on the first screen.
            error = page.locator(".field-full_error").bounding_box()
            assert error["y"] < page.locator(".field-payload_display").bounding_box()["y"]
            assert page.locator(".cq-traceback").bounding_box()["y"] < VIEWPORT["height"]
            shoot(page, "failed-job.png", full_page=True)

            # Retry it, let a worker tick run it, reload: it succeeded.
            page.get_by_role("button", name="Retry").click()
            expect(page.locator(".messagelist .success")).to_have_text(
                f"Retried 1 job: #{failed.pk}."
            )
            expect(page.locator(".field-status_display .cq-status-pending")).to_be_visible()
            result = jobs.tick(queues=["reports"])
            assert (result.claimed, result.ran) == (1, 1)
            # Code inside the Playwright block runs in its own greenlet, which Django
            # gives its own connection: close it, or it would outlive the test database.
            connections.close_all()
            page.reload()
            expect(page.locator(".field-status_display .cq-status-succeeded")).to_be_visible()
            assert EXPORT_CALLS == ["2026-06-01"] * 3

            page.goto(f"{server.url}/admin/django_cronqueue/cronschedule/")
            expect(page.locator("#result_list")).to_contain_text("At 02:30")
            shoot(page, "schedules.png")

            page.goto(f"{server.url}/admin/django_cronqueue/job/dashboard/")
            expect(page.locator("svg.cq-chart").first).to_be_visible()
            shoot(page, "dashboard.png", full_page=True)
            # The job names beside the queues (open by itself on a site with 20 or fewer):
            # each queue row keeps its own height instead of stretching to the names' table.
            page.click("#cq-pauses summary")
            expect(page.locator("#cq-pause-names")).to_be_visible()
            queues, names = (
                row_heights(page, "#cq-pause-queues"),
                row_heights(page, "#cq-pause-names"),
            )
            assert queues and names and max(queues) <= max(names), (queues, names)
        finally:
            browser.close()
    failed.refresh_from_db()
    assert failed.status == JobStatus.SUCCEEDED


def test_pause_a_queue_and_cancel_a_running_job_in_a_real_browser(server, demo_jobs, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # see the test above
    now = timezone.now()
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    fill_history(now)
    welcome = JobFactory(name="emails.send_welcome", queue="emails", payload={"user_id": 7})
    export = JobFactory(
        name="reports.export_invoices",
        queue="reports",
        payload={"day": "2026-06-02"},
        status=JobStatus.RUNNING,
        attempts=1,
        started_at=now - dt.timedelta(minutes=3),
        locked_until=now + dt.timedelta(hours=1),  # see fill_history
        worker_id="web-1:2231:7a1e",
        progress={"done": 3, "total": 10, "message": "day 3 of 10", "at": now.isoformat()},
    )

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            log_in(page, server, "/admin/django_cronqueue/job/dashboard/")
            pauses = page.locator("#cq-pauses")
            expect(pauses).to_be_visible()

            # Pause the emails queue: a tick leaves its due job alone.
            page.get_by_role("button", name="Pause queue emails").click()
            expect(page.locator(".messagelist .success")).to_contain_text(
                "Paused queue emails until resumed"
            )
            emails = page.locator('#cq-pause-queues tr[data-queue="emails"]')
            expect(emails.locator(".cq-badge")).to_have_text("paused")
            expect(emails).to_contain_text("until resumed")
            expect(emails).to_contain_text("by ops (admin)")
            shoot(page, "dashboard-pauses.png", full_page=True)
            assert jobs.tick(queues=["emails"]).claimed == 0
            connections.close_all()

            # Resume it: the next tick runs the job.
            emails.get_by_role("button", name="Resume queue emails").click()
            expect(page.locator(".messagelist .success")).to_have_text("Resumed queue emails.")
            expect(
                page.locator('#cq-pause-queues tr[data-queue="emails"] .cq-badge')
            ).to_have_count(0)
            result = jobs.tick(queues=["emails"])
            assert (result.claimed, result.ran) == (1, 1)
            connections.close_all()

            # The running export shows its progress on the list and on its page.
            page.goto(f"{server.url}/admin/django_cronqueue/job/?status=running")
            row = page.locator("#result_list tbody tr").filter(has_text="reports.export_invoices")
            expect(row.locator("progress")).to_have_attribute("value", "300")
            expect(row.locator(".cq-progress")).to_contain_text("30%")
            shoot(page, "running-jobs.png")
            row.locator(f"a[href*='/job/{export.pk}/change/']").click()
            expect(page.locator(".field-progress_display")).to_contain_text(
                "3/10 (30%): day 3 of 10"
            )

            # Cancel it: a confirmation page names it first; "No" leaves it running.
            page.get_by_role("button", name="Cancel…").click()
            expect(page.locator("#content-main")).to_contain_text(
                "Are you sure you want to stop this running job?"
            )
            expect(page.locator(".cq-cancel-list")).to_contain_text(
                f"#{export.pk} reports.export_invoices"
            )
            shoot(page, "cancel-confirmation.png")
            page.get_by_role("link", name="No, take me back").click()
            expect(page.locator(".field-cancel_request .readonly")).to_have_text("-")
            page.get_by_role("button", name="Cancel…").click()
            page.get_by_role("button", name="Yes, ask it to stop").click()
            # Its handler is asked to stop; the page says so.
            expect(page.locator(".messagelist .success")).to_have_text(
                f"Asked 1 running job to stop: #{export.pk}."
            )
            expect(page.locator(".field-cancel_request")).to_contain_text("by ops (admin)")
            expect(page.get_by_role("button", name="Cancel…")).to_have_count(0)
            shoot(page, "cancel-requested.png", full_page=True)
        finally:
            browser.close()
    export.refresh_from_db()
    assert export.status == JobStatus.RUNNING
    assert export.cancel_requested_by == "ops (admin)"
    welcome.refresh_from_db()
    assert welcome.status == JobStatus.SUCCEEDED


def test_add_a_dynamic_schedule_in_a_real_browser(server, demo_jobs, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # see the first test
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    scheduler.sync_schedules(timezone.now())

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            log_in(page, server, "/admin/django_cronqueue/cronschedule/")
            page.get_by_role("link", name="Add cron schedule").click()
            page.fill("#id_name", "digest.tenant-42")
            page.select_option("#id_job", "emails.digest")
            page.fill("#id_payload", '{"tenant_id": 42}')
            preview = page.locator("#cq-preview")

            # The preview follows the typing: the words, then a near miss of a zone.
            page.fill("#id_expression", "30 7 * * 1-5")
            page.fill("#id_tz", "Paris")
            expect(preview).to_contain_text("did you mean 'Europe/Paris'?")
            page.fill("#id_tz", "Europe/Paris")
            expect(preview).to_contain_text("At 07:30, Monday through Friday")
            expect(preview.locator("li")).to_have_count(5)
            expect(preview.locator("li").first).to_contain_text(" 07:30 CE")
            shoot(page, "dynamic-schedule-add.png", full_page=True)

            # Save: the list shows it beside the code schedules.
            page.get_by_role("button", name="Save", exact=True).click()
            expect(page.locator(".messagelist .success")).to_contain_text("digest.tenant-42")
            row = page.locator("#result_list tbody tr").filter(has_text="digest.tenant-42")
            expect(row).to_contain_text("Dynamic (created at run time)")
            expect(row).to_contain_text("Europe/Paris")
            expect(page.locator("#result_list")).to_contain_text("reports.nightly_digest")
        finally:
            browser.close()
    created = CronSchedule.objects.get(name="digest.tenant-42")
    assert (created.source, created.job, created.payload) == (
        "dynamic",
        "emails.digest",
        {"tenant_id": 42},
    )
    assert (created.expression, created.tz) == ("30 7 * * 1-5", "Europe/Paris")


LIST_KEY_COLUMNS = {
    "/admin/django_cronqueue/job/": ["status_column", "name_column", "error_display"],
    "/admin/django_cronqueue/cronschedule/": ["last_occurrence_display", "next_runs_display"],
}


@pytest.mark.parametrize("width", [1280, 1400])
def test_the_lists_key_columns_are_in_view_beside_the_navigation_sidebar(
    server, demo_jobs, monkeypatch, width
):
    """Status, name and last error (the schedules' next runs and last occurrence) on a
    common laptop screen with Django's navigation sidebar open, and no horizontal
    scrollbar under the list."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")  # see the first test
    now = timezone.now()
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    fill_history(now)
    arrange_schedules(now)
    make_failed_export(now)
    JobFactory(
        id=98_765_432,  # ids of a site with a long history
        name="emails.send_welcome",
        status=JobStatus.FAILED,
        attempts=4,
        last_error="SMTPRecipientsRefused: " + "x" * 80,  # one long word
        finished_at=now,
    )

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            log_in(page, server, "/admin/django_cronqueue/job/")
            for url, columns in LIST_KEY_COLUMNS.items():
                page.goto(f"{server.url}{url}")
                expect_sidebar_open(page)
                results = page.locator("#changelist .results")
                scroll, client = results.evaluate("r => [r.scrollWidth, r.clientWidth]")
                assert scroll <= client, f"{url} at {width}px scrolls sideways: {scroll} > {client}"
                assert page.evaluate("document.documentElement.scrollWidth") <= width
                box = results.bounding_box()
                for column in columns:
                    header = page.locator(f"#result_list thead th.column-{column}").bounding_box()
                    assert header is not None, column
                    assert box["x"] <= header["x"], column
                    assert header["x"] + header["width"] <= box["x"] + box["width"] + 0.5, column
        finally:
            browser.close()
