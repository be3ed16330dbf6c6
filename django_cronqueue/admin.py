"""The Django admin for jobs and cron schedules, and the queue dashboard.

Operators see and steer; they never edit a row. Every state change is a CSRF-protected
POST that needs the ``change_job`` (or ``change_cronschedule``) permission and goes
through the library's own methods (``job.retry()``, ``job.cancel()``, ``job.run_now()``,
``schedule.pause()``, ``resume()``, ``run_now()``, ``backfill()``). Every text shown is
escaped (``format_html`` and templates). The job list stays fast on millions of rows:
constant query count, one aggregate for the status counts, and no COUNT(*) over the
whole table (see ``JobPaginator``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Model, Q, QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.text import smart_split, unescape_string_literal
from django.utils.timesince import timesince, timeuntil

from . import dashboard
from .conf import database_alias
from .exceptions import UnknownJob
from .models import CronSchedule, Job, JobStatus, Worker
from .registry import registry

STATUS_LABELS = dict(JobStatus.choices)
UNSUCCESSFUL = [status for status in JobStatus.values if status != JobStatus.SUCCEEDED]
RECENT_WINDOWS = {"1h": dt.timedelta(hours=1), "24h": dt.timedelta(hours=24)}
ERROR_CHARS = 90
MAX_IDS_IN_MESSAGE = 10
ORPHAN_HELP = (
    "No code in this process defines a job of this name: it was renamed or removed, or its "
    "module is not imported. Workers leave its pending rows alone."
)


# --- small renderers (all escaping through format_html) -----------------------------


def status_pill(status: str | None) -> str:
    if not status:
        return "-"
    return format_html(
        '<span class="cq-status cq-status-{}">{}</span>',
        status,
        STATUS_LABELS.get(status, status),
    )


def orphan_badge() -> str:
    return format_html(
        '<span class="cq-badge cq-badge-warning" title="{}">no code defines this job</span>',
        ORPHAN_HELP,
    )


def local_time(instant: dt.datetime | None, zone: Any = None) -> str:
    """An instant as ``Mon 2026-06-01 02:30 EDT`` in ``zone`` (default: the current one)."""
    if instant is None:
        return "-"
    local = instant.astimezone(zone) if zone is not None else timezone.localtime(instant)
    return local.strftime("%a %Y-%m-%d %H:%M %Z")


def compact_time(instant: dt.datetime | None) -> str:
    """``2026-06-01 02:30:00`` in the current zone, the full instant in its tooltip."""
    if instant is None:
        return "-"
    local = timezone.localtime(instant)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        instant.isoformat(),
        local.strftime("%a %Y-%m-%d %H:%M:%S %Z"),
        local.strftime("%Y-%m-%d %H:%M:%S"),
    )


def detail_time(instant: dt.datetime | None) -> str:
    """``Sun 2026-11-29 17:38:12 UTC (3 minutes ago)`` in the current zone."""
    if instant is None:
        return "-"
    local = timezone.localtime(instant)
    return format_html(
        '<time datetime="{}">{}</time> <span class="cq-quiet">({})</span>',
        instant.isoformat(),
        local.strftime("%a %Y-%m-%d %H:%M:%S %Z"),
        relative(instant, timezone.now()),
    )


def relative(instant: dt.datetime, now: dt.datetime) -> str:
    seconds = (instant - now).total_seconds()
    if abs(seconds) < 60:
        return f"in {seconds:.0f} s" if seconds >= 0 else f"{-seconds:.0f} s ago"
    if seconds > 0:
        return f"in {timeuntil(instant, now, depth=1)}"
    return f"{timesince(instant, now, depth=1)} ago"


def ids_text(ids: list[int]) -> str:
    shown = ", ".join(f"#{pk}" for pk in ids[:MAX_IDS_IN_MESSAGE])
    more = len(ids) - MAX_IDS_IN_MESSAGE
    return f"{shown} and {more} more" if more > 0 else shown


def search_word(bit: str) -> str:
    """A word of a search, its quotes removed as Django's admin search does."""
    if len(bit) >= 2 and bit[0] in "\"'" and bit[0] == bit[-1]:
        return unescape_string_literal(bit)
    return bit


def done(verb: str, what: str) -> str:
    """``done("Retried", "2 jobs")`` -> "Retried 2 jobs"; a ``{}`` in the verb places it."""
    return verb.format(what) if "{}" in verb else f"{verb} {what}"


def count_text(n: int, more: bool = False) -> str:
    return f"{n:,}+" if more else f"{n:,}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- the job actions ----------------------------------------------------------------


@dataclass(frozen=True)
class JobAction:
    key: str
    label: str
    verb: str
    applies_to: frozenset[str]
    applies_text: str
    button_class: str = ""


JOB_ACTIONS = {
    action.key: action
    for action in (
        JobAction(
            "retry",
            "Retry",
            "Retried",
            frozenset({JobStatus.FAILED, JobStatus.CANCELLED}),
            "only failed or cancelled jobs can be retried",
            "cq-primary",
        ),
        JobAction(
            "cancel",
            "Cancel",
            "Cancelled",
            frozenset({JobStatus.PENDING}),
            "only pending jobs can be cancelled",
            "cq-danger",
        ),
        JobAction(
            "run_now",
            "Run now",
            "Made {} due now",
            frozenset({JobStatus.PENDING}),
            "only pending jobs can be run now",
        ),
    )
}


@dataclass
class Outcome:
    """What an action changed, and what it skipped and why."""

    changed: list[int] = field(default_factory=list)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    changed_objects: list[Any] = field(default_factory=list, repr=False)

    def skip(self, reason: str, pk: int) -> None:
        self.skipped.setdefault(reason, []).append(pk)

    @property
    def skipped_count(self) -> int:
        return sum(len(ids) for ids in self.skipped.values())


def apply_job_action(action: JobAction, jobs: Iterable[Job], *, reason: str = "") -> Outcome:
    """Run one lifecycle method per job; collect what changed and why the rest did not."""
    outcome = Outcome()
    lost: list[Job] = []
    for job in jobs:
        if job.status not in action.applies_to:
            outcome.skip(f"{job.status}: {action.applies_text}", job.pk)
            continue
        ok = job.cancel(reason=reason) if action.key == "cancel" else getattr(job, action.key)()
        if ok:
            outcome.changed.append(job.pk)
            outcome.changed_objects.append(job)
        else:
            lost.append(job)
    if lost:  # it was applicable when read: find out what got in the way
        now_status = dict(
            dashboard.jobs().filter(pk__in=[job.pk for job in lost]).values_list("pk", "status")
        )
        for job in lost:
            status = now_status.get(job.pk)
            if status is None:
                outcome.skip("deleted meanwhile", job.pk)
            elif status != job.status:
                outcome.skip(f"changed meanwhile (now {status})", job.pk)
            elif action.key == "retry":
                outcome.skip(
                    "another pending or running job of the same name holds its dedupe key",
                    job.pk,
                )
            else:
                outcome.skip("refused by the lifecycle", job.pk)
    return outcome


# --- shared read-only behaviour -----------------------------------------------------


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows are shown, never edited: no add, no delete, no save. State changes are
    the explicit actions and buttons, each a POST checked against the change
    permission."""

    show_facets = admin.ShowFacets.NEVER

    class Media:
        css = {"all": ["django_cronqueue/admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(database_alias())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST":
            # The form is read-only; saving it would write the whole row behind the
            # lifecycle's back (and could undo a worker's concurrent change).
            return HttpResponseNotAllowed(["GET"])
        context = {
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            **(extra_context or {}),
        }
        return super().changeform_view(request, object_id, form_url, context)

    def object_button_view(
        self, request: HttpRequest, object_id: str, handler: Callable[[Any], object]
    ) -> HttpResponse:
        """A detail page button: POST only, change permission on that object."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            # Django's own helper for a missing object; private, so django-stubs lacks it.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        handler(obj)
        return HttpResponseRedirect(self.change_url(obj))

    def change_url(self, obj: Model) -> str:
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=[quote(obj.pk)],
            current_app=self.admin_site.name,
        )

    def button_url(self, obj: Model, key: str) -> str:
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_{key}",
            args=[quote(obj.pk)],
            current_app=self.admin_site.name,
        )

    def log_changes(self, request: HttpRequest, objects: list[Any], message: str) -> None:
        """An admin history entry (LogEntry) per changed object, in bulk."""
        from django.contrib.admin.models import CHANGE, LogEntry

        for start in range(0, len(objects), 500):
            LogEntry.objects.log_actions(
                # the admin's actions run for a logged-in staff user, whose pk is set
                user_id=request.user.pk,  # type: ignore[arg-type]
                queryset=objects[start : start + 500],
                action_flag=CHANGE,
                change_message=message,
            )

    def report(self, request: HttpRequest, verb: str, noun: str, outcome: Outcome) -> None:
        """One message for what changed, one per reason for what was skipped."""
        if outcome.changed:
            self.message_user(
                request,
                f"{done(verb, plural(len(outcome.changed), noun))}: {ids_text(outcome.changed)}.",
                messages.SUCCESS,
            )
        for reason, ids in outcome.skipped.items():
            self.message_user(
                request,
                f"Skipped {plural(len(ids), noun)} ({reason}): {ids_text(ids)}.",
                messages.WARNING,
            )
        if not outcome.changed and not outcome.skipped:
            self.message_user(request, f"No {noun} was selected.", messages.WARNING)


# --- jobs ---------------------------------------------------------------------------


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(JobStatus.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() in JobStatus.values:
            return queryset.filter(status=self.value())
        return queryset


class FailedRecentlyFilter(admin.SimpleListFilter):
    title = "failed recently"
    parameter_name = "failed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1h", "In the last hour"), ("24h", "In the last 24 hours")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        window = RECENT_WINDOWS.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(status=JobStatus.FAILED, finished_at__gte=timezone.now() - window)


class DistinctValueFilter(admin.SimpleListFilter):
    """Choices are the column's distinct values, read by walking its index."""

    column = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = dashboard.distinct_values(self.column)
        return [(value, self.label(value)) for value in values]

    def label(self, value: str) -> str:
        return value

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value():
            return queryset.filter(**{self.column: self.value()})
        return queryset


class NameFilter(DistinctValueFilter):
    title = "name"
    parameter_name = column = "name"

    def label(self, value: str) -> str:
        return value if value in registry else f"{value} (no code)"


class QueueFilter(DistinctValueFilter):
    title = "queue"
    parameter_name = column = "queue"


class JobPaginator(Paginator):
    """Never counts a whole large table. An unfiltered list of a large table takes the
    database's own row estimate (PostgreSQL ``reltuples``, MariaDB/MySQL
    ``TABLE_ROWS``); any other list counts at most ``dashboard.COUNT_CAP`` rows and
    says "more than" beyond that."""

    is_estimate = False
    is_lower_bound = False

    @cached_property
    def count(self) -> int:
        # the admin paginates a QuerySet; django-stubs types object_list as a protocol
        estimate = dashboard.estimated_count(self.object_list)  # type: ignore[arg-type]
        if estimate is not None and estimate >= dashboard.ESTIMATE_ABOVE:
            self.is_estimate = True
            return estimate
        n, self.is_lower_bound = dashboard.capped_count(self.object_list)  # type: ignore[arg-type]
        return n

    @property
    def count_display(self) -> str:
        return f"{self.count:,}"


class JobChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        # The list needs neither payloads nor tracebacks, and only the head of the error.
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer("payload", "traceback", "result", "last_error")
            .annotate(error_head=Substr("last_error", 1, ERROR_CHARS * 2))
        )


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    change_list_template = "django_cronqueue/admin/job_change_list.html"
    change_form_template = "django_cronqueue/admin/job_change_form.html"
    list_display = [
        "id",
        "status_display",
        "name_display",
        "queue",
        "attempts_display",
        "run_at_display",
        "scheduled_for_display",
        "error_display",
    ]
    list_display_links = ["id"]
    list_filter = [StatusFilter, FailedRecentlyFilter, NameFilter, QueueFilter]
    search_fields = ["=id", "name", "=dedupe_key", "last_error"]  # see get_search_results
    search_help_text = (
        "A job id, an exact dedupe key, part of a name, or part of the error (of jobs that "
        "did not succeed, unless the list is filtered by status)."
    )
    sortable_by = ["id"]  # sorting by other columns would sort the whole table
    show_full_result_count = False
    paginator = JobPaginator
    list_per_page = 100
    actions = ["retry_jobs", "cancel_jobs", "run_jobs_now"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name_display",
                    "status_display",
                    "queue",
                    "priority",
                    "attempts_display",
                    "dedupe_key",
                    "schedule_display",
                ]
            },
        ),
        (
            "When",
            {"fields": ["created", "due", "occurrence", "started", "finished"]},
        ),
        ("Lease", {"fields": ["lease_holder", "lease_expiry"]}),
        ("Payload and result", {"fields": ["payload_display", "result_display"]}),
        ("Last failure", {"fields": ["full_error", "traceback_display"]}),
    ]
    readonly_fields = [
        "name_display",
        "status_display",
        "queue",
        "priority",
        "attempts_display",
        "dedupe_key",
        "schedule_display",
        "created",
        "due",
        "occurrence",
        "started",
        "finished",
        "lease_holder",
        "lease_expiry",
        "payload_display",
        "result_display",
        "full_error",
        "traceback_display",
    ]

    # -- list columns

    @admin.display(description="status")
    def status_display(self, job: Job) -> str:
        return status_pill(job.status)

    @admin.display(description="name")
    def name_display(self, job: Job) -> str:
        if job.name in registry:
            return job.name
        return format_html("{} {}", job.name, orphan_badge())

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="run at")
    def run_at_display(self, job: Job) -> str:
        return compact_time(job.run_at)

    @admin.display(description="scheduled for")
    def scheduled_for_display(self, job: Job) -> str:
        return compact_time(job.scheduled_for)

    @admin.display(description="last error")
    def error_display(self, job: Job) -> str:
        text = getattr(job, "error_head", None)
        if text is None:
            text = job.last_error
        line = text.strip().splitlines()[0] if text.strip() else ""
        if not line:
            return ""
        short = line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"
        return format_html('<span class="cq-error" title="{}">{}</span>', line, short)

    # -- detail fields

    @admin.display(description="schedule")
    def schedule_display(self, job: Job) -> str:
        schedule = dashboard.schedules().filter(name=job.name).only("pk", "name", "tz").first()
        if schedule is None:
            return "-" if job.scheduled_for is None else "an occurrence of a schedule since removed"
        link = format_html(
            '<a href="{}">{}</a>',
            reverse(
                "admin:django_cronqueue_cronschedule_change",
                args=[quote(schedule.pk)],
                current_app=self.admin_site.name,
            ),
            schedule.name,
        )
        if job.scheduled_for is None:
            return format_html("a manual run of the cron schedule {}", link)
        return format_html(
            "the occurrence at {} of the cron schedule {}",
            local_time(job.scheduled_for, _zone(schedule.tz)),
            link,
        )

    @admin.display(description="created")
    def created(self, job: Job) -> str:
        return detail_time(job.created_at)

    @admin.display(description="run at")
    def due(self, job: Job) -> str:
        return detail_time(job.run_at)

    @admin.display(description="scheduled for")
    def occurrence(self, job: Job) -> str:
        return detail_time(job.scheduled_for)

    @admin.display(description="started (last attempt)")
    def started(self, job: Job) -> str:
        return detail_time(job.started_at)

    @admin.display(description="finished")
    def finished(self, job: Job) -> str:
        return detail_time(job.finished_at)

    @admin.display(description="lease expiry")
    def lease_expiry(self, job: Job) -> str:
        return detail_time(job.locked_until)

    @admin.display(description="lease holder")
    def lease_holder(self, job: Job) -> str:
        if not job.worker_id:
            return "-"
        if job.status != JobStatus.RUNNING:
            return format_html("none (last run by {})", job.worker_id)
        worker = (
            Worker.objects.using(database_alias())
            .filter(pk=job.worker_id)
            .values_list("hostname", "pid", "last_seen")
            .first()
        )
        if worker is None:
            return format_html("{} (no heartbeat row: the worker has stopped)", job.worker_id)
        hostname, pid, last_seen = worker
        return format_html(
            "{} (host {}, pid {}, heartbeat {})",
            job.worker_id,
            hostname,
            pid,
            relative(last_seen, timezone.now()),
        )

    @admin.display(description="payload")
    def payload_display(self, job: Job) -> str:
        text = json.dumps(job.payload, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="cq-pre">{}</pre>', text)

    @admin.display(description="result")
    def result_display(self, job: Job) -> str:
        if job.result is None:
            return "-"
        text = json.dumps(job.result, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="cq-pre">{}</pre>', text)

    @admin.display(description="last error")
    def full_error(self, job: Job) -> str:
        if not job.last_error:
            return "-"
        return format_html('<pre class="cq-pre cq-error">{}</pre>', job.last_error)

    @admin.display(description="traceback")
    def traceback_display(self, job: Job) -> str:
        if not job.traceback:
            return "-"
        return format_html('<pre class="cq-pre cq-traceback">{}</pre>', job.traceback)

    # -- list page

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Each word must match a job's id or dedupe key (exactly: index lookups), a name
        (by substring, matched against the few distinct names, then looked up by index),
        or its error text (by substring). Django's default would compare ``UPPER(id::text)``
        and scan every row for each field; here only the error text is scanned, and
        unless the list is filtered by status, only among jobs that did not succeed
        (found through the status index), so a search stays fast on millions of rows."""
        words = [search_word(bit) for bit in smart_split(search_term)]
        words = [word for word in words if word]
        if not words:
            return queryset, False
        names = dashboard.distinct_values("name")
        status_filtered = bool(request.GET.get("status") or request.GET.get("failed"))
        for word in words:
            lowered = word.lower()
            match = Q(dedupe_key=word)
            if word.isdigit() and len(word) < 19:
                match |= Q(pk=int(word))
            matching_names = [name for name in names if lowered in name.lower()]
            if matching_names:
                match |= Q(name__in=matching_names)
            error = Q(last_error__icontains=word)
            if not status_filtered:
                error &= Q(status__in=UNSUCCESSFUL)
            queryset = queryset.filter(match | error)
        return queryset, False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**self.status_count_links(request), **(extra_context or {})}
        context["dashboard_url"] = reverse(
            "admin:django_cronqueue_job_dashboard", current_app=self.admin_site.name
        )
        return super().changelist_view(request, context)

    def status_count_links(self, request: HttpRequest) -> dict[str, Any]:
        """Counts per status (one GROUP BY), within the name and queue filters if set;
        each links to the list filtered by that status."""
        if not self.has_view_permission(request):
            return {}
        keep = {key: request.GET[key] for key in ("name", "queue") if request.GET.get(key)}
        queryset = self.get_queryset(request).filter(**keep)
        counts, capped = dashboard.capped_status_counts(queryset)
        current = request.GET.get("status", "")
        links = [
            {
                "status": status,
                "label": label,
                "count": counts[status],
                "display": count_text(counts[status], status in capped),
                "url": "?" + urlencode({**keep, "status": status}),
                "current": current == status,
            }
            for status, label in JobStatus.choices
        ]
        return {
            "cq_status_counts": links,
            "cq_total": sum(counts.values()),
            "cq_total_display": count_text(sum(counts.values()), bool(capped)),
            "cq_all_url": "?" + urlencode(keep),
            "cq_all_current": not current,
            "cq_scope": ", ".join(f"{key} {value}" for key, value in keep.items()),
        }

    # -- actions (list) and buttons (detail)

    def _run(self, request: HttpRequest, key: str, jobs: Iterable[Job]) -> Outcome:
        action = JOB_ACTIONS[key]
        outcome = apply_job_action(
            action, jobs, reason=f"cancelled in the admin by {request.user.get_username()}"
        )
        self.report(request, action.verb, "job", outcome)
        self.log_changes(request, outcome.changed_objects, f"{action.label} (admin action)")
        return outcome

    def _selected(self, queryset: QuerySet[Job]) -> Iterable[Job]:
        return (
            queryset.order_by("pk")
            .only("pk", "name", "status", "dedupe_key")
            .iterator(chunk_size=500)
        )

    @admin.action(description="Retry selected jobs (failed or cancelled)", permissions=["change"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._run(request, "retry", self._selected(queryset))

    @admin.action(description="Cancel selected jobs (pending)", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._run(request, "cancel", self._selected(queryset))

    @admin.action(description="Run selected jobs now (pending)", permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._run(request, "run_now", self._selected(queryset))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        job = self.get_object(request, unquote(object_id)) if request.method == "GET" else None
        if job is not None:
            can_change = self.has_change_permission(request, job)
            context["cq_buttons"] = [
                {
                    "label": action.label,
                    "url": self.button_url(job, action.key.replace("_", "")),
                    "class": action.button_class,
                }
                for action in JOB_ACTIONS.values()
                if can_change and job.status in action.applies_to
            ]
            context["cq_can_change"] = can_change
            context["cq_orphan"] = job.name not in registry
        context["dashboard_url"] = reverse(
            "admin:django_cronqueue_job_dashboard", current_app=self.admin_site.name
        )
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list[Any]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            return self.admin_site.admin_view(view)

        def button(key: str) -> Callable[..., HttpResponse]:
            def view(request: HttpRequest, object_id: str) -> HttpResponse:
                return self.object_button_view(
                    request, object_id, lambda job: self._run(request, key, [job])
                )

            return view

        info = self.opts.app_label, self.opts.model_name
        return [
            path("dashboard/", wrap(self.dashboard_view), name=f"{info[0]}_{info[1]}_dashboard"),
            *(
                path(
                    f"<path:object_id>/{key.replace('_', '-')}/",
                    wrap(button(key)),
                    name=f"{info[0]}_{info[1]}_{key.replace('_', '')}",
                )
                for key in JOB_ACTIONS
            ),
            *super().get_urls(),
        ]

    # -- the dashboard

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = timezone.now()
        chart = dashboard.hourly_outcomes(now)
        workers, silent = dashboard.live_workers(now)
        oldest = dashboard.oldest_pending(now)
        changelist = reverse(
            "admin:django_cronqueue_job_changelist", current_app=self.admin_site.name
        )
        schedule_admin = self.admin_site._registry.get(CronSchedule)
        can_see_schedules = schedule_admin is not None and schedule_admin.has_view_permission(
            request
        )
        schedules = [
            {
                "row": row.schedule,
                "description": row.description,
                "next_runs": [
                    {
                        "local": local_time(instant, instant.tzinfo),
                        "relative": relative(instant, now),
                    }
                    for instant in row.next_runs
                ],
                "last": local_time(row.schedule.last_occurrence, _zone(row.schedule.tz))
                if row.schedule.last_occurrence
                else "",
                "last_status": status_pill(getattr(row.schedule, "last_job_status", None)),
                "url": reverse(
                    "admin:django_cronqueue_cronschedule_change",
                    args=[quote(row.schedule.pk)],
                    current_app=self.admin_site.name,
                )
                if can_see_schedules
                else "",
            }
            for row in dashboard.schedule_overview(now)
        ]
        counts, capped = dashboard.capped_status_counts()
        ticks = [
            {
                "x": round(i * chart.bar_width, 2),
                "label": timezone.localtime(hour).strftime("%H:00"),
            }
            for i, hour in enumerate(chart.hours)
            if i % 3 == 0
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Job queue dashboard",
            "opts": self.opts,
            "now": now,
            "chart": chart,
            "charts": [
                {"line": line, "svg": chart_svg(chart, line, ticks)} for line in chart.series
            ],
            "queues": dashboard.queue_depths(now),
            "oldest": oldest,
            "oldest_age": timesince(oldest.run_at, now, depth=2) if oldest else "",
            "workers": [
                {
                    "worker": live.worker,
                    "running": live.running,
                    "seen": relative(live.worker.last_seen, now),
                    "up": timesince(live.worker.started_at, now, depth=2),
                    "queues": ", ".join(live.worker.queues) if live.worker.queues else "all",
                }
                for live in workers
            ],
            "silent_workers": silent,
            "schedules": schedules,
            "status_counts": [
                {
                    "status": status,
                    "label": label,
                    "count": count_text(counts[status], status in capped),
                    "url": f"{changelist}?status={status}",
                }
                for status, label in JobStatus.choices
            ],
            "changelist_url": changelist,
            "failed_recently_url": f"{changelist}?failed=24h",
            "failed_recently": dashboard.failed_since(now),
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "django_cronqueue/admin/dashboard.html", context)


def chart_svg(chart: dashboard.Chart, line: dashboard.NameSeries, ticks: list[Any]) -> str:
    """One job name's hourly bars as inline SVG: numbers written by Python (never
    localized: no decimal commas in coordinates), every text escaped by format_html."""
    full = chart.height + 14

    def bar_rect(x: float, y: float, width: float, height: float, kind: str) -> str:
        return format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" class="cq-bar-{}"></rect>',
            x,
            y,
            width,
            height,
            kind,
        )

    bars = format_html_join(
        "",
        '<g><title>{}</title><rect x="{}" y="0" width="{}" height="{}" class="cq-hover"></rect>'
        "{}{}</g>",
        (
            (
                f"{bar.label}: {bar.succeeded} succeeded, {bar.failed} failed",
                bar.x,
                bar.slot_width,
                chart.height,
                bar_rect(bar.x, bar.succeeded_y, bar.width, bar.succeeded_height, "succeeded")
                if bar.succeeded
                else "",
                bar_rect(bar.x, bar.failed_y, bar.width, bar.failed_height, "failed")
                if bar.failed
                else "",
            )
            for bar in line.bars
        ),
    )
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" class="cq-tick">{}</text>',
        ((tick["x"], chart.height + 12, tick["label"]) for tick in ticks),
    )
    return format_html(
        '<svg class="cq-chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="{}: {} succeeded and {} failed in the last 24 hours">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" class="cq-axis"></line>{}{}</svg>',
        chart.width,
        full,
        chart.width,
        full,
        line.name,
        line.succeeded,
        line.failed,
        chart.height,
        chart.width,
        chart.height,
        bars,
        labels,
    )


def _zone(name: str) -> Any:
    from . import cron

    try:
        return cron.load_zone(name)
    except cron.InvalidTimeZone:
        return None


# --- cron schedules -----------------------------------------------------------------


NOT_DEFINED = "no code in this process defines it"
RUN_NOW = "Enqueued a manual run of {}"


@dataclass(frozen=True)
class Step:
    """What an action did to one schedule: changed (``text`` says how, for the message
    and the history) or skipped (``text`` says why)."""

    changed: bool
    text: str = ""


class BackfillForm(forms.Form):
    start = forms.DateField(
        label="From (first day)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="From 00:00 on this day, in each schedule's own time zone.",
    )
    end = forms.DateField(
        label="To (last day, included)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Up to 24:00 on this day, in each schedule's own time zone.",
    )

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
    zone = _zone(schedule.tz) or dt.timezone.utc
    first = dt.datetime.combine(start, dt.time(0), tzinfo=zone)
    after = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(0), tzinfo=zone)
    return first, after


@admin.register(CronSchedule)
class CronScheduleAdmin(ReadOnlyAdmin):
    change_list_template = "django_cronqueue/admin/cronschedule_change_list.html"
    change_form_template = "django_cronqueue/admin/cronschedule_change_form.html"
    list_display = [
        "name_display",
        "expression_display",
        "tz",
        "next_runs_display",
        "last_occurrence_display",
        "paused_display",
        "active",
    ]
    list_display_links = ["name_display"]
    list_filter = ["paused", "active"]
    search_fields = ["name"]
    actions = ["pause_schedules", "resume_schedules", "run_schedules_now", "backfill_schedules"]
    fields = [
        "name_display",
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
    # a flat list of names, which readonly_fields accepts; mypy sees fieldsets' wider type
    readonly_fields = fields  # type: ignore[assignment]

    def get_queryset(self, request: HttpRequest) -> QuerySet[CronSchedule]:
        return dashboard.with_last_occurrence(super().get_queryset(request))

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

    @admin.display(description="expression")
    def expression_display(self, schedule: CronSchedule) -> str:
        description = dashboard.describe_expression(schedule.expression)
        return format_html(
            '<code class="cq-expression">{}</code><div class="cq-quiet">{}</div>',
            schedule.expression,
            description,
        )

    @admin.display(description="next five runs (schedule's time zone)")
    def next_runs_display(self, schedule: CronSchedule) -> str:
        if not schedule.active:
            return "-"
        runs = dashboard.next_runs(schedule, timezone.now(), 5)
        if not runs:
            return "none"
        return format_html(
            '<ol class="cq-runs{}">{}</ol>',
            " cq-paused" if schedule.paused else "",
            format_html_join("", "<li>{}</li>", ((local_time(run, run.tzinfo),) for run in runs)),
        )

    @admin.display(description="last occurrence")
    def last_occurrence_display(self, schedule: CronSchedule) -> str:
        if schedule.last_occurrence is None:
            return "-"
        when = local_time(schedule.last_occurrence, _zone(schedule.tz))
        job_id = getattr(schedule, "last_job_id", None)
        status = getattr(schedule, "last_job_status", None)
        if job_id is None:
            return format_html("{} (no job row: pruned)", when)
        url = reverse(
            "admin:django_cronqueue_job_change", args=[job_id], current_app=self.admin_site.name
        )
        return format_html('{} <a href="{}">#{}</a> {}', when, url, job_id, status_pill(status))

    @admin.display(description="paused", ordering="paused")
    def paused_display(self, schedule: CronSchedule) -> str:
        if schedule.paused:
            return format_html('<span class="cq-badge cq-badge-warning">{}</span>', "paused")
        return "-"

    @admin.display(description="options")
    def options_display(self, schedule: CronSchedule) -> str:
        text = json.dumps(schedule.options, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="cq-pre">{}</pre>', text)

    # -- actions

    def _each(
        self,
        request: HttpRequest,
        schedules: Iterable[CronSchedule],
        verb: str,
        do: Callable[[CronSchedule], Step],
        label: str,
    ) -> None:
        """Apply ``do`` (the action called ``label``) to each schedule: one message for
        the changed ones, one per reason for the skipped ones, and a history entry per
        changed schedule."""
        changed: list[str] = []
        skipped: dict[str, list[str]] = {}
        for schedule in schedules:
            step = do(schedule)
            if step.changed:
                changed.append(f"{schedule.name} ({step.text})" if step.text else schedule.name)
                history = f"{label} (admin action)" + (f": {step.text}" if step.text else "")
                self.log_changes(request, [schedule], history)
            else:
                skipped.setdefault(step.text, []).append(schedule.name)
        if changed:
            self.message_user(
                request,
                f"{done(verb, plural(len(changed), 'schedule'))}: {', '.join(changed)}.",
                messages.SUCCESS,
            )
        for reason, names in skipped.items():
            self.message_user(
                request,
                f"Skipped {plural(len(names), 'schedule')} ({reason}): {', '.join(names)}.",
                messages.WARNING,
            )

    def _pause(self, schedule: CronSchedule) -> Step:
        return Step(True) if schedule.pause() else Step(False, "already paused")

    def _resume(self, schedule: CronSchedule) -> Step:
        return Step(True) if schedule.resume() else Step(False, "not paused")

    def _run_now(self, schedule: CronSchedule) -> Step:
        try:
            job = schedule.run_now()
        except UnknownJob:
            return Step(False, NOT_DEFINED)
        return Step(True, f"job #{job.pk}")

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, "Paused", self._pause, "Pause")

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, "Resumed", self._resume, "Resume")

    @admin.action(description="Run selected schedules now (one manual run)", permissions=["change"])
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, RUN_NOW, self._run_now, "Run now")

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
        def do(schedule: CronSchedule) -> Step:
            first, after = backfill_bounds(schedule, start, end)
            try:
                created = schedule.backfill(first, after)
            except UnknownJob:
                return Step(False, NOT_DEFINED)
            limit = "; that is the limit of one call: run it again for the rest"
            return Step(
                True,
                f"created {plural(created, 'occurrence')} from {local_time(first, first.tzinfo)} "
                f"to {local_time(after, after.tzinfo)}; occurrences that already had a row "
                f"were left alone{limit if created >= 1000 else ''}",
            )

        self._each(request, schedules, "Backfilled", do, "Backfill")

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
            # Django's own helper for a missing object; private, so django-stubs lacks it.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
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
                {"label": "Resume", "url": self.button_url(schedule, "resume"), "class": ""}
                if schedule.paused
                else {"label": "Pause", "url": self.button_url(schedule, "pause"), "class": ""},
            ]
            if schedule.active:
                buttons.append(
                    {"label": "Run now", "url": self.button_url(schedule, "runnow"), "class": ""}
                )
            context["cq_buttons"] = buttons
            if schedule.active:
                context["cq_backfill_url"] = self.button_url(schedule, "backfill")
        context["dashboard_url"] = reverse(
            "admin:django_cronqueue_job_dashboard", current_app=self.admin_site.name
        )
        return super().change_view(request, object_id, form_url, context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "dashboard_url": reverse(
                "admin:django_cronqueue_job_dashboard", current_app=self.admin_site.name
            ),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[Any]:
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
        handlers: dict[str, Callable[[HttpRequest, CronSchedule], None]] = {
            "pause": lambda r, s: self._each(r, [s], "Paused", self._pause, "Pause"),
            "resume": lambda r, s: self._each(r, [s], "Resumed", self._resume, "Resume"),
            "run-now": lambda r, s: self._each(r, [s], RUN_NOW, self._run_now, "Run now"),
        }
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
