"""Safety: every state change needs the change permission and a CSRF-protected POST.
A view-only staff user sees no action and a forged POST changes nothing."""

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import CronSchedule, Job, JobStatus, Pause
from django_cronqueue.schedules import scheduler
from tests.admin.conftest import staff_client
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cronqueue_job_changelist")
SCHEDULES = reverse("admin:django_cronqueue_cronschedule_changelist")
DASHBOARD = reverse("admin:django_cronqueue_job_dashboard")
PAUSES = reverse("admin:django_cronqueue_pause_changelist")
ADD_PAUSE = reverse("admin:django_cronqueue_pause_add")
DASHBOARD_PAUSE = reverse("admin:django_cronqueue_job_dashboard_pause")
DASHBOARD_RESUME = reverse("admin:django_cronqueue_job_dashboard_resume")


@pytest.fixture
def rows(nightly):
    scheduler.sync_schedules(timezone.now())
    return {
        "failed": JobFactory(status=JobStatus.FAILED, finished_at=timezone.now()),
        "pending": JobFactory(),
        "running": JobFactory(status=JobStatus.RUNNING, attempts=1),
        "schedule": CronSchedule.objects.get(name="tests.nightly"),
        "pause": jobs.pause(queue="paused-queue", reason="before"),
    }


def snapshot():
    job_rows = list(
        Job.objects.order_by("pk").values_list(
            "pk", "status", "run_at", "attempts", "cancel_requested_at"
        )
    )
    schedules = list(CronSchedule.objects.order_by("pk").values_list("pk", "paused"))
    pauses = list(Pause.objects.order_by("pk").values_list("pk", "queue", "name", "reason"))
    return job_rows, schedules, pauses


def job_button(job, key):
    return reverse(f"admin:django_cronqueue_job_{key}", args=[job.pk])


def schedule_button(row, key):
    return reverse(f"admin:django_cronqueue_cronschedule_{key}", args=[row.pk])


def test_viewer_sees_lists_and_details_without_any_action(viewer_client, rows):
    response = viewer_client.get(JOBS)
    assert response.status_code == 200
    assert response.context["action_form"] is None
    assert 'name="_selected_action"' not in response.content.decode()
    for job in (rows["failed"], rows["pending"]):
        response = viewer_client.get(reverse("admin:django_cronqueue_job_change", args=[job.pk]))
        assert response.status_code == 200
        assert response.context["cq_buttons"] == []
        html = response.content.decode()
        assert 'class="cq-button' not in html
        assert "No action applies" not in html
    response = viewer_client.get(SCHEDULES)
    assert response.status_code == 200
    assert response.context["action_form"] is None
    row = rows["schedule"]
    response = viewer_client.get(
        reverse("admin:django_cronqueue_cronschedule_change", args=[row.pk])
    )
    assert "cq_buttons" not in response.context
    assert schedule_button(row, "backfill") not in response.content.decode()
    assert viewer_client.get(DASHBOARD).status_code == 200


@pytest.mark.parametrize(
    ("changelist", "action", "row"),
    [
        (JOBS, "retry_jobs", "failed"),
        (JOBS, "cancel_jobs", "pending"),
        (JOBS, "cancel_jobs", "running"),
        (JOBS, "run_jobs_now", "pending"),
        (PAUSES, "delete_selected", "pause"),
        (SCHEDULES, "pause_schedules", "schedule"),
        (SCHEDULES, "run_schedules_now", "schedule"),
        (SCHEDULES, "backfill_schedules", "schedule"),
    ],
)
def test_forged_list_actions_from_a_viewer_change_nothing(
    viewer_client, rows, changelist, action, row
):
    before = snapshot()
    response = viewer_client.post(
        changelist,
        {
            "action": action,
            "_selected_action": [rows[row].pk],
            "index": 0,
            "start": "2026-01-01",
            "end": "2026-01-31",
            "apply": "Backfill",
            "post": "yes",
        },
    )
    assert response.status_code in (200, 302, 403)
    assert snapshot() == before


@pytest.mark.parametrize(
    ("kind", "row", "key"),
    [
        ("job", "failed", "retry"),
        ("job", "pending", "cancel"),
        ("job", "running", "cancel"),
        ("job", "pending", "runnow"),
        ("schedule", "schedule", "pause"),
        ("schedule", "schedule", "runnow"),
        ("schedule", "schedule", "backfill"),
    ],
)
def test_forged_button_posts_from_a_viewer_are_refused(viewer_client, rows, kind, row, key):
    before = snapshot()
    url = (job_button if kind == "job" else schedule_button)(rows[row], key)
    response = viewer_client.post(url, {"start": "2026-01-01", "end": "2026-01-31"})
    assert response.status_code == 403
    assert snapshot() == before


def test_change_job_does_not_grant_change_cronschedule(db, rows):
    client = staff_client("jobs-only", ["view_job", "change_job", "view_cronschedule"])
    response = client.post(schedule_button(rows["schedule"], "pause"))
    assert response.status_code == 403
    assert client.post(job_button(rows["failed"], "retry")).status_code == 302
    assert Job.objects.get(pk=rows["failed"].pk).status == JobStatus.PENDING
    assert not CronSchedule.objects.get(pk=rows["schedule"].pk).paused


def test_operator_with_change_permission_can_act(operator_client, rows):
    operator_client.post(job_button(rows["failed"], "retry"))
    operator_client.post(schedule_button(rows["schedule"], "pause"))
    assert Job.objects.get(pk=rows["failed"].pk).status == JobStatus.PENDING
    assert CronSchedule.objects.get(pk=rows["schedule"].pk).paused


def test_staff_without_permissions_and_anonymous_users_see_nothing(db, rows):
    nobody = staff_client("nobody", [])
    assert nobody.get(JOBS).status_code == 403
    assert nobody.get(DASHBOARD).status_code == 403
    assert nobody.post(job_button(rows["failed"], "retry")).status_code == 403
    anonymous = Client()
    for url in (JOBS, DASHBOARD):
        response = anonymous.get(url)
        assert response.status_code == 302
        assert "/login/" in response["Location"]
    response = anonymous.post(job_button(rows["failed"], "retry"))
    assert response.status_code == 302
    assert "/login/" in response["Location"]
    assert Job.objects.get(pk=rows["failed"].pk).status == JobStatus.FAILED


def test_posts_without_a_csrf_token_are_rejected(admin_user, rows):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    before = snapshot()
    assert client.post(job_button(rows["failed"], "retry")).status_code == 403
    assert client.post(schedule_button(rows["schedule"], "pause")).status_code == 403
    response = client.post(
        JOBS, {"action": "retry_jobs", "_selected_action": [rows["failed"].pk], "index": 0}
    )
    assert response.status_code == 403
    assert snapshot() == before


def test_buttons_carry_a_csrf_token(admin_client, rows):
    url = reverse("admin:django_cronqueue_job_change", args=[rows["failed"].pk])
    html = admin_client.get(url).content.decode()
    form = html.split('class="cq-button-form">')[1].split("</form>")[0]
    assert 'name="csrfmiddlewaretoken"' in form


# --- pauses: managed with change_job ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "data"),
    [
        (DASHBOARD_PAUSE, {"queue": "emails"}),
        (DASHBOARD_RESUME, {"queue": "paused-queue"}),
        (ADD_PAUSE, {"queue": "emails", "reason": "forged"}),
        ("change", {"reason": "forged"}),
        ("delete", {"post": "yes"}),
    ],
)
def test_a_viewer_cannot_pause_or_resume(viewer_client, rows, url, data):
    if url in ("change", "delete"):
        url = reverse(f"admin:django_cronqueue_pause_{url}", args=[rows["pause"].pk])
    before = snapshot()
    assert viewer_client.post(url, data).status_code == 403
    assert snapshot() == before


def test_a_viewer_sees_the_pauses_read_only(viewer_client, rows):
    response = viewer_client.get(PAUSES)
    assert response.status_code == 200
    assert response.context["has_add_permission"] is False
    assert response.context["action_form"] is None
    response = viewer_client.get(
        reverse("admin:django_cronqueue_pause_change", args=[rows["pause"].pk])
    )
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert 'name="_save"' not in response.content.decode()
    assert viewer_client.get(ADD_PAUSE).status_code == 403


def test_the_pause_models_own_permissions_grant_nothing(db, rows):
    """Pauses steer jobs: the permissions of the pause model do not manage them, the
    job permissions do."""
    client = staff_client(
        "pause-perms-only", ["view_pause", "add_pause", "change_pause", "delete_pause"]
    )
    before = snapshot()
    assert client.get(PAUSES).status_code == 403
    assert client.post(ADD_PAUSE, {"queue": "emails"}).status_code == 403
    assert client.post(DASHBOARD_PAUSE, {"queue": "emails"}).status_code == 403
    assert snapshot() == before


def test_change_job_manages_pauses(db, rows):
    client = staff_client("jobs-changer", ["change_job"])  # view follows from change
    assert client.get(PAUSES).status_code == 200
    assert client.get(DASHBOARD).status_code == 200
    assert client.post(DASHBOARD_PAUSE, {"queue": "emails"}).status_code == 302
    assert client.post(DASHBOARD_RESUME, {"queue": "paused-queue"}).status_code == 302
    assert list(Pause.objects.values_list("queue", flat=True)) == ["emails"]
    response = client.post(
        ADD_PAUSE, {"queue": "", "name": "testapp.noop", "until_0": "", "until_1": ""}
    )
    assert response.status_code == 302
    assert Pause.objects.filter(name="testapp.noop").exists()


def test_dashboard_buttons_refuse_staff_without_permissions_and_anonymous_users(db, rows):
    before = snapshot()
    nobody = staff_client("nobody", [])
    assert nobody.post(DASHBOARD_PAUSE, {"queue": "emails"}).status_code == 403
    anonymous = Client()
    for url in (DASHBOARD_PAUSE, DASHBOARD_RESUME, PAUSES):
        response = anonymous.post(url, {"queue": "paused-queue"})
        assert response.status_code == 302
        assert "/login/" in response["Location"]
    assert snapshot() == before


def test_pause_posts_without_a_csrf_token_are_rejected(admin_user, rows):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    before = snapshot()
    assert client.post(DASHBOARD_PAUSE, {"queue": "emails"}).status_code == 403
    assert client.post(DASHBOARD_RESUME, {"queue": "paused-queue"}).status_code == 403
    assert client.post(ADD_PAUSE, {"queue": "emails"}).status_code == 403
    assert client.post(job_button(rows["running"], "cancel")).status_code == 403
    assert snapshot() == before


def test_dashboard_buttons_carry_a_csrf_token(admin_client, rows):
    html = admin_client.get(DASHBOARD).content.decode()
    forms = html.split('class="cq-inline-form">')[1:]
    assert forms
    for form in forms:
        assert 'name="csrfmiddlewaretoken"' in form.split("</form>")[0]
