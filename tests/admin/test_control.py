"""The control of running work in the job admin: the Cancel button of a running job (a
request to its handler), the progress bar of running jobs on the list and the job page,
the cancel request and the snoozes on the job page, and the note on a pending job that a
pause holds back."""

import datetime as dt
from html import unescape

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.admin.job_actions import REQUEST_NOTE
from django_cronqueue.models import Job, JobStatus
from tests.admin.conftest import messages_of
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_cronqueue_job_changelist")


def change_url(job):
    return reverse("admin:django_cronqueue_job_change", args=[job.pk])


def cancel_url(job):
    return reverse("admin:django_cronqueue_job_cancel", args=[job.pk])


def progress(done, total=None, message="", at="2026-06-01T12:00:00+00:00"):
    return {"done": done, "total": total, "message": message, "at": at}


def running(**kwargs):
    defaults = {
        "status": JobStatus.RUNNING,
        "attempts": 1,
        "started_at": timezone.now(),
        "locked_until": timezone.now() + dt.timedelta(seconds=30),
        "worker_id": "web-1:42:ab",
    }
    return JobFactory(**{**defaults, **kwargs})


# --- cancel of a running job --------------------------------------------------------


def test_the_cancel_button_of_a_running_job_asks_for_a_confirmation_first(admin_client):
    job = running(name="testapp.record", queue="reports")
    page = admin_client.get(change_url(job))
    assert [button["label"] for button in page.context["cq_buttons"]] == ["Cancel…"]
    for response in (admin_client.post(cancel_url(job)), admin_client.get(cancel_url(job))):
        assert response.status_code == 200
        assert response.templates[0].name == "django_cronqueue/admin/cancel_confirmation.html"
        html = unescape(response.content.decode())
        assert "Are you sure you want to stop this running job?" in html
        assert f"#{job.pk}</a> testapp.record" in html
        assert "queue reports, running on web-1:42:ab" in html
        assert '<input type="hidden" name="post" value="yes">' in html
        assert (
            f'<a href="{change_url(job)}" class="button cancel-link">No, take me back</a>' in html
        )
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at) == (JobStatus.RUNNING, None)
    assert not LogEntry.objects.exists()


def test_a_pending_job_is_cancelled_without_a_confirmation(admin_client):
    job = JobFactory()
    response = admin_client.post(cancel_url(job), follow=True)
    assert messages_of(response) == [f"Cancelled 1 job: #{job.pk}."]
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    # GET only shows a confirmation, and a pending job needs none: back to its page.
    other = JobFactory()
    assert admin_client.get(cancel_url(other)).url == change_url(other)
    assert Job.objects.get(pk=other.pk).status == JobStatus.PENDING


def test_the_cancel_button_of_a_running_job_asks_its_handler_to_stop(admin_client):
    job = running()
    response = admin_client.post(cancel_url(job), {"post": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == change_url(job)
    assert messages_of(response) == [f"Asked 1 running job to stop: #{job.pk}.", REQUEST_NOTE]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # until its handler stops
    assert job.cancel_requested_at is not None
    assert job.cancel_requested_by == "admin (admin)"
    # The page now says so, and offers no second Cancel.
    assert response.context["cq_buttons"] == []
    html = unescape(response.content.decode())
    assert "A cancel was requested: this job ends cancelled once its handler stops" in html
    assert "No action applies" not in html  # the note above says why
    assert "by admin (admin); waiting for its handler to stop" in html


def test_cancelling_a_running_job_twice_says_it_was_asked_already(admin_client):
    job = running()
    admin_client.post(cancel_url(job), {"post": "yes"}, follow=True)
    first = Job.objects.get(pk=job.pk).cancel_requested_at
    response = admin_client.post(cancel_url(job), {"post": "yes"}, follow=True)
    assert messages_of(response) == [
        f"Skipped 1 job (running: a cancel was already requested): #{job.pk}."
    ]
    assert Job.objects.get(pk=job.pk).cancel_requested_at == first


def test_a_cancel_request_is_in_the_history(admin_client):
    pending, job = JobFactory(), running()
    admin_client.post(
        CHANGELIST,
        {"action": "cancel_jobs", "_selected_action": [pending.pk, job.pk], "post": "yes"},
    )
    entries = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert entries == [
        (str(pending.pk), "Cancel (admin action)"),
        (str(job.pk), "Cancel request (admin action)"),
    ]


def test_a_job_that_finished_after_the_request_shows_who_asked(admin_client):
    asked = timezone.now() - dt.timedelta(minutes=2)
    job = JobFactory(
        status=JobStatus.CANCELLED,
        finished_at=timezone.now(),
        cancel_requested_at=asked,
        cancel_requested_by="",
        cancel_reason="customer left",
    )
    html = unescape(admin_client.get(change_url(job)).content.decode())
    assert f'<time datetime="{asked.isoformat()}">' in html
    assert "by code (jobs.cancel()): customer left</div>" in html
    assert "waiting for its handler" not in html
    assert [b["label"] for b in admin_client.get(change_url(job)).context["cq_buttons"]] == [
        "Retry"
    ]


# --- progress -----------------------------------------------------------------------


def bars_of(html):
    return [part.split(">")[0] for part in html.split("<progress")[1:]]


def test_the_list_shows_a_bar_for_running_jobs_that_report_progress(admin_client):
    with_total = running(progress=progress(3, 10, "chunk 3"))
    without_total = running(progress=progress(1200, message="rows"))
    running()  # no progress yet
    JobFactory(status=JobStatus.SUCCEEDED, progress=progress(10, 10, "done"))  # finished
    html = admin_client.get(CHANGELIST).content.decode()
    bars = bars_of(html)
    assert len(bars) == 2
    assert 'max="1000" value="300" aria-label="3/10 (30%): chunk 3"' in bars[1]
    assert "max=" not in bars[0]  # indeterminate: no total
    assert 'aria-label="1,200 done: rows"' in bars[0]
    assert 'title="3/10 (30%): chunk 3"' in html
    assert '<span class="cq-quiet">30%</span>' in html
    assert '<span class="cq-quiet">1,200</span>' in html
    assert html.index(f"/job/{without_total.pk}/") < html.index(f"/job/{with_total.pk}/")


def test_the_list_flags_a_running_job_asked_to_stop(admin_client):
    running(progress=progress(1, 2), cancel_requested_at=timezone.now())
    html = admin_client.get(CHANGELIST).content.decode()
    assert '<span class="cq-badge cq-badge-warning">cancel requested</span>' in html


def test_the_list_keeps_a_constant_number_of_queries_with_progress(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    running(progress=progress(1, 2))
    with CaptureQueriesContext(connection) as few:
        admin_client.get(CHANGELIST)
    for n in range(20):
        running(progress=progress(n, 20))
    with CaptureQueriesContext(connection) as many:
        admin_client.get(CHANGELIST)
    assert len(many) == len(few)


def test_the_job_page_shows_progress_cancel_request_and_snoozes(admin_client):
    at = timezone.now() - dt.timedelta(seconds=20)
    job = running(progress=progress(40, 100, "chunk 40", at=at.isoformat()), snoozes=3)
    response = admin_client.get(change_url(job))
    html = unescape(response.content.decode())
    assert 'value="400"' in html
    assert "40/100 (40%): chunk 40" in html
    assert f'reported <time datetime="{at.isoformat()}">' in html
    assert "Progress and control" in html
    field = html.split('class="form-row field-snoozes"')[1].split('class="form-row')[0]
    assert '<div class="readonly">3</div>' in field
    assert "How many times its handler asked to run later." in html


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, '<div class="readonly">-</div>'),
        ({"done": "lots"}, "not readable (not what set_progress() writes)"),
        ({"done": 5, "total": 10, "message": "", "at": "whenever"}, "reported at an unknown time"),
    ],
)
def test_the_job_page_copes_with_any_progress(admin_client, value, text):
    job = running(progress=value)
    html = admin_client.get(change_url(job)).content.decode()
    progress_row = html.split('field-progress_display"')[1].split("</fieldset>")[0]
    assert text in progress_row


# --- pauses on the job page ---------------------------------------------------------


def test_a_pending_job_that_a_pause_holds_back_says_so(admin_client):
    job = JobFactory(queue="emails", name="testapp.noop")
    other = JobFactory(queue="default", name="testapp.record")
    until = timezone.now() + dt.timedelta(hours=2, minutes=30)
    jobs.pause(queue="emails", until=until, reason="SMTP down")
    jobs.pause(name="testapp.noop")
    html = unescape(admin_client.get(change_url(job)).content.decode())
    assert "The queue emails is paused until " in html
    assert "(in 2\xa0hours) (SMTP down): no worker claims this job while the pause holds." in html
    assert "The job testapp.noop is paused until resumed: no worker claims" in html
    assert "is paused" not in admin_client.get(change_url(other)).content.decode()


def test_an_ended_pause_holds_nothing_back(admin_client):
    job = JobFactory(queue="emails")
    jobs.pause(queue="emails", until=timezone.now() + dt.timedelta(hours=1))
    later = timezone.now() + dt.timedelta(hours=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timezone, "now", lambda: later)
        html = admin_client.get(change_url(job)).content.decode()
    assert "is paused" not in html
