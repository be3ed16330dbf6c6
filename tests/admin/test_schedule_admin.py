"""The cron schedule admin: the list, Pause / Resume / Run now, and Backfill with a
date range, from the list (an intermediate form) and from the detail page."""

import datetime as dt
from contextlib import ExitStack

import pytest
from django.urls import reverse
from django.utils import timezone

from django_cronqueue.models import CronSchedule, Job, JobStatus
from django_cronqueue.schedules import scheduler
from tests.admin.conftest import messages_of
from tests.cron_helpers import schedule
from tests.factories import CronScheduleFactory, JobFactory

pytestmark = pytest.mark.django_db

UTC = dt.timezone.utc
CHANGELIST = reverse("admin:django_cronqueue_cronschedule_changelist")


def change_url(row):
    return reverse("admin:django_cronqueue_cronschedule_change", args=[row.pk])


def button_url(row, key):
    return reverse(f"admin:django_cronqueue_cronschedule_{key}", args=[row.pk])


@pytest.fixture
def schedules():
    """Two registered schedules with their rows, synced as a worker's tick would."""
    with ExitStack() as stack:
        stack.enter_context(schedule("30 2 * * *", name="tests.nightly", tz="America/New_York"))
        stack.enter_context(schedule("*/15 * * * 1-5", name="tests.quarterly", tz="UTC"))
        scheduler.sync_schedules(timezone.now())
        yield {row.name: row for row in CronSchedule.objects.all()}


def post_action(client, action, rows, **extra):
    data = {"action": action, "_selected_action": [row.pk for row in rows], "index": 0, **extra}
    return client.post(CHANGELIST, data, follow=True)


def test_list_shows_expression_description_zone_and_next_five_runs(admin_client, schedules):
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<code class="cq-expression cq-nowrap">30 2 * * *</code>' in html
    assert "At 02:30" in html
    assert "Every 15 minutes, Monday through Friday" in html
    assert "America/New_York" in html
    row_html = html.split("tests.<wbr>nightly</a>")[1].split("</tr>")[0]
    assert row_html.count("<li>") == 5
    assert " 02:30 E" in row_html  # EDT or EST: the schedule's own zone, not UTC


def test_aliases_are_described(admin_client):
    with schedule("@daily", name="tests.daily", tz="UTC"):
        scheduler.sync_schedules(timezone.now())
        html = admin_client.get(CHANGELIST).content.decode()
    assert "At 00:00" in html


def test_last_occurrence_shows_its_job_status(admin_client, schedules):
    occurrence = dt.datetime(2026, 6, 2, 6, 30, tzinfo=UTC)
    row = schedules["tests.nightly"]
    CronSchedule.objects.filter(pk=row.pk).update(last_occurrence=occurrence)
    job = JobFactory(
        name="tests.nightly", payload={}, scheduled_for=occurrence, status=JobStatus.FAILED
    )
    html = admin_client.get(CHANGELIST).content.decode()
    job_url = reverse("admin:django_cronqueue_job_change", args=[job.pk])
    assert (
        '<span class="cq-nowrap">Tue 2026-06-02</span> <span class="cq-nowrap">02:30 EDT</span> '
        f'<a href="{job_url}">#{job.pk}</a>'
    ) in html
    assert 'cq-status-failed">Failed</span>' in html


def test_inactive_schedules_are_flagged(admin_client):
    CronScheduleFactory(name="tests.removed", active=False)
    html = admin_client.get(CHANGELIST).content.decode()
    assert "inactive: no code defines it" in html


def test_pause_and_resume_actions(admin_client, schedules):
    nightly = schedules["tests.nightly"]
    response = post_action(admin_client, "pause_schedules", [nightly])
    assert messages_of(response) == ["Paused 1 schedule: tests.nightly."]
    assert CronSchedule.objects.get(pk=nightly.pk).paused
    response = post_action(admin_client, "pause_schedules", list(schedules.values()))
    assert messages_of(response) == [
        "Paused 1 schedule: tests.quarterly.",
        "Skipped 1 schedule (already paused): tests.nightly.",
    ]
    response = post_action(admin_client, "resume_schedules", [nightly])
    assert messages_of(response) == ["Resumed 1 schedule: tests.nightly."]
    assert not CronSchedule.objects.get(pk=nightly.pk).paused


def test_run_now_action_enqueues_one_manual_run(admin_client, schedules):
    removed = CronScheduleFactory(name="tests.removed", active=False)
    response = post_action(admin_client, "run_schedules_now", [schedules["tests.nightly"], removed])
    job = Job.objects.get(name="tests.nightly")
    assert job.scheduled_for is None
    assert job.status == JobStatus.PENDING
    assert messages_of(response) == [
        f"Enqueued a manual run of 1 schedule: tests.nightly (job #{job.pk}).",
        "Skipped 1 schedule (no code in this process defines it): tests.removed.",
    ]
    row = CronSchedule.objects.get(name="tests.nightly")
    assert row.cursor == schedules["tests.nightly"].cursor  # the schedule is not disturbed


def test_backfill_action_asks_for_dates_then_creates_the_occurrences(admin_client, schedules):
    nightly = schedules["tests.nightly"]
    response = post_action(admin_client, "backfill_schedules", [nightly])
    assert response.status_code == 200
    html = response.content.decode()
    assert "Backfill cron schedules" in html
    assert 'type="date"' in html
    assert f'name="_selected_action" value="{nightly.pk}"' in html
    assert Job.objects.count() == 0

    # 2026-03-08 is the spring-forward day: 02:30 does not exist and runs at 03:00 EDT.
    response = post_action(
        admin_client,
        "backfill_schedules",
        [nightly],
        start="2026-03-07",
        end="2026-03-09",
        apply="Backfill",
    )
    assert response.redirect_chain[-1][0].endswith(CHANGELIST)
    assert messages_of(response) == [
        "Backfilled 1 schedule: tests.nightly (created 3 occurrences from Sat 2026-03-07 00:00 "
        "EST to Tue 2026-03-10 00:00 EDT; occurrences that already had a row were left alone)."
    ]
    assert list(Job.objects.order_by("scheduled_for").values_list("scheduled_for", flat=True)) == [
        dt.datetime(2026, 3, 7, 7, 30, tzinfo=UTC),
        dt.datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        dt.datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
    ]
    response = post_action(
        admin_client,
        "backfill_schedules",
        [nightly],
        start="2026-03-07",
        end="2026-03-09",
        apply="Backfill",
    )
    assert "(created 0 occurrences from" in messages_of(response)[0]
    assert Job.objects.count() == 3


def test_backfill_rejects_an_inverted_range(admin_client, schedules):
    response = post_action(
        admin_client,
        "backfill_schedules",
        [schedules["tests.nightly"]],
        start="2026-03-09",
        end="2026-03-07",
        apply="Backfill",
    )
    assert response.status_code == 200
    assert "The last day comes before the first day." in response.content.decode()
    assert Job.objects.count() == 0


def test_backfill_from_the_detail_page(admin_client, schedules):
    nightly = schedules["tests.nightly"]
    detail = admin_client.get(change_url(nightly)).content.decode()
    assert button_url(nightly, "backfill") in detail
    assert admin_client.get(button_url(nightly, "backfill")).status_code == 200
    response = admin_client.post(
        button_url(nightly, "backfill"), {"start": "2026-06-01", "end": "2026-06-01"}, follow=True
    )
    assert response.redirect_chain[-1][0] == change_url(nightly)
    assert (
        "tests.nightly (created 1 occurrence from Mon 2026-06-01 00:00 EDT"
        in (messages_of(response)[0])
    )
    assert Job.objects.get().scheduled_for == dt.datetime(2026, 6, 1, 6, 30, tzinfo=UTC)


def test_detail_buttons_pause_resume_run_now(admin_client, schedules):
    nightly = schedules["tests.nightly"]
    response = admin_client.get(change_url(nightly))
    assert [b["label"] for b in response.context["cq_buttons"]] == ["Pause", "Run now"]
    response = admin_client.post(button_url(nightly, "pause"), follow=True)
    assert messages_of(response) == ["Paused 1 schedule: tests.nightly."]
    assert [b["label"] for b in response.context["cq_buttons"]] == ["Resume", "Run now"]
    admin_client.post(button_url(nightly, "resume"))
    assert not CronSchedule.objects.get(pk=nightly.pk).paused
    admin_client.post(button_url(nightly, "runnow"))
    assert Job.objects.filter(name="tests.nightly", scheduled_for__isnull=True).count() == 1


def test_code_schedule_form_is_read_only(admin_client, schedules):
    nightly = schedules["tests.nightly"]
    response = admin_client.get(change_url(nightly))
    assert response.context["adminform"].form.fields == {}
    response = admin_client.post(change_url(nightly), {"paused": "on", "expression": "* * * * *"})
    assert response.status_code == 405
    row = CronSchedule.objects.get(pk=nightly.pk)
    assert (row.paused, row.expression) == (False, "30 2 * * *")
    delete = reverse("admin:django_cronqueue_cronschedule_delete", args=[nightly.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert CronSchedule.objects.filter(pk=nightly.pk).exists()


def test_backfill_says_when_it_hit_the_limit_of_one_call(admin_client):
    with schedule("* * * * *", name="tests.every_minute", tz="UTC"):
        scheduler.sync_schedules(timezone.now())
        row = CronSchedule.objects.get(name="tests.every_minute")
        response = admin_client.post(
            button_url(row, "backfill"), {"start": "2026-01-01", "end": "2026-01-01"}, follow=True
        )
    assert "created 1,000 occurrences" in messages_of(response)[0]
    assert "run it again for the rest" in messages_of(response)[0]
    assert Job.objects.count() == 1000


def test_actions_are_recorded_in_the_history(admin_client, schedules):
    from django.contrib.admin.models import LogEntry

    nightly = schedules["tests.nightly"]
    admin_client.post(button_url(nightly, "pause"))
    admin_client.post(button_url(nightly, "runnow"))
    job = Job.objects.get(name="tests.nightly")
    entries = list(
        LogEntry.objects.filter(object_id=str(nightly.pk))
        .order_by("pk")
        .values_list("change_message", flat=True)
    )
    assert entries == ["Pause (admin action)", f"Run now (admin action): job #{job.pk}"]
    history = admin_client.get(
        reverse("admin:django_cronqueue_cronschedule_history", args=[nightly.pk])
    )
    assert "Pause (admin action)" in history.content.decode()


@pytest.mark.parametrize(
    ("term", "found"),
    [("nightly", ["tests.nightly"]), ("tests. quarterly", ["tests.quarterly"]), ("x" * 60_000, [])],
)
def test_search_by_name(admin_client, schedules, term, found):
    """A word longer than any name finds nothing without asking the database (SQLite
    refuses a LIKE pattern of over 50,000 bytes)."""
    response = admin_client.get(CHANGELIST, {"q": term})
    assert response.status_code == 200
    assert [row.name for row in response.context["cl"].result_list] == found


@pytest.mark.parametrize(
    ("start", "end", "error"),
    [
        (
            "2026-01-01",
            "9999-12-31",
            "The last day can be 9999-12-30 at the latest: a backfill runs to 24:00 on the "
            "last day, which must be a date and time in every time zone.",
        ),
        (
            "0001-01-01",
            "2026-01-01",
            "The first day can be 0001-01-02 at the earliest: 00:00 on an earlier day is not a "
            "date and time in every time zone.",
        ),
    ],
)
def test_backfill_refuses_days_it_cannot_serve(admin_client, schedules, start, end, error):
    nightly = schedules["tests.nightly"]
    response = admin_client.post(button_url(nightly, "backfill"), {"start": start, "end": end})
    assert response.status_code == 200
    assert error in response.content.decode()
    response = post_action(
        admin_client, "backfill_schedules", [nightly], start=start, end=end, apply="Backfill"
    )
    assert response.status_code == 200
    assert error in response.content.decode()
    assert Job.objects.count() == 0


def test_backfill_up_to_the_last_day_stops_at_the_limit(admin_client, bounded_enumeration):
    """Up to 9999-12-30 of a schedule that runs every minute: the first 1,000 occurrences,
    without computing the others (eight thousand years of minutes)."""
    with schedule("* * * * *", name="tests.every_minute", tz="America/New_York"):
        scheduler.sync_schedules(timezone.now())
        row = CronSchedule.objects.get(name="tests.every_minute")
        response = admin_client.post(
            button_url(row, "backfill"), {"start": "2026-01-01", "end": "9999-12-30"}, follow=True
        )
    [message] = messages_of(response)
    assert "created 1,000 occurrences from Thu 2026-01-01 00:00 EST to Fri 9999-12-31 00:00" in (
        message
    )
    assert "run it again for the rest" in message
    assert Job.objects.count() == 1000
    assert len(bounded_enumeration) <= 2000
