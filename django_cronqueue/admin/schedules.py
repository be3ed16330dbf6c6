"""The CronSchedule admin: expression and its description in plain words, zone, next
five runs, last occurrence and its job's status, paused; actions and buttons Pause,
Resume, Run now and Backfill (its form and page). Adding, changing and deleting dynamic
schedules is in ``schedule_editing``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from .. import observe
from ..exceptions import UnknownJob
from ..models import CronSchedule
from ..values.validation import MAX_NAME_LENGTH
from .actions import Action, Noun, Outcome, each
from .renderers import (
    breakable_name,
    local_time,
    plural,
    pretty_json,
    status_pill,
    warning_badge,
    wrappable_time,
    zone,
)
from .schedule_editing import EditableScheduleAdmin
from .search import fits, search
from .timeline import schedule_log_context

NOT_DEFINED = "no code in this process defines it"
#: One call of ``CronSchedule.backfill`` creates at most this many occurrences.
BACKFILL_LIMIT = 1000

SCHEDULE: Noun[CronSchedule] = Noun("schedule", lambda schedule: schedule.name)
PAUSE = Action("pause", "Pause", "Paused")
RESUME = Action("resume", "Resume", "Resumed")
RUN_NOW = Action("run-now", "Run now", "Enqueued a manual run of {}")
BACKFILL = Action("backfill", "Backfill", "Backfilled")

Step = Callable[[CronSchedule, Outcome[CronSchedule]], None]


def pause(schedule: CronSchedule, outcome: Outcome[CronSchedule]) -> None:
    if schedule.pause():
        outcome.change(schedule)
    else:
        outcome.skip("already paused", schedule)


def resume(schedule: CronSchedule, outcome: Outcome[CronSchedule]) -> None:
    if schedule.resume():
        outcome.change(schedule)
    else:
        outcome.skip("not paused", schedule)


def run_now(schedule: CronSchedule, outcome: Outcome[CronSchedule]) -> None:
    try:
        job = schedule.run_now()
    except UnknownJob:
        outcome.skip(NOT_DEFINED, schedule)
    else:
        outcome.change(schedule, f"job #{job.pk}")


def backfill(
    schedule: CronSchedule, outcome: Outcome[CronSchedule], start: dt.date, end: dt.date
) -> None:
    """The occurrences from 00:00 on ``start`` to 24:00 on ``end``, in the schedule's zone."""
    first, after = backfill_bounds(schedule, start, end)
    try:
        created = schedule.backfill(first, after)
    except UnknownJob:
        outcome.skip(NOT_DEFINED, schedule)
        return
    limit = "; that is the limit of one call: run it again for the rest"
    outcome.change(
        schedule,
        f"created {plural(created, 'occurrence')} from {local_time(first, first.tzinfo)} "
        f"to {local_time(after, after.tzinfo)}; occurrences that already had a row "
        f"were left alone{limit if created >= BACKFILL_LIMIT else ''}",
    )


BUTTONS: list[tuple[Action, Step]] = [(PAUSE, pause), (RESUME, resume), (RUN_NOW, run_now)]


#: The days a backfill can cover: 00:00 on the first day and 24:00 on the last must be
#: instants in every time zone (a zone is less than a day away from UTC), and
#: ``datetime`` ends with the year 9999.
FIRST_DAY = dt.date.min + dt.timedelta(days=1)
LAST_DAY = dt.date.max - dt.timedelta(days=1)


def _day_input() -> forms.DateInput:
    return forms.DateInput(
        attrs={"type": "date", "min": FIRST_DAY.isoformat(), "max": LAST_DAY.isoformat()}
    )


class BackfillForm(forms.Form):
    start = forms.DateField(
        label="From (first day)",
        widget=_day_input(),
        help_text="From 00:00 on this day, in each schedule's own time zone.",
    )
    end = forms.DateField(
        label="To (last day, included)",
        widget=_day_input(),
        help_text="Up to 24:00 on this day, in each schedule's own time zone.",
    )

    def clean_start(self) -> dt.date:
        start: dt.date = self.cleaned_data["start"]
        if start < FIRST_DAY:
            raise forms.ValidationError(
                f"The first day can be {FIRST_DAY.isoformat()} at the earliest: 00:00 on an "
                "earlier day is not a date and time in every time zone."
            )
        return start

    def clean_end(self) -> dt.date:
        end: dt.date = self.cleaned_data["end"]
        if end > LAST_DAY:
            raise forms.ValidationError(
                f"The last day can be {LAST_DAY.isoformat()} at the latest: a backfill runs "
                "to 24:00 on the last day, which must be a date and time in every time zone."
            )
        return end

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end and end < start:
            raise forms.ValidationError("The last day comes before the first day.")
        return data


def backfill_bounds(
    schedule: CronSchedule, start: dt.date, end: dt.date
) -> tuple[dt.datetime, dt.datetime]:
    """[00:00 on ``start``, 00:00 on the day after ``end``) in the schedule's zone."""
    schedule_zone = zone(schedule.tz) or dt.timezone.utc
    first = dt.datetime.combine(start, dt.time(0), tzinfo=schedule_zone)
    after = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(0), tzinfo=schedule_zone)
    return first, after


class ScheduleChangeList(ChangeList):
    """The list's page of schedules, with what each row shows that is not a column: the
    job row of its last occurrence (two subqueries per row of the page, where annotating
    the list's query would run them for every row an OFFSET skips too: a second of
    100,000 schedules' last page) and its next runs (computed once per rule and zone)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        page = list(self.result_list)
        rows = CronSchedule.objects.using(self.queryset.db).filter(
            pk__in=[schedule.pk for schedule in page]
        )
        last = {
            pk: (job_id, status)
            for pk, job_id, status in observe.with_last_occurrence(rows).values_list(  # type: ignore[misc]
                "pk", "last_job_id", "last_job_status"
            )
        }
        now = timezone.now()
        runs: dict[tuple[str, str], list[dt.datetime]] = {}
        for schedule in page:
            schedule.last_job_id, schedule.last_job_status = last.get(schedule.pk, (None, None))
            rule = (schedule.expression, schedule.tz)
            if rule not in runs:
                runs[rule] = observe.next_runs(schedule.expression, schedule.tz, now, 5)
            schedule.next_runs = runs[rule]
        self.result_list = page


class CronScheduleAdmin(EditableScheduleAdmin):
    change_list_template = "django_cronqueue/admin/cronschedule_change_list.html"
    change_form_template = "django_cronqueue/admin/cronschedule_change_form.html"
    # Four columns, so that the list fits beside Django's navigation sidebar and the filters
    # on a 1280-pixel screen: paused, inactive and dynamic are badges under the name, the
    # zone and the description are with the expression.
    list_display = [
        "name_column",
        "rule_column",
        "next_runs_display",
        "last_occurrence_display",
    ]
    list_display_links = ["name_column"]
    list_filter = ["paused", "active", "source"]
    search_fields = ["name"]
    actions = ["pause_schedules", "resume_schedules", "run_schedules_now", "backfill_schedules"]
    code_fields = [
        "name_display",
        "source",
        "job",
        "payload",
        "expression_display",
        "tz",
        "options_display",
        "next_runs_display",
        "last_occurrence_display",
        "cursor",
        "next_run",
        "paused",
        "active",
        "created_at",
        "updated_at",
    ]
    fields = code_fields  # type: ignore[assignment]  # a flat list; mypy sees the wider type
    readonly_fields = code_fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> CronSchedule | None:
        found = super().get_object(request, object_id, from_field)
        if found is None:
            return None
        return observe.with_last_occurrence(self.get_queryset(request).filter(pk=found.pk)).first()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[CronSchedule], search_term: str
    ) -> tuple[QuerySet[CronSchedule], bool]:
        """Each word must be part of the schedule's name."""

        def match(word: str) -> Q | None:
            return Q(name__icontains=word) if fits(word, MAX_NAME_LENGTH) else None

        return search(request, queryset, search_term, match), False

    @admin.display(description="name", ordering="name")
    def name_display(self, schedule: CronSchedule) -> str:
        if schedule.active:
            return schedule.name
        return format_html(
            '{} <span class="cq-badge cq-badge-warning" title="{}">inactive: no code defines '
            "it</span>",
            schedule.name,
            "Never fired while no code defines it.",
        )

    @admin.display(description="name", ordering="name")
    def name_column(self, schedule: CronSchedule) -> str:
        """The name, then whether it is paused or inactive, and a dynamic schedule's job."""
        marks = []
        if schedule.paused:
            marks.append(warning_badge("paused"))
        if not schedule.active:
            marks.append(
                format_html(
                    '<span class="cq-badge cq-badge-warning" title="{}">inactive: no code '
                    "defines it</span>",
                    "Never fired while no code defines it.",
                )
            )
        if schedule.is_dynamic:
            marks.append(
                format_html(
                    '<span class="cq-quiet">{}, runs {}</span>',
                    schedule.get_source_display(),
                    breakable_name(schedule.job),
                )
            )
        return format_html(
            "{}{}",
            breakable_name(schedule.name),
            format_html_join("", '<div class="cq-marks">{}</div>', ((mark,) for mark in marks)),
        )

    @admin.display(description="expression, time zone")
    def rule_column(self, schedule: CronSchedule) -> str:
        description = observe.describe_expression(schedule.expression)
        return format_html(
            '<code class="cq-expression cq-nowrap">{}</code> {}<div class="cq-quiet">{}</div>',
            schedule.expression,
            breakable_name(schedule.tz, "/"),
            description,
        )

    @admin.display(description="expression")
    def expression_display(self, schedule: CronSchedule) -> str:
        description = observe.describe_expression(schedule.expression)
        return format_html(
            '<code class="cq-expression">{}</code><div class="cq-quiet">{}</div>',
            schedule.expression,
            description,
        )

    @admin.display(description="next five runs (schedule's time zone)")
    def next_runs_display(self, schedule: CronSchedule) -> str:
        if not schedule.active:
            return "-"
        runs = getattr(schedule, "next_runs", None)  # the list's, computed once per rule
        if runs is None:
            runs = observe.next_runs(schedule.expression, schedule.tz, timezone.now(), 5)
        if not runs:
            return "none"
        schedule_zone = zone(schedule.tz)
        return format_html(
            '<ol class="cq-runs{}">{}</ol>',
            " cq-paused" if schedule.paused else "",
            format_html_join(
                "", "<li>{}</li>", ((local_time(run, schedule_zone),) for run in runs)
            ),
        )

    @admin.display(description="last occurrence")
    def last_occurrence_display(self, schedule: CronSchedule) -> str:
        if schedule.last_occurrence is None:
            return "-"
        when = wrappable_time(schedule.last_occurrence, zone(schedule.tz))
        job_id = getattr(schedule, "last_job_id", None)
        status = getattr(schedule, "last_job_status", None)
        if job_id is None:
            return format_html("{} (no job row: pruned)", when)
        url = reverse(
            "admin:django_cronqueue_job_change", args=[job_id], current_app=self.admin_site.name
        )
        return format_html(
            '{} <a href="{}">#{}</a> {}',
            when,
            url,
            job_id,
            status_pill(status),
        )

    @admin.display(description="options")
    def options_display(self, schedule: CronSchedule) -> str:
        return pretty_json(schedule.options)

    # -- actions (list) and buttons (detail)

    def _act(
        self,
        request: HttpRequest,
        action: Action,
        schedules: Iterable[CronSchedule],
        step: Step,
    ) -> None:
        self.announce(request, action, SCHEDULE, each(schedules, step))

    def _one(self, action: Action, step: Step) -> Callable[[HttpRequest, CronSchedule], None]:
        """A detail page button's handler: the action on that one schedule."""

        def handler(request: HttpRequest, schedule: CronSchedule) -> None:
            self._act(request, action, [schedule], step)

        return handler

    def _button(self, schedule: CronSchedule, action: Action) -> dict[str, str]:
        return {
            "label": action.label,
            "url": self.url_of(schedule, action.key.replace("-", "")),
            "class": "",
        }

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._act(request, PAUSE, queryset, pause)

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._act(request, RESUME, queryset, resume)

    @admin.action(description="Run selected schedules now (one manual run)", permissions=["change"])
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._act(request, RUN_NOW, queryset, run_now)

    @admin.action(description="Backfill selected schedules…", permissions=["change"])
    def backfill_schedules(
        self, request: HttpRequest, queryset: QuerySet[CronSchedule]
    ) -> HttpResponse | None:
        schedules = list(queryset)
        form = BackfillForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._backfill(request, schedules, form.cleaned_data["start"], form.cleaned_data["end"])
            return None
        return self.backfill_page(request, schedules, form, from_action=True)

    def _backfill(
        self, request: HttpRequest, schedules: list[CronSchedule], start: dt.date, end: dt.date
    ) -> None:
        def step(schedule: CronSchedule, outcome: Outcome[CronSchedule]) -> None:
            backfill(schedule, outcome, start, end)

        self._act(request, BACKFILL, schedules, step)

    def backfill_page(
        self,
        request: HttpRequest,
        schedules: list[CronSchedule],
        form: BackfillForm,
        *,
        from_action: bool,
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Backfill cron schedules",
            "opts": self.opts,
            "schedules": schedules,
            "form": form,
            "from_action": from_action,
            # django.contrib.admin does import helpers; django-stubs does not declare it
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,  # type: ignore[attr-defined]
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "django_cronqueue/admin/backfill.html", context)

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            return self.missing_object(request, object_id)
        if not self.has_change_permission(request, schedule):
            raise PermissionDenied
        if request.method == "POST":
            form = BackfillForm(request.POST)
            if form.is_valid():
                self._backfill(
                    request, [schedule], form.cleaned_data["start"], form.cleaned_data["end"]
                )
                return HttpResponseRedirect(self.change_url(schedule))
        else:
            form = BackfillForm()
        return self.backfill_page(request, [schedule], form, from_action=False)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        schedule = self.get_object(request, unquote(object_id)) if request.method == "GET" else None
        if schedule is not None and self.has_change_permission(request, schedule):
            buttons = [
                self._button(schedule, RESUME if schedule.paused else PAUSE),
            ]
            if schedule.active:
                buttons.append(self._button(schedule, RUN_NOW))
            context["cq_buttons"] = buttons
            if schedule.active:
                context["cq_backfill_url"] = self.url_of(schedule, "backfill")
        if schedule is not None:
            context.update(schedule_log_context(schedule))
        context["dashboard_url"] = self.dashboard_url()
        return super().change_view(request, object_id, form_url, context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "dashboard_url": self.dashboard_url(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            return self.admin_site.admin_view(view)

        def button(
            key: str, handler: Callable[[HttpRequest, CronSchedule], None]
        ) -> Callable[..., HttpResponse]:
            def view(request: HttpRequest, object_id: str) -> HttpResponse:
                return self.object_button_view(
                    request, object_id, lambda schedule: handler(request, schedule)
                )

            return view

        info = self.opts.app_label, self.opts.model_name
        handlers = {action.key: self._one(action, step) for action, step in BUTTONS}
        return [
            *(
                path(
                    f"<path:object_id>/{key}/",
                    wrap(button(key, handler)),
                    name=f"{info[0]}_{info[1]}_{key.replace('-', '')}",
                )
                for key, handler in handlers.items()
            ),
            path(
                "<path:object_id>/backfill/",
                wrap(self.backfill_view),
                name=f"{info[0]}_{info[1]}_backfill",
            ),
            *super().get_urls(),
        ]
