"""The job admin through the Django test client: list, filters, search, counts, detail
page, and Retry / Cancel / Run now from the list and from the detail page."""

import datetime as dt
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.admin.job_actions import REQUEST_NOTE
from django_cronqueue.admin.search import MAX_SEARCH_WORDS
from django_cronqueue.models import Job, JobStatus
from django_cronqueue.schedules import scheduler
from tests.admin.conftest import messages_of
from tests.factories import CronScheduleFactory, JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_cronqueue_job_changelist"


def changelist(**params):
    url = reverse(CHANGELIST)
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def change_url(job):
    return reverse("admin:django_cronqueue_job_change", args=[job.pk])


def button_url(job, key):
    return reverse(f"admin:django_cronqueue_job_{key}", args=[job.pk])


def listed_ids(response):
    return [job.pk for job in response.context["cl"].result_list]


def failed_job(**kwargs):
    defaults = {
        "status": JobStatus.FAILED,
        "attempts": 4,
        "finished_at": timezone.now(),
        "last_error": "RuntimeError: boom",
        "traceback": 'Traceback (most recent call last):\n  File "x.py"\nRuntimeError: boom',
    }
    return JobFactory(**{**defaults, **kwargs})


# --- the list -----------------------------------------------------------------------


def test_list_shows_status_name_queue_attempts_and_short_error(admin_client):
    job = failed_job(queue="emails", last_error="ValueError: " + "x" * 300, attempts=2)
    response = admin_client.get(changelist())
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="cq-status cq-status-failed"' in html
    assert "testapp.record" in html
    assert "emails" in html
    assert "2/4" in html
    assert "ValueError: " + "x" * 77 + "…" in html
    assert listed_ids(response) == [job.pk]


def test_counts_per_status_link_to_their_filter(admin_client):
    JobFactory.create_batch(3)
    failed_job()
    JobFactory(status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    response = admin_client.get(changelist())
    counts = {item["status"]: item["count"] for item in response.context["cq_status_counts"]}
    assert counts == {"pending": 3, "running": 0, "succeeded": 1, "failed": 1, "cancelled": 0}
    assert response.context["cq_total"] == 5
    failed_link = next(i for i in response.context["cq_status_counts"] if i["status"] == "failed")
    assert failed_link["url"] == "?status=failed"
    assert 'href="?status=failed"' in response.content.decode()
    filtered = admin_client.get(changelist() + failed_link["url"])
    assert len(listed_ids(filtered)) == 1


def test_counts_stay_within_the_name_and_queue_filters(admin_client):
    JobFactory(name="testapp.noop", queue="emails")
    JobFactory(name="testapp.noop", queue="default")
    JobFactory(name="testapp.record", queue="emails")
    response = admin_client.get(changelist(name="testapp.noop", queue="emails"))
    assert response.context["cq_total"] == 1
    link = next(i for i in response.context["cq_status_counts"] if i["status"] == "pending")
    assert link["url"] == "?name=testapp.noop&queue=emails&status=pending"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "failed"}, {"failed-old", "failed-new"}),
        ({"status": "pending"}, {"pending"}),
        ({"failed": "24h"}, {"failed-new"}),
        ({"failed": "1h"}, {"failed-new"}),
        ({"name": "testapp.noop"}, {"noop"}),
        ({"queue": "emails"}, {"emails"}),
        ({"status": "failed", "queue": "emails"}, set()),
    ],
)
def test_filters(admin_client, params, expected):
    now = timezone.now()
    by_key = {
        "failed-old": failed_job(finished_at=now - dt.timedelta(days=2)),
        "failed-new": failed_job(finished_at=now - dt.timedelta(minutes=5)),
        "pending": JobFactory(),
        "noop": JobFactory(name="testapp.noop", status=JobStatus.SUCCEEDED),
        "emails": JobFactory(queue="emails", status=JobStatus.CANCELLED),
    }
    response = admin_client.get(changelist(**params))
    assert response.status_code == 200
    assert set(listed_ids(response)) == {by_key[key].pk for key in expected}


def test_name_and_queue_filter_choices_come_from_the_table(admin_client):
    JobFactory(name="testapp.noop", queue="emails")
    JobFactory(name="gone.job", queue="default")
    response = admin_client.get(changelist())
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert specs["name"].lookup_choices == [
        ("gone.job", "gone.job (no code)"),
        ("testapp.noop", "testapp.noop"),
    ]
    assert specs["queue"].lookup_choices == [("default", "default"), ("emails", "emails")]


@pytest.mark.parametrize("field", ["id", "name", "dedupe_key", "error"])
def test_search(admin_client, field):
    target = failed_job(
        name="testapp.noop", dedupe_key="invoice-7731", last_error="KeyError: 'customer_42'"
    )
    JobFactory.create_batch(2, dedupe_key=None)
    term = {
        "id": str(target.pk),
        "name": "noop",
        "dedupe_key": "invoice-7731",
        "error": "customer_42",
    }[field]
    response = admin_client.get(changelist(q=term))
    assert listed_ids(response) == [target.pk]


def test_search_by_a_non_number_does_not_break_the_id_lookup(admin_client):
    JobFactory()
    response = admin_client.get(changelist(q="not-a-number"))
    assert response.status_code == 200
    assert listed_ids(response) == []


@pytest.mark.parametrize("term", ["²", "³1", "Ⅻ", "9" * 19, "9" * 40])
def test_search_by_digits_that_are_no_id_finds_nothing(admin_client, term):
    """``"²".isdigit()`` is true but ``int("²")`` raises; 19 nines overflow a 64-bit id."""
    JobFactory.create_batch(3)
    response = admin_client.get(reverse(CHANGELIST), {"q": term})
    assert response.status_code == 200
    assert listed_ids(response) == []


@pytest.mark.parametrize("zero", ["\u0660", "\u0966", "\uff10", "\U0001d7d8"])
def test_digits_of_other_scripts_are_not_an_id(admin_client, zero):
    """Arabic-Indic, Devanagari, fullwidth or mathematical digits are text, not a job id
    (``int()`` would read them as one)."""
    job = JobFactory()
    term = "".join(chr(ord(zero) + int(digit)) for digit in str(job.pk))
    assert int(term) == job.pk
    response = admin_client.get(reverse(CHANGELIST), {"q": term})
    assert response.status_code == 200
    assert listed_ids(response) == []
    assert listed_ids(admin_client.get(reverse(CHANGELIST), {"q": str(job.pk)})) == [job.pk]


def test_a_word_longer_than_any_column_finds_nothing(admin_client):
    failed_job(last_error="x" * 1000)
    response = admin_client.get(reverse(CHANGELIST), {"q": "x" * 60_000})
    assert response.status_code == 200
    assert listed_ids(response) == []


def test_a_search_of_too_many_words_is_refused_with_a_message(admin_client):
    JobFactory.create_batch(2)
    words = " ".join(f"w{n}" for n in range(MAX_SEARCH_WORDS + 1))
    response = admin_client.get(reverse(CHANGELIST), {"q": words})
    assert response.status_code == 200
    assert listed_ids(response) == []
    assert messages_of(response) == [
        f"A search can have at most {MAX_SEARCH_WORDS} different words; this one has "
        f"{MAX_SEARCH_WORDS + 1}. Search for fewer words."
    ]
    repeated = admin_client.get(reverse(CHANGELIST), {"q": "² " * 5000})  # one word
    assert (repeated.status_code, messages_of(repeated)) == (200, [])


@pytest.mark.parametrize("parameter", ["name", "queue"])
@pytest.mark.parametrize("value", ["a\x00b", "n" * 300])
def test_a_filter_value_no_row_can_hold_lists_nothing(admin_client, parameter, value):
    JobFactory()
    response = admin_client.get(reverse(CHANGELIST), {parameter: value})
    assert response.status_code == 200
    assert listed_ids(response) == []
    assert response.context["cq_total"] == 0


def test_jobs_no_code_defines_are_flagged(admin_client):
    JobFactory(name="shop.removed_long_ago")
    JobFactory(name="testapp.record")
    html = admin_client.get(changelist()).content.decode()
    assert html.count("no code defines this job") == 1


def test_no_add_no_delete(admin_client):
    response = admin_client.get(changelist())
    assert response.context["has_add_permission"] is False
    assert "delete_selected" not in dict(response.context["action_form"].fields["action"].choices)
    assert admin_client.get(reverse("admin:django_cronqueue_job_add")).status_code == 403


def test_the_changelist_links_to_the_dashboard(admin_client):
    html = admin_client.get(changelist()).content.decode()
    assert reverse("admin:django_cronqueue_job_dashboard") in html


# --- the detail page ----------------------------------------------------------------


def test_detail_page_shows_payload_traceback_timestamps_and_lease(admin_client):
    WorkerFactory(id="web-1:4242:ab", hostname="web-1", pid=4242)
    job = JobFactory(
        status=JobStatus.RUNNING,
        payload={"user_id": 42, "tags": ["a", "b"]},
        worker_id="web-1:4242:ab",
        locked_until=timezone.now() + dt.timedelta(seconds=30),
        started_at=timezone.now(),
        last_error="RuntimeError: first try failed",
        traceback="Traceback (most recent call last):\n  line 1\nRuntimeError: first try failed",
    )
    response = admin_client.get(change_url(job))
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert '"tags": [\n    "a",\n    "b"\n  ],\n  "user_id": 42' in html
    assert "Traceback (most recent call last):\n  line 1\nRuntimeError: first try failed" in html
    assert "web-1:4242:ab (host web-1, pid 4242, heartbeat" in html
    for label in (
        "Created:",
        "Run at:",
        "Scheduled for:",
        "Started (last attempt):",
        "Lease expiry:",
    ):
        assert label in html
    started = timezone.localtime(job.started_at).strftime("%a %Y-%m-%d %H:%M:%S %Z")
    assert f'<time datetime="{job.started_at.isoformat()}">{started}</time>' in html
    # Read-only: no form field, no save button.
    assert response.context["adminform"].form.fields == {}
    assert 'name="_save"' not in html


def test_detail_page_links_the_cron_schedule_it_came_from(admin_client, nightly):
    schedule = CronScheduleFactory(name="tests.nightly", tz="America/New_York")
    occurrence = dt.datetime(2026, 6, 2, 6, 30, tzinfo=dt.timezone.utc)
    job = JobFactory(name="tests.nightly", scheduled_for=occurrence, payload={})
    manual = JobFactory(name="tests.nightly", payload={})
    schedule_url = reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk])
    html = admin_client.get(change_url(job)).content.decode()
    assert f'<a href="{schedule_url}">tests.nightly</a>' in html
    assert "Tue 2026-06-02 02:30 EDT" in html
    html = admin_client.get(change_url(manual)).content.decode()
    assert "a manual run of the cron schedule" in html


def test_detail_page_links_the_dynamic_schedule_of_an_occurrence(admin_client):
    schedule = CronScheduleFactory(
        name="reports.tenant-42", source="dynamic", job="testapp.send_report", tz="Europe/Paris"
    )
    occurrence = dt.datetime(2026, 6, 2, 6, 0, tzinfo=dt.timezone.utc)
    job = JobFactory(
        name="testapp.send_report",
        schedule="reports.tenant-42",
        scheduled_for=occurrence,
        payload={"tenant_id": 42},
    )
    enqueued = JobFactory(name="testapp.send_report", payload={"tenant_id": 42})
    schedule_url = reverse("admin:django_cronqueue_cronschedule_change", args=[schedule.pk])
    html = admin_client.get(change_url(job)).content.decode()
    assert f'<a href="{schedule_url}">reports.tenant-42</a>' in html
    assert "Tue 2026-06-02 08:00 CEST" in html
    assert "of the cron schedule" not in admin_client.get(change_url(enqueued)).content.decode()


@pytest.mark.parametrize(
    ("status", "error", "failure_first"),
    [
        (JobStatus.FAILED, "RuntimeError: boom", True),
        (JobStatus.PENDING, "RuntimeError: boom", True),  # waiting for its retry
        (JobStatus.SUCCEEDED, "RuntimeError: boom", False),  # an earlier attempt failed
        (JobStatus.PENDING, "", False),
    ],
)
def test_the_last_failure_comes_before_the_payload_when_it_matters(
    admin_client, status, error, failure_first
):
    job = failed_job(status=status, last_error=error)
    html = admin_client.get(change_url(job)).content.decode()
    titles = [
        title for title, _ in admin_client.get(change_url(job)).context["adminform"].fieldsets
    ]
    assert (titles.index("Last failure") < titles.index("Payload and result")) is failure_first
    assert (html.index("field-full_error") < html.index("field-payload_display")) is failure_first


def test_the_list_shows_attempts_progress_queue_and_occurrence_under_their_column(admin_client):
    occurrence = timezone.now().replace(microsecond=0)
    job = JobFactory(
        name="testapp.record",
        queue="reports",
        attempts=1,
        max_attempts=4,
        status=JobStatus.RUNNING,
        scheduled_for=occurrence,
        progress={"done": 3, "total": 10, "message": "", "at": occurrence.isoformat()},
    )
    response = admin_client.get(changelist())
    headers = [header["text"] for header in response.context["result_headers"]][1:]
    assert headers == ["id", "status, attempts", "name, queue", "run at (occurrence)", "last error"]
    row = response.content.decode().split(f">{job.pk}</a>")[1].split("</tr>")[0]
    assert '<div class="cq-quiet cq-attempts">1/4 attempts</div>' in row
    assert 'value="300"' in row  # the progress bar
    assert 'testapp.<wbr>record<div class="cq-quiet">queue reports</div>' in row
    assert '<div class="cq-quiet">occurrence <time' in row


def test_posting_the_change_form_changes_nothing(admin_client):
    job = failed_job()
    response = admin_client.post(change_url(job), {"status": "pending", "_save": "Save"})
    assert response.status_code == 405
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


@pytest.mark.parametrize(
    ("status", "extra", "buttons"),
    [
        (JobStatus.FAILED, {}, ["Retry"]),
        (JobStatus.CANCELLED, {}, ["Retry"]),
        (JobStatus.PENDING, {}, ["Cancel", "Run now"]),
        (JobStatus.RUNNING, {}, ["Cancel…"]),  # its confirmation page first
        (JobStatus.RUNNING, {"cancel_requested_at": timezone.now()}, []),
        (JobStatus.SUCCEEDED, {}, []),
    ],
)
def test_detail_page_offers_the_buttons_that_apply(admin_client, status, extra, buttons):
    job = JobFactory(status=status, **extra)
    response = admin_client.get(change_url(job))
    assert [button["label"] for button in response.context["cq_buttons"]] == buttons
    html = response.content.decode()
    for button in response.context["cq_buttons"]:
        assert f'<form method="post" action="{button["url"]}"' in html
    if not buttons and "cancel_requested_at" not in extra:
        assert "No action applies to a" in html


# --- actions from the list ----------------------------------------------------------


def post_action(client, action, jobs, **extra):
    data = {"action": action, "_selected_action": [job.pk for job in jobs], "index": 0, **extra}
    return client.post(changelist(), data, follow=True)


def test_retry_from_the_list_reports_changed_and_skipped(admin_client):
    failed = failed_job()
    cancelled = JobFactory(status=JobStatus.CANCELLED, finished_at=timezone.now())
    running = JobFactory(status=JobStatus.RUNNING)
    response = post_action(admin_client, "retry_jobs", [failed, cancelled, running])
    assert messages_of(response) == [
        f"Retried 2 jobs: #{failed.pk}, #{cancelled.pk}.",
        f"Skipped 1 job (running: only failed or cancelled jobs can be retried): #{running.pk}.",
    ]
    for job in (failed, cancelled):
        job.refresh_from_db()
        assert (job.status, job.attempts, job.finished_at) == (JobStatus.PENDING, 0, None)
        assert job.run_at <= timezone.now()
    running.refresh_from_db()
    assert running.status == JobStatus.RUNNING


def test_retry_reports_a_dedupe_key_taken_by_another_job(admin_client):
    old = failed_job(dedupe_key="daily-42")
    JobFactory(dedupe_key="daily-42", active_dedupe_key="daily-42")
    response = post_action(admin_client, "retry_jobs", [old])
    assert messages_of(response) == [
        "Skipped 1 job (another pending or running job of the same name holds its dedupe "
        f"key): #{old.pk}."
    ]
    old.refresh_from_db()
    assert old.status == JobStatus.FAILED


def test_cancel_from_the_list(admin_client):
    pending = JobFactory()
    succeeded = JobFactory(status=JobStatus.SUCCEEDED)
    response = post_action(admin_client, "cancel_jobs", [pending, succeeded])
    assert messages_of(response) == [
        f"Cancelled 1 job: #{pending.pk}.",
        f"Skipped 1 job (succeeded: only pending or running jobs can be cancelled): "
        f"#{succeeded.pk}.",
    ]
    pending.refresh_from_db()
    assert pending.status == JobStatus.CANCELLED
    assert pending.last_error == "cancelled by admin (admin)"


def test_cancel_from_the_list_shows_the_running_jobs_and_waits_for_a_confirmation(admin_client):
    pending = JobFactory()
    running = JobFactory(status=JobStatus.RUNNING, attempts=1, name="testapp.record")
    asked = JobFactory(status=JobStatus.RUNNING, cancel_requested_at=timezone.now())
    before = list(Job.objects.order_by("pk").values_list("status", "cancel_requested_at"))
    response = post_action(admin_client, "cancel_jobs", [pending, running, asked])
    assert response.templates[0].name == "django_cronqueue/admin/cancel_confirmation.html"
    html = response.content.decode()
    assert "Are you sure you want to stop this running job?" in html
    assert f">#{running.pk}</a> testapp.record" in html
    assert f">#{asked.pk}</a>" not in html  # already asked: nothing to confirm
    assert "The 1 pending job selected is cancelled at once." in html
    for pk in (pending.pk, running.pk, asked.pk):
        assert f'<input type="hidden" name="_selected_action" value="{pk}">' in html
    assert '<input type="hidden" name="action" value="cancel_jobs">' in html
    assert list(Job.objects.order_by("pk").values_list("status", "cancel_requested_at")) == before
    assert messages_of(response) == []


def test_cancel_of_pending_jobs_only_from_the_list_needs_no_confirmation(admin_client):
    pending = JobFactory.create_batch(2)
    response = post_action(admin_client, "cancel_jobs", pending)
    assert messages_of(response) == [f"Cancelled 2 jobs: #{pending[0].pk}, #{pending[1].pk}."]


def test_cancel_from_the_list_asks_running_jobs_to_stop(admin_client):
    pending = JobFactory()
    running = JobFactory(status=JobStatus.RUNNING, attempts=1)
    asked = JobFactory(status=JobStatus.RUNNING, cancel_requested_at=timezone.now())
    response = post_action(admin_client, "cancel_jobs", [pending, running, asked], post="yes")
    assert messages_of(response) == [
        f"Cancelled 1 job: #{pending.pk}.",
        f"Asked 1 running job to stop: #{running.pk}.",
        f"Skipped 1 job (running: a cancel was already requested): #{asked.pk}.",
        REQUEST_NOTE,
    ]
    running.refresh_from_db()
    assert running.status == JobStatus.RUNNING
    assert running.cancel_requested_at is not None
    assert (running.cancel_requested_by, running.cancel_reason) == ("admin (admin)", "")


def test_run_now_from_the_list(admin_client):
    later = JobFactory(run_at=timezone.now() + dt.timedelta(days=1))
    failed = failed_job()
    response = post_action(admin_client, "run_jobs_now", [later, failed])
    assert messages_of(response) == [
        f"Made 1 job due now: #{later.pk}.",
        f"Skipped 1 job (failed: only pending jobs can be run now): #{failed.pk}.",
    ]
    later.refresh_from_db()
    assert later.run_at <= timezone.now()


def test_action_on_all_rows_across_pages(admin_client):
    """Select all: a confirmation page counts the matching jobs, then its Yes acts."""
    jobs_ = [failed_job() for _ in range(3)]
    data = {"action": "retry_jobs", "select_across": 1, "index": 0, "_selected_action": [1]}
    page = admin_client.post(changelist(status="failed"), data)
    assert page.templates[0].name == "django_cronqueue/admin/all_matching_confirmation.html"
    assert page.context["total"] == 3
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3
    response = admin_client.post(changelist(status="failed"), {**data, "post": "yes"}, follow=True)
    assert messages_of(response)[0].startswith("Retried 3 jobs")
    assert {job.status for job in Job.objects.filter(pk__in=[j.pk for j in jobs_])} == {
        JobStatus.PENDING
    }


def test_long_id_lists_are_shortened_in_messages(admin_client):
    rows = [failed_job() for _ in range(12)]
    response = post_action(admin_client, "retry_jobs", rows)
    assert messages_of(response)[0].endswith(" and 2 more.")


# --- buttons on the detail page -----------------------------------------------------


def test_retry_button_then_the_job_runs(admin_client):
    job = failed_job(payload={"key": "after-retry"})
    response = admin_client.post(button_url(job, "retry"), follow=True)
    assert response.redirect_chain[-1][0] == change_url(job)
    assert messages_of(response) == [f"Retried 1 job: #{job.pk}."]
    assert jobs.tick().ran == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED


def test_cancel_button(admin_client):
    job = JobFactory()
    response = admin_client.post(button_url(job, "cancel"), follow=True)
    assert messages_of(response) == [f"Cancelled 1 job: #{job.pk}."]
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_run_now_button(admin_client):
    job = JobFactory(run_at=timezone.now() + dt.timedelta(hours=3))
    response = admin_client.post(button_url(job, "runnow"), follow=True)
    assert messages_of(response) == [f"Made 1 job due now: #{job.pk}."]
    job.refresh_from_db()
    assert job.run_at <= timezone.now()


def test_a_button_that_no_longer_applies_says_why(admin_client):
    job = JobFactory(status=JobStatus.SUCCEEDED)
    response = admin_client.post(button_url(job, "retry"), follow=True)
    assert messages_of(response) == [
        f"Skipped 1 job (succeeded: only failed or cancelled jobs can be retried): #{job.pk}."
    ]


def test_buttons_need_post(admin_client):
    job = failed_job()
    assert admin_client.get(button_url(job, "retry")).status_code == 405
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


def test_button_on_a_missing_job_redirects_with_a_message(admin_client):
    response = admin_client.post(
        reverse("admin:django_cronqueue_job_retry", args=[999999]), follow=True
    )
    assert response.status_code == 200
    assert "doesn\u2019t exist" in " ".join(messages_of(response))


def test_retried_cron_occurrence_keeps_its_scheduled_for(admin_client, nightly):
    scheduler.sync_schedules(timezone.now())
    occurrence = dt.datetime(2026, 6, 2, 6, 30, tzinfo=dt.timezone.utc)
    job = failed_job(name="tests.nightly", payload={}, scheduled_for=occurrence)
    admin_client.post(button_url(job, "retry"))
    job.refresh_from_db()
    assert (job.status, job.scheduled_for) == (JobStatus.PENDING, occurrence)


def test_actions_are_recorded_in_the_history(admin_client):
    from django.contrib.admin.models import LogEntry

    failed = failed_job()
    pending = JobFactory()
    post_action(admin_client, "retry_jobs", [failed, pending])
    admin_client.post(button_url(pending, "cancel"))
    entries = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert entries == [
        (str(failed.pk), "Retry (admin action)"),
        (str(pending.pk), "Cancel (admin action)"),
    ]
    history = admin_client.get(reverse("admin:django_cronqueue_job_history", args=[failed.pk]))
    assert history.status_code == 200
    assert "Retry (admin action)" in history.content.decode()


def test_a_job_that_changed_since_it_was_read_is_reported_as_such(admin_client, monkeypatch):
    from django_cronqueue.operations import bulk

    finished, claimed, other = JobFactory.create_batch(3)
    read = bulk._batches

    def read_then_change(jobs, size):  # workers run one job and claim another meanwhile
        for batch in read(jobs, size):
            Job.objects.filter(pk=finished.pk).update(status=JobStatus.SUCCEEDED)
            Job.objects.filter(pk=claimed.pk).update(status=JobStatus.RUNNING)
            yield batch

    monkeypatch.setattr(bulk, "_batches", read_then_change)
    response = post_action(admin_client, "cancel_jobs", [finished, claimed, other])
    assert messages_of(response) == [
        "Cancelled 1 job.",
        "Asked 1 running job to stop.",
        "Skipped 1 job (changed meanwhile).",
        REQUEST_NOTE,
    ]
    assert Job.objects.get(pk=finished.pk).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=claimed.pk).cancel_requested_at is not None


def test_an_action_on_many_jobs_writes_a_history_entry_per_changed_job(admin_client):
    """As Django's delete does: each changed job's own History lists the action, with the
    user; the job it skipped gets none."""
    from django.contrib.admin.models import CHANGE, LogEntry

    failed = [failed_job() for _ in range(12)]
    running = JobFactory(status=JobStatus.RUNNING)
    post_action(admin_client, "retry_jobs", [*failed, running])
    entries = LogEntry.objects.order_by("object_id")
    assert sorted(int(entry.object_id) for entry in entries) == [job.pk for job in failed]
    for entry, job in zip(sorted(entries, key=lambda e: int(e.object_id)), failed, strict=True):
        assert entry.change_message == "Retry (admin action)"
        assert entry.action_flag == CHANGE
        assert entry.object_repr == f"{job.name} #{job.pk} (pending)"
        assert entry.content_type.model_class() is Job
        assert entry.user.username == "admin"
    history = admin_client.get(reverse("admin:django_cronqueue_job_history", args=[failed[-1].pk]))
    assert "Retry (admin action)" in history.content.decode()
    running_history = reverse("admin:django_cronqueue_job_history", args=[running.pk])
    assert "Retry (admin action)" not in admin_client.get(running_history).content.decode()


def test_the_app_index_links_to_the_dashboard(admin_client):
    response = admin_client.get("/admin/django_cronqueue/")
    assert response.status_code == 200
    assert b"/admin/django_cronqueue/job/dashboard/" in response.content
