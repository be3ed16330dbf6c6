"""The Job admin: the list (status counts, filters, a search that stays on indexes) and
the detail page (pretty payload, the full traceback, timestamps, the lease holder, the
workflow it belongs to), with the actions and buttons Retry, Cancel and Run now
(``job_action_views``)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import reduce
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from .. import observe
from ..conf import database_alias
from ..definitions.registry import registry
from ..integrations import encryption
from ..models import CronSchedule, Job, JobStatus, Worker
from ..values.error_text import MAX_ERROR_CHARS
from ..values.validation import MAX_DEDUPE_KEY_LENGTH
from . import dashboard, pauses
from .filters import (
    BatchFilter,
    BlockedFilter,
    FailedRecentlyFilter,
    JobChangeList,
    JobPaginator,
    NameFilter,
    QueueFilter,
    StatusFilter,
    exactly,
    in_batch,
)
from .job_action_views import JobActionsAdmin
from .job_actions import JOB_ACTIONS
from .job_columns import JobColumns
from .live import LiveRefresh
from .payload_search import search_terms
from .renderers import (
    count_text,
    detail_time,
    local_time,
    pause_until_text,
    preformatted,
    pretty_json,
    progress_bar,
    relative,
    zone,
)
from .search import as_id, fits, search
from .timeline import job_timeline_context
from .workflows import batch_text, blocked_text, linked_jobs, links_of

UNSUCCESSFUL = [status for status in JobStatus.values if status != JobStatus.SUCCEEDED]
#: The statuses whose page shows the last failure first: failed, and pending again after one.
FAILURE_FIRST = frozenset({JobStatus.FAILED, JobStatus.PENDING})


def time_display(field: str, description: str) -> Callable[[Any, Job], str]:
    """A detail-page field showing one of the job's instants (``detail_time``)."""

    @admin.display(description=description)
    def display(model_admin: Any, job: Job) -> str:
        return detail_time(getattr(job, field))

    return display


class JobAdmin(LiveRefresh, JobColumns, JobActionsAdmin):
    change_list_template = "django_cronqueue/admin/job_change_list.html"
    change_form_template = "django_cronqueue/admin/job_change_form.html"
    # Five columns, so that the list fits beside Django's navigation sidebar and the filters
    # on a 1280-pixel screen: attempts and progress sit under the status, the queue under
    # the name, the occurrence under the run time.
    list_display = [
        "id",
        "status_column",
        "name_column",
        "run_at_column",
        "error_display",
    ]
    list_display_links = ["id"]
    list_filter = [
        StatusFilter,
        BlockedFilter,
        FailedRecentlyFilter,
        NameFilter,
        QueueFilter,
        BatchFilter,
    ]
    search_fields = ["=id", "name", "=dedupe_key", "last_error"]  # see get_search_results
    search_help_text = (
        "A job id, an exact dedupe key, part of a name, or part of the error (of jobs that "
        "did not succeed, unless the list is filtered by status); key:value for a value of "
        'the arguments (order.id:42, city:"New York").'
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
                    "fair_key",
                    "priority_display",
                    "attempts_display",
                    "retry_policy",
                    "dedupe_key",
                    "schedule_display",
                ]
            },
        ),
        (
            "Progress and control",
            {"fields": ["progress_display", "cancel_request", "snoozes"]},
        ),
        (
            "When",
            {"fields": ["created", "due", "occurrence", "started", "finished"]},
        ),
        ("Lease", {"fields": ["lease_holder", "lease_expiry"]}),
        ("Payload and result", {"fields": ["payload_display", "result_display"]}),
        ("Last failure", {"fields": ["full_error", "traceback_display"]}),
    ]
    # Shown only on the page of a job that takes part in a workflow (see get_fieldsets).
    workflow_fieldset: Any = (
        "Workflow",
        {"fields": ["blocked_display", "batch_display", "upstream", "downstream"]},
    )
    readonly_fields = [
        "name_display",
        "status_display",
        "queue",
        "fair_key",
        "priority_display",
        "attempts_display",
        "retry_policy",
        "dedupe_key",
        "schedule_display",
        "progress_display",
        "cancel_request",
        "snoozes",
        "blocked_display",
        "batch_display",
        "upstream",
        "downstream",
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

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Job | None:
        """The job with its workflow links, read in the same query."""
        field = Job._meta.pk if from_field is None else Job._meta.get_field(from_field)
        try:
            value = field.to_python(object_id)  # type: ignore[union-attr]
        except (ValidationError, ValueError):
            return None
        queryset = observe.with_workflow_links(self.get_queryset(request))
        job = queryset.filter(**{field.name: value}).first()
        if job is not None:
            observe.mark_stranded([job], timezone.now())
        return job

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None and obj.status in FAILURE_FIRST and obj.last_error:
            # What went wrong comes first, on the first screen: Django 6.1 sets each
            # read-only field's label above its value, which pushed it below the fold.
            failure = next(fieldset for fieldset in fieldsets if fieldset[0] == "Last failure")
            fieldsets.remove(failure)
            fieldsets.insert(0, failure)
        if obj is not None and links_of(obj).any:
            fieldsets.insert(2, self.workflow_fieldset)
        return fieldsets

    # -- detail fields

    @admin.display(description="retry policy")
    def retry_policy(self, job: Job) -> str:
        """What this process's definition retries (retries, retry_on, discard_on)."""
        definition = registry.get(job.name)
        return definition.retry_policy if definition is not None else "-"

    @admin.display(description="schedule")
    def schedule_display(self, job: Job) -> str:
        # A dynamic schedule's rows name it in Job.schedule; a code schedule's carry its name.
        source = CronSchedule.Source.DYNAMIC if job.schedule else CronSchedule.Source.CODE
        schedules = observe.schedules().filter(name=job.schedule or job.name, source=source)
        schedule = schedules.only("pk", "name", "tz").first()
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
            local_time(job.scheduled_for, zone(schedule.tz)),
            link,
        )

    @admin.display(description="progress")
    def progress_display(self, job: Job) -> str:
        progress = observe.progress_of(job.progress)
        if progress is None:
            return "-" if job.progress is None else "not readable (not what set_progress() writes)"
        return format_html(
            '{}<div class="cq-quiet">reported {}</div>',
            progress_bar(progress),
            detail_time(progress.at) if progress.at else "at an unknown time",
        )

    @admin.display(description="cancel")
    def cancel_request(self, job: Job) -> str:
        """When, by whom and why a cancel of the running job was asked for."""
        if job.cancel_requested_at is None:
            return "-"
        return format_html(
            "requested {} by {}{}{}",
            detail_time(job.cancel_requested_at),
            job.cancel_requested_by or "code (jobs.cancel())",
            format_html(": {}", job.cancel_reason) if job.cancel_reason else "",
            "; waiting for its handler to stop" if job.status == JobStatus.RUNNING else "",
        )

    @admin.display(description="blocked")
    def blocked_display(self, job: Job) -> str:
        return blocked_text(job, self.admin_site.name)

    @admin.display(description="batch")
    def batch_display(self, job: Job) -> str:
        return batch_text(job, self.admin_site.name)

    @admin.display(description="waits for (upstream jobs)")
    def upstream(self, job: Job) -> str:
        if not links_of(job).has_upstream:
            return "-"
        return linked_jobs(observe.upstream_jobs(job.pk), self.admin_site.name)

    @admin.display(description="waited for by (downstream jobs)")
    def downstream(self, job: Job) -> str:
        if not job.has_downstream:
            return "-"  # no job was ever made to wait for it: no query
        return linked_jobs(observe.downstream_jobs(job.pk), self.admin_site.name)

    created = time_display("created_at", "created")
    due = time_display("run_at", "run at")
    occurrence = time_display("scheduled_for", "scheduled for")
    started = time_display("started_at", "started (last attempt)")
    finished = time_display("finished_at", "finished")
    lease_expiry = time_display("locked_until", "lease expiry")

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
        """Sensitive values as ``[encrypted]`` or ``[erased]``: never their token."""
        return pretty_json(encryption.shown_payload(job.payload))

    @admin.display(description="result")
    def result_display(self, job: Job) -> str:
        if job.result is None:
            return "-"
        return pretty_json(encryption.shown(job.result))

    @admin.display(description="last error")
    def full_error(self, job: Job) -> str:
        if not job.last_error:
            return "-"
        return preformatted(job.last_error, "error")

    @admin.display(description="traceback")
    def traceback_display(self, job: Job) -> str:
        if not job.traceback:
            return "-"
        return preformatted(job.traceback, "traceback")

    # -- list page

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Each word must match a job's id or dedupe key (exactly: index lookups), a name
        (by substring, matched against the few distinct names, then looked up by index),
        or its error text (by substring). Django's default would compare ``UPPER(id::text)``
        and scan every row for each field; here only the error text is scanned, and
        unless the list is filtered by status, only among jobs that did not succeed
        (found through the status index), so a search stays fast on millions of rows.
        A ``key:value`` word matches a value of the payload (``payload_search``) or, as
        typed, a dedupe key (``invoice:7731``)."""
        if not search_terms(search_term):
            return queryset, False
        names = observe.distinct_values("name")
        status_filtered = bool(request.GET.get("status") or request.GET.get("failed"))

        def match(word: str) -> Q | None:
            conditions = []
            job_id = as_id(word)
            if job_id is not None:
                conditions.append(Q(pk=job_id))
            if fits(word, MAX_DEDUPE_KEY_LENGTH):
                conditions.append(Q(dedupe_key=word))
            lowered = word.lower()
            matching_names = [name for name in names if lowered in name.lower()]
            if matching_names:
                conditions.append(Q(name__in=matching_names))
            if fits(word, MAX_ERROR_CHARS):
                error = Q(last_error__icontains=word)
                if not status_filtered:
                    error &= Q(status__in=UNSUCCESSFUL)
                conditions.append(error)
            return reduce(operator.or_, conditions) if conditions else None

        def exact_key(word: str) -> Q | None:
            return Q(dedupe_key=word) if fits(word, MAX_DEDUPE_KEY_LENGTH) else None

        return search(request, queryset, search_term, match, payload=True, also=exact_key), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**self.status_count_links(request), **(extra_context or {})}
        context["dashboard_url"] = self.dashboard_url()
        return super().changelist_view(request, context)

    def status_count_links(self, request: HttpRequest) -> dict[str, Any]:
        """Counts per status (one GROUP BY), within the name and queue filters if set;
        each links to the list filtered by that status."""
        if not self.has_view_permission(request):
            return {}
        keep = {key: request.GET[key] for key in ("name", "queue") if request.GET.get(key)}
        queryset = self.get_queryset(request)
        for column, value in keep.items():
            queryset = exactly(queryset, column, value)
        if BatchFilter.parameter_name in request.GET:
            value = request.GET[BatchFilter.parameter_name]
            queryset = in_batch(queryset, value)
            keep[BatchFilter.parameter_name] = value
        counts, capped = observe.capped_status_counts(queryset)
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
            "cq_scope": ", ".join(
                f"batch #{value}" if key == BatchFilter.parameter_name else f"{key} {value}"
                for key, value in keep.items()
            ),
        }

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
                    "label": action.label
                    + ("…" if action.key == "cancel" and job.status == JobStatus.RUNNING else ""),
                    "url": self.url_of(job, action.key.replace("_", "")),
                    "class": action.button_class,
                }
                for action in JOB_ACTIONS.values()
                if can_change and action.applies(job)
            ]
            context["cq_can_change"] = can_change
            context["cq_orphan"] = job.name not in registry
            if job.status == JobStatus.PENDING:
                context["cq_held_by"] = self.held_by(job)
            context.update(job_timeline_context(job))
        context["dashboard_url"] = self.dashboard_url()
        return super().change_view(request, object_id, form_url, context)

    def held_by(self, job: Job) -> list[dict[str, str]]:
        """The pauses that keep workers from claiming the pending ``job``."""
        now = timezone.now()
        return [
            {
                "target": pause.target,
                "until": pause_until_text(pause.until, now),
                "reason": pause.reason,
            }
            for pause in observe.pauses_holding(job.queue, job.name, now)
        ]

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            return self.admin_site.admin_view(view)

        def button(key: str) -> Callable[..., HttpResponse]:
            if key == "cancel":
                return self.cancel_view

            def view(request: HttpRequest, object_id: str) -> HttpResponse:
                return self.object_button_view(
                    request,
                    object_id,
                    lambda job: self._run(
                        request, key, self.get_queryset(request).filter(pk=job.pk)
                    ),
                )

            return view

        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "dashboard/",
                wrap(self.dashboard_view),
                name=f"{info[0]}_{info[1]}_dashboard",
            ),
            path(
                "dashboard/pause/",
                wrap(lambda request: pauses.pause_from_dashboard(self, request)),
                name=f"{info[0]}_{info[1]}_dashboard_pause",
            ),
            path(
                "dashboard/resume/",
                wrap(lambda request: pauses.resume_from_dashboard(self, request)),
                name=f"{info[0]}_{info[1]}_dashboard_resume",
            ),
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

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard.dashboard_view(self, request)
