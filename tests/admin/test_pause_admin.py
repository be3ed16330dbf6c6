"""Pauses in the admin: the Pauses list and its forms (every change through jobs.pause(),
deleting is resuming, which wakes the workers), and the dashboard's Pause and Resume
buttons per queue and per job name."""

import datetime as dt
from html import unescape

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobStatus, Pause
from django_cronqueue.operations import pauses
from tests.admin.conftest import messages_of
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

PAUSES = reverse("admin:django_cronqueue_pause_changelist")
ADD = reverse("admin:django_cronqueue_pause_add")
DASHBOARD = reverse("admin:django_cronqueue_job_dashboard")
PAUSE = reverse("admin:django_cronqueue_job_dashboard_pause")
RESUME = reverse("admin:django_cronqueue_job_dashboard_resume")
FUTURE = dt.date.today() + dt.timedelta(days=400)


@pytest.fixture
def wakes(monkeypatch):
    """The wake-ups that resuming sends (a NOTIFY on PostgreSQL)."""
    calls = []
    real = pauses.wake_workers

    def record(using, instants, now):
        calls.append(using)
        real(using, instants, now)

    monkeypatch.setattr(pauses, "wake_workers", record)
    return calls


def change_url(pause):
    return reverse("admin:django_cronqueue_pause_change", args=[pause.pk])


def add_form(**fields):
    data = {"queue": "", "name": "", "until_0": "", "until_1": "", "reason": ""}
    return {**data, **fields}


def form_errors(response):
    form = response.context["adminform"].form
    return [str(error) for errors in form.errors.values() for error in errors]


# --- the list and its forms ---------------------------------------------------------


def test_the_list_shows_every_pause_with_who_when_and_whether_in_force(admin_client):
    until = timezone.now() + dt.timedelta(hours=3)
    jobs.pause(queue="emails", until=until, reason="SMTP provider down", by="ops (admin)")
    jobs.pause(name="testapp.noop", until=timezone.now() + dt.timedelta(seconds=1))
    Pause.objects.filter(name="testapp.noop").update(
        until=timezone.now() - dt.timedelta(minutes=1)
    )  # ended; housekeeping deletes it later
    response = admin_client.get(PAUSES)
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "queue emails" in html
    assert "job testapp.noop" in html
    assert "SMTP provider down" in html
    assert "ops (admin)" in html
    assert "(in 2\xa0hours)" in html or "(in 3\xa0hours)" in html
    assert html.count('alt="True"') == 1 and html.count('alt="False"') == 1
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert actions["delete_selected"] == "Resume selected (end their pauses)"


def test_add_a_pause_of_a_queue(admin_client, settings):
    settings.TIME_ZONE = "America/New_York"
    response = admin_client.post(
        ADD,
        add_form(queue="emails", until_0=FUTURE.isoformat(), until_1="14:00", reason="migration"),
    )
    assert response.status_code == 302, form_errors(response)
    pause = Pause.objects.get()
    assert (pause.queue, pause.name, pause.reason) == ("emails", "", "migration")
    assert pause.created_by == "admin (admin)"
    local = timezone.localtime(pause.until, timezone.get_default_timezone())
    assert (local.date(), local.hour, local.minute) == (FUTURE, 14, 0)
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id) == (ADDITION, str(pause.pk))


def test_add_a_pause_of_a_job_name_until_resumed(admin_client):
    response = admin_client.post(ADD, add_form(name="testapp.noop"))
    assert response.status_code == 302, form_errors(response)
    pause = Pause.objects.get()
    assert (pause.queue, pause.name, pause.until) == ("", "testapp.noop", None)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({}, "Give a queue or a job name."),
        ({"queue": "emails", "name": "testapp.noop"}, "Give a queue or a job name, not both."),
        (
            {"queue": "emails", "until_0": "2001-01-01", "until_1": "00:00"},
            "This instant has passed: the pause would end at once.",
        ),
        ({"queue": "q" * 101}, "Ensure this value has at most 100 characters (it has 101)."),
    ],
)
def test_the_add_form_refuses_what_is_not_one_future_pause(admin_client, fields, error):
    response = admin_client.post(ADD, add_form(**fields))
    assert response.status_code == 200
    assert form_errors(response) == [error]
    assert not Pause.objects.exists()


def test_pausing_what_is_paused_points_to_its_pause(admin_client):
    jobs.pause(queue="emails", reason="first")
    response = admin_client.post(ADD, add_form(queue="emails", reason="second"))
    assert form_errors(response) == ["Queue emails is already paused: change that pause instead."]
    assert Pause.objects.get().reason == "first"


def test_the_add_form_takes_its_queue_from_the_link(admin_client):
    response = admin_client.get(ADD, {"queue": "emails"})
    form = response.context["adminform"].form
    assert form.initial["queue"] == "emails"
    assert form.fields["until"].widget.__class__.__name__ == "AdminSplitDateTime"


def test_change_the_end_and_the_reason_of_a_pause(admin_client):
    pause = jobs.pause(queue="emails", reason="first", by="someone")
    until = timezone.localtime(timezone.now() + dt.timedelta(days=2))
    response = admin_client.post(
        change_url(pause),
        add_form(
            queue="other",  # read-only on a change: ignored
            until_0=until.date().isoformat(),
            until_1=until.strftime("%H:%M:%S"),
            reason="second",
        ),
    )
    assert response.status_code == 302, form_errors(response)
    pause.refresh_from_db()
    assert (pause.queue, pause.reason, pause.created_by) == ("emails", "second", "admin (admin)")
    assert pause.until == until.replace(microsecond=0)
    assert LogEntry.objects.get().action_flag == CHANGE


def test_deleting_a_pause_resumes_and_wakes_the_workers(admin_client, wakes):
    pause = jobs.pause(queue="emails")
    url = reverse("admin:django_cronqueue_pause_delete", args=[pause.pk])
    assert admin_client.get(url).status_code == 200  # the confirmation page
    response = admin_client.post(url, {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert not Pause.objects.exists()
    assert len(wakes) == 1
    assert LogEntry.objects.get().action_flag == DELETION


def test_resume_selected_resumes_each_and_wakes_the_workers(admin_client, wakes):
    rows = [jobs.pause(queue="emails"), jobs.pause(name="testapp.noop")]
    jobs.pause(queue="kept")
    response = admin_client.post(
        PAUSES,
        {
            "action": "delete_selected",
            "_selected_action": [row.pk for row in rows],
            "post": "yes",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert list(Pause.objects.values_list("queue", flat=True)) == ["kept"]
    assert len(wakes) == 2


# --- the dashboard ------------------------------------------------------------------


def test_the_dashboard_lists_queues_and_job_names_with_their_pauses(admin_client):
    JobFactory(queue="emails")
    until = timezone.now() + dt.timedelta(hours=2, minutes=30)
    jobs.pause(queue="emails", until=until, reason="SMTP down", by="ops (admin)")
    jobs.pause(name="gone.job")  # no code defines it: listed all the same
    response = admin_client.get(DASHBOARD)
    queues = {item["target"].value: item for item in response.context["pause_queues"]}
    names = {item["target"].value: item for item in response.context["pause_names"]}
    assert queues["emails"]["paused"] and not queues["default"]["paused"]
    assert queues["emails"]["until"].endswith("(in 2\xa0hours)")
    assert names["gone.job"]["paused"] and not names["gone.job"]["target"].defined
    assert names["testapp.record"]["target"].queue == "default"
    assert not names["testapp.record"]["paused"]
    html = unescape(response.content.decode())
    assert "Pauses (2 in force)" in html
    assert "by ops (admin), 0\xa0s ago: SMTP down" in html or ": SMTP down" in html
    row = html.split('data-queue="emails"')[1].split("</tr>")[0]
    assert f'action="{RESUME}"' in row
    assert '<input type="hidden" name="queue" value="emails">' in row
    assert 'aria-label="Resume queue emails"' in row
    assert 'name="csrfmiddlewaretoken"' in row
    row = html.split('data-name="testapp.record"')[1].split("</tr>")[0]
    assert f'action="{PAUSE}"' in row
    assert '<input type="hidden" name="name" value="testapp.record">' in row
    assert f'href="{ADD}"' in html
    assert f'href="{PAUSES}"' in html


def test_pause_and_resume_a_queue_from_the_dashboard(operator_client, wakes):
    job = JobFactory(queue="emails", payload={"key": "paused"})
    response = operator_client.post(PAUSE, {"queue": "emails"}, follow=True)
    assert response.redirect_chain[-1][0] == DASHBOARD
    assert messages_of(response) == [
        "Paused queue emails until resumed: no worker claims its pending jobs; running ones finish."
    ]
    pause = Pause.objects.get()
    assert (pause.queue, pause.until, pause.created_by) == ("emails", None, "operator (admin)")
    assert jobs.tick().claimed == 0  # held back
    assert 'aria-label="Resume queue emails"' in response.content.decode()

    response = operator_client.post(RESUME, {"queue": "emails"}, follow=True)
    assert messages_of(response) == ["Resumed queue emails."]
    assert not Pause.objects.exists()
    assert len(wakes) == 1
    assert jobs.tick().ran == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    history = list(LogEntry.objects.order_by("pk").values_list("action_flag", "object_repr"))
    assert history == [(ADDITION, "queue emails"), (DELETION, "queue emails")]


def test_pause_a_job_name_from_the_dashboard(operator_client):
    JobFactory(name="testapp.noop", payload={})
    other = JobFactory(name="testapp.record", payload={"key": "other"})
    operator_client.post(PAUSE, {"name": "testapp.noop"})
    assert Pause.objects.get().name == "testapp.noop"
    result = jobs.tick()
    assert (result.claimed, result.ran) == (1, 1)
    assert Job.objects.get(pk=other.pk).status == JobStatus.SUCCEEDED


def test_pausing_again_from_the_dashboard_replaces_an_ended_pause(operator_client):
    jobs.pause(queue="emails", until=timezone.now() + dt.timedelta(seconds=1), reason="old")
    Pause.objects.update(until=timezone.now() - dt.timedelta(minutes=1))
    operator_client.post(PAUSE, {"queue": "emails"})
    pause = Pause.objects.get()
    assert (pause.until, pause.reason) == (None, "")
    assert LogEntry.objects.get().action_flag == CHANGE


def test_resuming_what_is_not_paused_says_so(operator_client, wakes):
    response = operator_client.post(RESUME, {"name": "testapp.noop"}, follow=True)
    assert messages_of(response) == ["Job testapp.noop was not paused."]
    assert wakes == []
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "No queue or job name."),
        ({"queue": "emails", "name": "testapp.noop"}, "Give a queue or a job name, not both."),
        ({"queue": "q" * 101}, "Ensure this value has at most 100 characters (it has 101)."),
    ],
)
@pytest.mark.parametrize("url", [PAUSE, RESUME])
def test_a_malformed_dashboard_post_changes_nothing(operator_client, url, data, error):
    jobs.pause(queue="kept")
    response = operator_client.post(url, data, follow=True)
    assert messages_of(response) == [f"Nothing was paused or resumed: {error}"]
    assert list(Pause.objects.values_list("queue", "name")) == [("kept", "")]


def test_the_dashboard_buttons_need_post(operator_client):
    assert operator_client.get(PAUSE, {"queue": "emails"}).status_code == 405
    assert operator_client.get(RESUME, {"queue": "emails"}).status_code == 405
    assert not Pause.objects.exists()


def test_a_viewer_sees_the_pauses_but_no_button(viewer_client):
    jobs.pause(queue="emails", reason="SMTP down")
    response = viewer_client.get(DASHBOARD)
    html = response.content.decode()
    assert response.context["can_pause"] is False
    assert "SMTP down" in html
    assert f'action="{PAUSE}"' not in html and f'action="{RESUME}"' not in html
    assert f'href="{ADD}"' not in html
    assert f'href="{PAUSES}"' in html  # view_job lets them see the list
