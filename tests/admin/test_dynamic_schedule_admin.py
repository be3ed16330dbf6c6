"""The admin of dynamic schedules (SPEC section 10): add, change and delete through the
library, every problem on its own field, the preview of the expression, permissions,
history entries; code schedules keep their read-only page and their actions."""

import datetime as dt
import json

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_cronqueue.admin.schedule_form import PayloadField
from django_cronqueue.models import CronSchedule
from django_cronqueue.schedules import dynamic, scheduler
from tests.admin.conftest import messages_of, staff_client

pytestmark = pytest.mark.django_db

REPORT = "testapp.send_report"
CHANGELIST = reverse("admin:django_cronqueue_cronschedule_changelist")
ADD = reverse("admin:django_cronqueue_cronschedule_add")
PREVIEW = reverse("admin:django_cronqueue_cronschedule_preview")


def change_url(row):
    return reverse("admin:django_cronqueue_cronschedule_change", args=[row.pk])


def delete_url(row):
    return reverse("admin:django_cronqueue_cronschedule_delete", args=[row.pk])


def form_data(**values):
    data = {
        "name": "reports.tenant-42",
        "job": REPORT,
        "payload": '{"tenant_id": 42}',
        "expression": "0 8 * * 1-5",
        "tz": "Europe/Paris",
        "catch_up": "latest",
        "catch_up_window": "",
        "max_catch_up": "10",
        "overlap": "allow",
        "retries": "",
        "queue": "",
        "priority": "",
    }
    data.update(values)
    return data


@pytest.fixture
def report():
    """A dynamic schedule of testapp.send_report, made with the library."""
    return CronSchedule.objects.create_dynamic(
        name="reports.tenant-7",
        job=REPORT,
        payload={"tenant_id": 7},
        expression="0 8 * * *",
        tz="UTC",
    )


@pytest.fixture
def code_schedule(nightly):
    scheduler.sync_schedules(timezone.now())
    return CronSchedule.objects.get(name="tests.nightly")


def errors_of(response):
    return response.context["adminform"].form.errors


# --- add --------------------------------------------------------------------------


def test_add_page_offers_the_registered_jobs_not_cron_handlers(admin_client, nightly):
    response = admin_client.get(ADD)
    assert response.status_code == 200
    choices = dict(response.context["adminform"].form.fields["job"].choices)
    assert REPORT in choices
    assert "tests.nightly" not in choices
    html = response.content.decode()
    assert '<datalist id="cq-zone-names">' in html
    assert '<option value="Europe/Paris">' in html
    assert 'id="cq-preview"' in html
    assert "schedule_preview.js" in html


def test_add_creates_an_armed_dynamic_schedule_with_a_history_entry(admin_client):
    before = timezone.now()
    data = form_data(retries="2", queue="reports", priority="5", catch_up_window="3600")
    response = admin_client.post(ADD, data)
    assert response.status_code == 302, errors_of(response)
    row = CronSchedule.objects.get(name="reports.tenant-42")
    assert (row.source, row.job, row.payload) == ("dynamic", REPORT, {"tenant_id": 42})
    assert (row.expression, row.tz) == ("0 8 * * 1-5", "Europe/Paris")
    assert row.options == {
        "catch_up": "latest",
        "catch_up_window": 3600.0,
        "max_catch_up": 10,
        "overlap": "allow",
        "retries": 2,
        "queue": "reports",
        "priority": 5,
    }
    assert row.cursor >= before
    assert row.next_run == dynamic.dynamic_target(row).spec.next_runs(row.cursor, 1)[0]
    entry = LogEntry.objects.get(object_id=str(row.pk))
    assert entry.action_flag == ADDITION
    assert entry.object_repr == str(row)


def test_add_with_an_empty_zone_takes_the_projects(admin_client, settings):
    response = admin_client.post(ADD, form_data(tz=""))
    assert response.status_code == 302, errors_of(response)
    assert CronSchedule.objects.get(name="reports.tenant-42").tz == settings.TIME_ZONE


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("payload", "{tenant_id: 42}", "Not JSON: Expecting property name"),
        ("payload", "[42]", "The payload must be a JSON object"),
        ("payload", "{}", "tenant_id"),
        ("payload", '{"tenant_id": 1, "colour": "red"}', "colour"),
        ("expression", "0 8 * *", "expression"),
        ("expression", "61 * * * *", "61"),
        ("tz", "Paris", "did you mean 'Europe/Paris'?"),
        ("tz", "America/NewYork", "did you mean 'America/New_York'?"),
        ("expression", "*/90 * * * *", "has a step of 90"),
        ("expression", "0 */25 * * *", "has a step of 25"),
        ("expression", "0 0 31 2 *", "it can never run: February never has a day 31"),
        ("tz", "Mars/Olympus", "is not an IANA time zone name"),
        ("job", "tests.nightly", "not one of the available choices"),
        ("name", "", "This field is required."),
        ("name", "tests.nightly", "is defined in code (@jobs.cron)"),
        ("max_catch_up", "0", "greater than or equal to 1"),
        ("retries", "-1", "greater than or equal to 0"),
        ("catch_up", "sometimes", "not one of the available choices"),
        ("catch_up_window", "-5", "greater than or equal to 0.001"),
        ("priority", str(2**31), "priority= must be an integer from"),
        ("queue", "x" * 300, "queue= must be a non-empty string"),
    ],
)
def test_every_problem_is_shown_on_its_field(admin_client, nightly, field, value, message):
    response = admin_client.post(ADD, form_data(**{field: value}))
    assert response.status_code == 200
    errors = errors_of(response)
    assert list(errors) == [field], errors
    assert message in " ".join(errors[field])
    assert 'class="errorlist' in response.content.decode()
    assert not CronSchedule.objects.filter(source="dynamic").exists()


def test_a_payload_that_does_not_bind_names_the_key(admin_client):
    missing = errors_of(admin_client.post(ADD, form_data(payload="{}")))["payload"][0]
    assert "tenant_id" in missing and REPORT in missing
    extra = errors_of(admin_client.post(ADD, form_data(payload='{"tenant_id": 1, "x": 2}')))
    assert "'x'" in extra["payload"][0]


DEEP_PAYLOAD = "[" * 100_000 + "]" * 100_000


def test_a_payload_nested_past_the_parsers_stack_is_a_form_error(admin_client, report):
    for url in (ADD, change_url(report)):
        response = admin_client.post(url, form_data(payload=DEEP_PAYLOAD))
        assert response.status_code == 200
        assert "nested too deeply" in errors_of(response)["payload"][0]
    report.refresh_from_db()
    assert report.payload == {"tenant_id": 7}
    field = PayloadField()
    assert field.has_changed("{}", DEEP_PAYLOAD) is True
    assert field.has_changed(DEEP_PAYLOAD, "{}") is True


def test_a_taken_name_is_refused(admin_client, report):
    response = admin_client.post(ADD, form_data(name=report.name))
    assert "name" in errors_of(response)
    assert CronSchedule.objects.filter(name=report.name).count() == 1


def test_a_validation_error_keeps_the_preview_of_what_was_typed(admin_client):
    response = admin_client.post(ADD, form_data(payload="nope", expression="30 7 * * 1-5"))
    html = response.content.decode()
    assert "At 07:30, Monday through Friday" in html
    assert html.count("<li>") >= 5
    response = admin_client.post(ADD, form_data(tz="Paris"))
    assert "did you mean &#x27;Europe/Paris&#x27;?" in response.content.decode()


# --- change -----------------------------------------------------------------------


def test_change_page_shows_the_definition_and_its_preview(admin_client, report):
    response = admin_client.get(change_url(report))
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.initial["job"] == REPORT
    assert json.loads(form.initial["payload"]) == {"tenant_id": 7}
    html = response.content.decode()
    assert 'name="expression"' in html and 'value="0 8 * * *"' in html
    assert "At 08:00" in html
    assert 'name="_save"' in html
    assert reverse("admin:django_cronqueue_cronschedule_delete", args=[report.pk]) in html


def test_change_edits_through_the_library_and_rearms(admin_client, report):
    armed = report.cursor
    data = form_data(
        name="ignored", payload='{"tenant_id": 7, "format": "pdf"}', expression="30 7 * * *"
    )
    response = admin_client.post(change_url(report), data)
    assert response.status_code == 302, errors_of(response)
    report.refresh_from_db()
    assert report.name == "reports.tenant-7"
    assert report.payload == {"tenant_id": 7, "format": "pdf"}
    assert (report.expression, report.tz) == ("30 7 * * *", "Europe/Paris")
    assert report.cursor > armed  # re-armed at the edit
    entry = LogEntry.objects.get(object_id=str(report.pk))
    assert entry.action_flag == CHANGE
    assert "payload" in entry.get_change_message() and "expression" in entry.get_change_message()


def test_change_of_the_payload_alone_does_not_rearm(admin_client, report):
    armed = report.cursor
    data = form_data(payload='{"tenant_id": 8}', expression="0 8 * * *", tz="UTC")
    assert admin_client.post(change_url(report), data).status_code == 302
    report.refresh_from_db()
    assert (report.payload, report.cursor) == ({"tenant_id": 8}, armed)
    message = LogEntry.objects.get(object_id=str(report.pk)).get_change_message()
    assert message == "Changed payload."


def test_the_payload_shown_in_its_stored_form_saves_back_unchanged(admin_client):
    """The page shows the payload as the row stores it: a typed value as its tag, a
    caller's dict whose key looks like a tag with that key escaped. Saved as shown, each
    stays what it was (a datetime; the caller's dict), not one escape deeper."""
    since = dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.timezone.utc)
    row = CronSchedule.objects.create_dynamic(
        name="reports.typed",
        job=REPORT,
        payload={"tenant_id": 7, "format": {"since": since, "filter": {"$gt": 5}}},
        expression="0 8 * * *",
        tz="UTC",
    )
    stored = {
        "tenant_id": 7,
        "format": {"since": {"$datetime": "2026-03-01T09:30:00+00:00"}, "filter": {"$$gt": 5}},
    }
    assert row.payload == stored
    shown = admin_client.get(change_url(row)).context["adminform"].form.initial["payload"]
    assert json.loads(shown) == stored
    data = form_data(name="ignored", payload=shown, expression="0 9 * * *", tz="UTC")
    response = admin_client.post(change_url(row), data)
    assert response.status_code == 302, errors_of(response)
    row.refresh_from_db()
    assert (row.expression, row.payload) == ("0 9 * * *", stored)


def test_a_tag_typed_by_hand_that_is_not_valid_is_an_error_on_the_payload(admin_client):
    payload = '{"tenant_id": 7, "format": {"$date": "yesterday"}}'
    response = admin_client.post(ADD, form_data(payload=payload))
    assert response.status_code == 200
    [error] = errors_of(response)["payload"]
    assert "payload key 'format' holds {'$date': 'yesterday'}" in error, error
    assert "reads as a tagged date" in error


def test_change_errors_are_shown_on_their_field(admin_client, report):
    response = admin_client.post(change_url(report), form_data(tz="paris"))
    assert "did you mean 'Europe/Paris'?" in errors_of(response)["tz"][0]
    report.refresh_from_db()
    assert report.tz == "UTC"


# --- delete -----------------------------------------------------------------------


def test_delete_goes_through_the_library_with_a_history_entry(admin_client, report):
    page = admin_client.get(delete_url(report))
    assert page.status_code == 200
    response = admin_client.post(delete_url(report), {"post": "yes"})
    assert response.status_code == 302
    assert not CronSchedule.objects.filter(pk=report.pk).exists()
    entry = LogEntry.objects.get(object_id=str(report.pk))
    assert (entry.action_flag, entry.object_repr) == (DELETION, str(report))


def test_the_list_has_no_bulk_delete(admin_client, report):
    response = admin_client.get(CHANGELIST)
    assert "delete_selected" not in response.context["action_form"].fields["action"].choices[1:]
    assert "delete_selected" not in response.content.decode()


# --- code schedules stay read-only --------------------------------------------------


def test_code_schedule_page_stays_read_only(admin_client, code_schedule):
    response = admin_client.get(change_url(code_schedule))
    html = response.content.decode()
    assert response.status_code == 200
    assert 'name="expression"' not in html
    assert 'name="_save"' not in html
    assert delete_url(code_schedule) not in html
    assert reverse("admin:django_cronqueue_cronschedule_pause", args=[code_schedule.pk]) in html
    assert admin_client.post(change_url(code_schedule), form_data()).status_code == 405
    assert admin_client.post(delete_url(code_schedule), {"post": "yes"}).status_code == 403
    assert CronSchedule.objects.filter(pk=code_schedule.pk).exists()


def test_actions_still_work_on_both_kinds(admin_client, code_schedule, report):
    data = {
        "action": "pause_schedules",
        "_selected_action": [code_schedule.pk, report.pk],
        "index": 0,
    }
    admin_client.post(CHANGELIST, data)
    assert set(CronSchedule.objects.values_list("paused", flat=True)) == {True}


# --- the list -----------------------------------------------------------------------


def test_the_list_shows_both_kinds_with_a_source_filter(admin_client, code_schedule, report):
    html = admin_client.get(CHANGELIST).content.decode()
    assert "tests.nightly" in html and "reports.tenant-7" in html
    dynamic_only = admin_client.get(CHANGELIST, {"source__exact": "dynamic"})
    assert [row.name for row in dynamic_only.context["cl"].result_list] == ["reports.tenant-7"]


def test_the_list_is_paginated_with_a_constant_number_of_queries(admin_client):
    def add(n, start):
        for i in range(start, start + n):
            CronSchedule.objects.create_dynamic(
                name=f"reports.tenant-{i}",
                job=REPORT,
                payload={"tenant_id": i},
                expression="0 8 * * *",
            )

    def queries():
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(CHANGELIST)
        assert response.status_code == 200
        return response, captured.captured_queries

    add(2, 0)
    _, small = queries()
    add(110, 2)
    response, large = queries()
    assert len(large) == len(small), "\n".join(query["sql"] for query in large)
    assert len(response.context["cl"].result_list) == 100
    assert response.context["cl"].result_count == 112


# --- permissions ------------------------------------------------------------------


def test_a_viewer_sees_no_add_change_or_delete(viewer_client, report):
    listing = viewer_client.get(CHANGELIST).content.decode()
    assert ADD not in listing
    detail = viewer_client.get(change_url(report)).content.decode()
    assert 'name="_save"' not in detail and delete_url(report) not in detail
    assert 'name="expression"' not in detail
    assert viewer_client.get(ADD).status_code == 403
    assert viewer_client.post(ADD, form_data()).status_code == 403
    assert viewer_client.post(change_url(report), form_data(tz="Asia/Tokyo")).status_code == 403
    assert viewer_client.post(delete_url(report), {"post": "yes"}).status_code == 403
    report.refresh_from_db()
    assert report.tz == "UTC"
    assert not LogEntry.objects.exists()


def test_each_permission_allows_its_own_view_only(report):
    adder = staff_client("adder", ["view_cronschedule", "add_cronschedule"])
    assert adder.post(ADD, form_data()).status_code == 302
    assert adder.post(change_url(report), form_data(tz="Asia/Tokyo")).status_code == 403
    assert adder.post(delete_url(report), {"post": "yes"}).status_code == 403

    changer = staff_client("changer", ["view_cronschedule", "change_cronschedule"])
    assert changer.get(ADD).status_code == 403
    assert changer.post(change_url(report), form_data(tz="Asia/Tokyo")).status_code == 302
    assert delete_url(report) not in changer.get(change_url(report)).content.decode()
    assert changer.post(delete_url(report), {"post": "yes"}).status_code == 403

    deleter = staff_client("deleter", ["view_cronschedule", "delete_cronschedule"])
    assert deleter.post(delete_url(report), {"post": "yes"}).status_code == 302
    assert not CronSchedule.objects.filter(pk=report.pk).exists()


def test_forms_need_a_csrf_token(report):
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_superuser("csrf", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(ADD, form_data()).status_code == 403
    assert client.post(delete_url(report), {"post": "yes"}).status_code == 403
    assert not CronSchedule.objects.filter(name="reports.tenant-42").exists()


# --- the preview endpoint -----------------------------------------------------------


def test_preview_gives_the_description_and_next_five_runs(admin_client):
    response = admin_client.get(PREVIEW, {"expression": "30 7 * * 1-5", "tz": "Europe/Paris"})
    assert response.status_code == 200
    answer = response.json()
    assert answer["description"] == "At 07:30, Monday through Friday"
    assert answer["tz"] == "Europe/Paris"
    assert len(answer["runs"]) == 5
    first = answer["runs"][0]
    assert " 07:30 CE" in first["local"]  # CET or CEST
    assert first["utc"].endswith(" UTC") and (
        " 06:30 " in first["utc"] or " 05:30 " in first["utc"]
    )
    runs = [
        dt.datetime.strptime(run["utc"], "%a %Y-%m-%d %H:%M UTC").replace(tzinfo=dt.timezone.utc)
        for run in answer["runs"]
    ]
    assert runs == sorted(runs) and runs[0] > timezone.now() - dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("expression", "description", "weekdays"),
    [
        ("0 8 13 * FRI", "At 08:00, on day 13 of the month, or on Friday", None),
        ("0 8 1-7 * MON-FRI", "At 08:00, between day 1 and 7 of the month, or Monday", None),
        ("0 8 */1 * MON", "At 08:00, only on Monday", {"Mon"}),
        ("0 8 */10 * MON", "At 08:00, every 10 days, but only on Monday", {"Mon"}),
        ("0 8 1 SEP-9 *", "At 08:00, on day 1 of the month, only in September", None),
        ("0 8 * * */8", "At 08:00, only on Sunday", {"Sun"}),
        ("0 8 * * */7", "At 08:00, only on Sunday", {"Sun"}),
    ],
)
def test_preview_follows_the_day_rule(admin_client, expression, description, weekdays):
    response = admin_client.get(PREVIEW, {"expression": expression, "tz": "UTC"})
    answer = response.json()
    assert answer["description"].startswith(description)
    if weekdays is not None:
        assert {run["utc"][:3] for run in answer["runs"]} == weekdays
    if "SEP" in expression:
        assert all("-09-01 08:00" in run["utc"] for run in answer["runs"])


def test_preview_of_bad_input_is_a_400_with_the_message(admin_client):
    response = admin_client.get(PREVIEW, {"expression": "0 8 * *", "tz": "UTC"})
    assert response.status_code == 400
    assert "expression" in response.json()["error"]
    response = admin_client.get(PREVIEW, {"expression": "0 8 * * *", "tz": "Paris"})
    assert response.status_code == 400
    assert "did you mean 'Europe/Paris'?" in response.json()["error"]
    response = admin_client.get(PREVIEW, {"expression": "0 0 30 2 *", "tz": "UTC"})
    assert response.status_code == 400
    assert "it can never run" in response.json()["error"]
    response = admin_client.get(PREVIEW, {"expression": "*/61 * * * *", "tz": "Europe/Pari"})
    assert response.status_code == 400
    assert "step of 61" in response.json()["error"]


def test_preview_refuses_unread_what_no_schedule_could_store(admin_client):
    """A 100 KB expression is a 400 naming the limit, not seconds of CPU."""
    response = admin_client.get(PREVIEW, {"expression": "1," * 50_000 + "1 * * * *"})
    assert response.status_code == 400
    assert "at most 200" in response.json()["error"]
    response = admin_client.get(PREVIEW, {"expression": "0 8 * * *", "tz": "Europe/" * 10_000})
    assert response.status_code == 400
    assert "at most 64" in response.json()["error"]


def test_preview_is_staff_only_and_permission_checked(client, db, report):
    assert client.get(PREVIEW, {"expression": "0 8 * * *"}).status_code == 302  # to login
    nobody = staff_client("nobody", [])
    assert nobody.get(PREVIEW, {"expression": "0 8 * * *"}).status_code == 403
    viewer = staff_client("viewer", ["view_cronschedule"])
    assert viewer.get(PREVIEW, {"expression": "0 8 * * *"}).status_code == 403
    adder = staff_client("adder", ["add_cronschedule"])
    assert adder.get(PREVIEW, {"expression": "0 8 * * *"}).status_code == 200
    assert adder.post(PREVIEW, {"expression": "0 8 * * *"}).status_code == 405


def test_preview_output_is_json_the_page_writes_as_text(admin_client):
    response = admin_client.get(PREVIEW, {"expression": "<b>", "tz": "<script>"})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    html = admin_client.post(ADD, form_data(expression="<b>x</b>")).content.decode()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


def test_the_definition_is_escaped_on_every_page(admin_client):
    script = "<script>alert(1)</script>"
    row = CronSchedule.objects.create_dynamic(
        name="reports.<b>bold</b>",
        job=REPORT,
        payload={"tenant_id": 1, "format": script},
        expression="0 8 * * *",
        tz="UTC",
    )
    for url in (CHANGELIST, change_url(row), delete_url(row)):
        html = admin_client.get(url).content.decode()
        assert script not in html and "<b>bold</b>" not in html, url
    assert "&lt;b&gt;bold&lt;/b&gt;" in admin_client.get(CHANGELIST).content.decode()
    assert "&lt;script&gt;" in admin_client.get(change_url(row)).content.decode()


def test_a_schedule_deleted_while_its_form_was_checked_is_reported(
    admin_client, report, monkeypatch
):
    check = dynamic.check

    def deleted_meanwhile(*args, **kwargs):
        check(*args, **kwargs)
        CronSchedule.objects.filter(pk=report.pk).delete()  # another user, at that moment

    monkeypatch.setattr(dynamic, "check", deleted_meanwhile)
    response = admin_client.post(change_url(report), form_data(tz="Asia/Tokyo"), follow=True)
    assert response.status_code == 200
    assert "was deleted" in " ".join(messages_of(response))
    assert not LogEntry.objects.exists()


def test_a_name_taken_while_the_form_was_checked_is_reported(admin_client, monkeypatch):
    create = dynamic.create

    def taken_meanwhile(**definition):
        # another user takes the name after the form's checks, before this save
        create(
            name="reports.tenant-42", job=REPORT, payload={"tenant_id": 1}, expression="* * * * *"
        )
        return create(**definition)

    monkeypatch.setattr(dynamic, "create", taken_meanwhile)
    response = admin_client.post(ADD, form_data(), follow=True)
    assert "exists already" in " ".join(messages_of(response))
    # the admin's transaction rolled back; here that includes the simulated other writer
    assert not CronSchedule.objects.exists()
    assert not LogEntry.objects.exists()
