"""Safety: every state change needs the change permission and a CSRF-protected POST.
A view-only staff user sees no action and a forged POST changes nothing."""

import re

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.admin.base import defined_action_names
from django_cronqueue.models import Batch, CronSchedule, FairShare, Job, JobStatus, Pause
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
    assert response.status_code == 403
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


# --- every page and every action, collected from the admin classes ------------------
#
# The lists below are read from the registered admins: a new admin URL or list action is
# tested as soon as it exists, and must refuse a view-only user (403, nothing changed)
# unless it is one of the PAGES, which only show.

APP = "django_cronqueue"
#: Django's own URLs of every model admin.
STANDARD = ("changelist", "add", "history", "delete", "change")
#: The custom URLs that only show something (GET); every other one acts.
PAGES = {"job_dashboard"}
#: GET only, and for users who may add or change a schedule: a viewer gets 403.
PREVIEW = "cronschedule_preview"


def registered_admins():
    return {
        model._meta.model_name: model_admin
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label == APP
    }


def custom_urls():
    """(model, key, takes an object id) of every URL an admin adds to Django's own."""
    found = []
    for model_name, model_admin in registered_admins().items():
        for pattern in model_admin.get_urls():
            key = (pattern.name or "").removeprefix(f"{APP}_")
            if not key or key.removeprefix(f"{model_name}_") in STANDARD:
                continue
            found.append((model_name, key, "<path:object_id>" in str(pattern.pattern)))
    return sorted(found)


def list_actions():
    """(model, action name) of every list action an admin defines (the site's included)."""
    return sorted(
        (model_name, name)
        for model_name, model_admin in registered_admins().items()
        for name in defined_action_names(model_admin)
    )


CUSTOM_URLS = custom_urls()
ACTING_URLS = [url for url in CUSTOM_URLS if url[1] not in PAGES | {PREVIEW}]
LIST_ACTIONS = list_actions()
#: The row each URL of a model acts on (by key, else the model's row).
ROW_OF = {
    "job_retry": "failed",
    "job_cancel": "running",
    "job_runnow": "pending",
    "job": "failed",
    "cronschedule": "schedule",
    "cronschedule_resume": "paused",
    "cronschedule_change": "dynamic",
    "cronschedule_delete": "dynamic",
    "pause": "pause",
    "batch": "batch",
    "fairshare": "share",
}
#: What a forged POST carries: enough for any action to act, had it the permission.
FORGED = {
    "post": "yes",
    "start": "2026-01-01",
    "end": "2026-01-02",
    "apply": "Backfill",
    "queue": "paused-queue",
    "reason": "forged",
    "weight": 9,
    "job": "testapp.send_report",
    "payload": '{"tenant_id": 1}',
    "expression": "0 9 * * *",
    "tz": "UTC",
    "catch_up": "latest",
    "max_catch_up": "10",
    "overlap": "allow",
}


def paused_schedule():
    schedule = CronSchedule.objects.create_dynamic(
        name="reports.paused",
        job="testapp.send_report",
        payload={"tenant_id": 1},
        expression="0 8 * * *",
        tz="UTC",
    )
    schedule.pause()
    return schedule


@pytest.fixture
def all_rows(rows):
    jobs.set_weight("reports", "acme", 2)
    return {
        **rows,
        "dynamic": CronSchedule.objects.create_dynamic(
            name="reports.tenant-7",
            job="testapp.send_report",
            payload={"tenant_id": 7},
            expression="0 8 * * *",
            tz="UTC",
        ),
        "paused": paused_schedule(),
        "batch": Batch.objects.create(size=1),
        "share": FairShare.objects.get(),
        "succeeded": JobFactory(status=JobStatus.SUCCEEDED, finished_at=timezone.now()),
        "cancelled": JobFactory(status=JobStatus.CANCELLED, finished_at=timezone.now()),
    }


@pytest.fixture
def full_viewer(db):
    """A staff user with every view permission of the app, and no other."""
    codenames = [f"view_{model_name}" for model_name in registered_admins()]
    return staff_client("full-viewer", codenames)


def everything():
    """Every row of every table the admin changes, to compare before and after."""
    return {
        "jobs": list(
            Job.objects.order_by("pk").values_list(
                "pk", "status", "run_at", "attempts", "cancel_requested_at"
            )
        ),
        "schedules": list(
            CronSchedule.objects.order_by("pk").values_list("pk", "paused", "expression")
        ),
        "pauses": list(Pause.objects.order_by("pk").values_list("pk", "reason", "created_at")),
        "shares": list(FairShare.objects.order_by("pk").values_list("pk", "weight")),
        "batches": list(Batch.objects.order_by("pk").values_list("pk", "size")),
        "history": LogEntry.objects.count(),
    }


def url_for(model_name, key, with_object, rows):
    if not with_object:
        return reverse(f"admin:{APP}_{key}")
    row = rows[ROW_OF.get(key, ROW_OF[model_name])]
    return reverse(f"admin:{APP}_{key}", args=[row.pk])


def standard_posts():
    """(model, key) of Django's own add, change and delete views of every admin."""
    return [
        (model_name, f"{model_name}_{view}")
        for model_name in sorted(registered_admins())
        for view in ("add", "change", "delete")
    ]


def test_the_lists_of_urls_and_actions_are_read_from_the_admins():
    keys = {key for _, key, _ in CUSTOM_URLS}
    assert {"job_retry", "job_cancel", "job_runnow", "cronschedule_backfill"} <= keys
    assert {"job_dashboard_pause", "job_dashboard_resume", "cronschedule_pause"} <= keys
    assert ("job", "retry_jobs") in LIST_ACTIONS
    assert ("cronschedule", "backfill_schedules") in LIST_ACTIONS
    assert ("pause", "delete_selected") in LIST_ACTIONS


@pytest.mark.parametrize(("model_name", "key", "with_object"), ACTING_URLS)
def test_every_custom_action_url_refuses_a_viewer(
    full_viewer, all_rows, model_name, key, with_object
):
    before = everything()
    url = url_for(model_name, key, with_object, all_rows)
    assert full_viewer.post(url, FORGED).status_code == 403
    assert everything() == before


@pytest.mark.parametrize(("model_name", "key", "with_object"), ACTING_URLS)
def test_every_custom_action_url_acts_for_a_superuser(
    admin_client, all_rows, model_name, key, with_object
):
    """The counterpart of the test above: the same POST does change something."""
    before = everything()
    response = admin_client.post(url_for(model_name, key, with_object, all_rows), FORGED)
    assert response.status_code in (200, 302)
    assert everything() != before


@pytest.mark.parametrize(("model_name", "key"), standard_posts())
def test_every_add_change_and_delete_view_refuses_a_viewer(full_viewer, all_rows, model_name, key):
    before = everything()
    with_object = not key.endswith("_add")
    url = url_for(model_name, key, with_object, all_rows)
    assert full_viewer.post(url, FORGED).status_code == 403
    assert everything() == before


@pytest.mark.parametrize(("model_name", "action"), LIST_ACTIONS)
def test_every_list_action_refuses_a_viewer(full_viewer, all_rows, model_name, action):
    before = everything()
    rows_of_model = {"job": "failed", "cronschedule": "schedule"}
    pk = all_rows[rows_of_model.get(model_name, ROW_OF[model_name])].pk
    url = reverse(f"admin:{APP}_{model_name}_changelist")
    data = {**FORGED, "action": action, "_selected_action": [pk], "index": 0}
    assert full_viewer.post(url, data).status_code == 403
    data["select_across"] = 1
    assert full_viewer.post(url, data).status_code == 403
    assert everything() == before


def test_the_preview_refuses_a_viewer(full_viewer):
    assert (
        full_viewer.get(reverse(f"admin:{APP}_{PREVIEW}"), {"expression": "* * * * *"}).status_code
        == 403
    )


def acting_forms(html):
    """The forms of a page that could change something: POST forms with a submit
    control (Django's logout form aside)."""
    found = []
    for attributes, body in re.findall(r"<form\b([^>]*)>(.*?)</form>", html, re.S):
        if 'method="post"' not in attributes.lower() or "logout" in attributes:
            continue
        if re.search(r'type="submit"|<button\b', body):
            found.append(attributes.strip())
    return found


def viewer_pages(rows):
    """Every list, every page of a row (jobs in each status), every history page, and
    the dashboard."""
    pages = [reverse(f"admin:{APP}_job_dashboard")]
    for model_name in sorted(registered_admins()):
        pages.append(reverse(f"admin:{APP}_{model_name}_changelist"))
    row_keys = [
        "failed",
        "pending",
        "running",
        "succeeded",
        "cancelled",
        "schedule",
        "dynamic",
        "pause",
        "batch",
        "share",
    ]
    for key in row_keys:
        row = rows[key]
        model_name = row._meta.model_name
        pages.append(reverse(f"admin:{APP}_{model_name}_change", args=[row.pk]))
        pages.append(reverse(f"admin:{APP}_{model_name}_history", args=[row.pk]))
    return pages


def test_a_viewer_sees_every_page_without_a_way_to_act(full_viewer, all_rows):
    action_urls = [
        url_for(model_name, key, with_object, all_rows)
        for model_name, key, with_object in ACTING_URLS
    ]
    for page in viewer_pages(all_rows):
        response = full_viewer.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        assert acting_forms(html) == [], page
        assert response.context.get("action_form") is None, page
        assert not response.context.get("cq_buttons"), page
        assert 'class="addlink"' not in html and 'class="deletelink"' not in html, page
        for url in action_urls:
            assert f'"{url}"' not in html, (page, url)


def test_a_superuser_sees_the_ways_to_act_the_viewer_does_not(admin_client, all_rows):
    """The counterpart of the test above: its checks do find the forms and buttons."""
    dashboard = admin_client.get(reverse(f"admin:{APP}_job_dashboard")).content.decode()
    assert acting_forms(dashboard)
    job_page = admin_client.get(reverse(f"admin:{APP}_job_change", args=[all_rows["failed"].pk]))
    assert acting_forms(job_page.content.decode())
    assert admin_client.get(JOBS).context["action_form"] is not None
    schedules = admin_client.get(reverse(f"admin:{APP}_cronschedule_changelist")).content
    assert b'class="addlink"' in schedules
