"""The queue dashboard: status counts, the outcomes of each hour per job name as
server-rendered SVG bar charts, queue depth, the oldest due pending job, live workers,
the pauses of queues and job names (with Pause and Resume buttons for users who may
change jobs) and, for users who may view schedules, the next runs of every code schedule
and of the dynamic ones that run next, with the counts of all schedules and links to
their list.

Every fact comes from the read model (``observe``), read once per page as
``DashboardFacts``; this module owns only how they are drawn: the chart geometry (numbers
written by Python, never localized) and the template's context.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from .. import observe
from ..models import CronSchedule, Job, JobStatus, Pause
from .base import ReadOnlyAdmin
from .live import keep_messages
from .renderers import count_text, local_time, pause_until_text, relative, status_pill, zone

ONE_HOUR = dt.timedelta(hours=1)
TICK_EVERY_HOURS = 3
KIND_WORDS = {"queue": "queue", "name": "job"}  # a pause target's kind, in a button's label


@dataclass
class DashboardFacts:
    """What the dashboard shows, as of ``now``."""

    now: dt.datetime
    counts: dict[str, int]  # exact, without counting the history (observe.counts)
    failed_recently: int
    oldest_pending: observe.OldestPending | None
    live_workers: list[observe.LiveWorker]
    silent_workers: int
    queues: list[observe.QueueDepth]
    schedules: list[observe.ScheduleRow]  # the code ones, then the dynamic ones that run next
    schedule_counts: observe.ScheduleCounts
    outcomes: observe.HourlyOutcomes
    pauses: observe.PauseTargets


def read_facts(now: dt.datetime, *, schedules: bool = True) -> DashboardFacts:
    """The facts as of ``now``, read from ``CRONQUEUE["READ_DATABASE"]`` when set (the page
    only shows them; its buttons post to views that read the queue's database); the
    schedules only when ``schedules`` (the user may see them), else none are read."""
    with observe.from_read_database():
        counts = observe.status_totals(observe.job_counts())
        live, silent = observe.live_workers(now)
        overview = observe.schedule_overview(now) if schedules else None
        return DashboardFacts(
            now=now,
            counts=counts,
            failed_recently=observe.failed_since(now),
            oldest_pending=observe.oldest_pending(now),
            live_workers=live,
            silent_workers=silent,
            queues=observe.queue_depths(now),
            schedules=overview.rows if overview else [],
            schedule_counts=overview.counts if overview else observe.ScheduleCounts(),
            outcomes=observe.hourly_outcomes(now),
            pauses=observe.pause_targets(now, observe.distinct_values("queue")),
        )


# --- the charts ---------------------------------------------------------------------


@dataclass
class Bar:
    hour: dt.datetime
    succeeded: int
    failed: int
    x: float = 0
    succeeded_y: float = 0
    succeeded_height: float = 0
    failed_y: float = 0
    failed_height: float = 0
    width: float = 0
    slot_width: float = 0
    label: str = ""


@dataclass
class NameSeries:
    name: str
    bars: list[Bar]
    succeeded: int
    failed: int
    peak: int
    defined: bool


@dataclass
class Chart:
    """Geometry for the server-rendered SVG bar charts (numbers only; every text is
    escaped where it is written)."""

    width: int = 480
    height: int = 64
    bar_width: float = 0
    hours: list[dt.datetime] = field(default_factory=list)
    series: list[NameSeries] = field(default_factory=list)


def outcome_chart(outcomes: observe.HourlyOutcomes) -> Chart:
    """One bar chart per job name, each scaled to its own busiest hour."""
    chart = Chart(hours=outcomes.hours)
    chart.bar_width = chart.width / len(outcomes.hours)
    chart.series = [
        NameSeries(
            name=line.name,
            bars=[_bar(chart, index, line.peak, hour) for index, hour in enumerate(line.hours)],
            succeeded=line.succeeded,
            failed=line.failed,
            peak=line.peak,
            defined=line.defined,
        )
        for line in outcomes.names
    ]
    return chart


def _bar(chart: Chart, index: int, peak: int, counts: observe.HourOutcomes) -> Bar:
    scale = (chart.height - 2) / peak if peak else 0
    bar = Bar(counts.hour, counts.succeeded, counts.failed)
    local = timezone.localtime(bar.hour)
    bar.label = f"{local:%a %H:%M}-{timezone.localtime(bar.hour + ONE_HOUR):%H:%M}"
    bar.x = round(index * chart.bar_width, 2)
    bar.slot_width = round(chart.bar_width, 2)
    bar.width = round(max(chart.bar_width - 2, 1), 2)
    # a bar of at least one pixel for any run, however busy the busiest hour
    bar.succeeded_height = max(round(bar.succeeded * scale, 2), 1) if bar.succeeded else 0
    bar.failed_height = max(round(bar.failed * scale, 2), 1) if bar.failed else 0
    bar.failed_y = round(chart.height - bar.failed_height, 2)
    bar.succeeded_y = round(bar.failed_y - bar.succeeded_height, 2)
    return bar


def chart_ticks(chart: Chart) -> list[dict[str, Any]]:
    return [
        {"x": round(i * chart.bar_width, 2), "label": timezone.localtime(hour).strftime("%H:00")}
        for i, hour in enumerate(chart.hours)
        if i % TICK_EVERY_HOURS == 0
    ]


def _rect(x: float, y: float, width: float, height: float, kind: str) -> SafeString:
    return format_html(
        '<rect x="{}" y="{}" width="{}" height="{}" class="cq-bar-{}"></rect>',
        x,
        y,
        width,
        height,
        kind,
    )


def chart_svg(chart: Chart, line: NameSeries, ticks: list[dict[str, Any]]) -> SafeString:
    """One job name's hourly bars as inline SVG: numbers written by Python (never
    localized: no decimal commas in coordinates), every text escaped by format_html."""
    full = chart.height + 14
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
                _rect(bar.x, bar.succeeded_y, bar.width, bar.succeeded_height, "succeeded")
                if bar.succeeded
                else "",
                _rect(bar.x, bar.failed_y, bar.width, bar.failed_height, "failed")
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


# --- the page -----------------------------------------------------------------------


def dashboard_view(model_admin: ReadOnlyAdmin[Job], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    site = model_admin.admin_site
    # Schedules (names, expressions, next runs) are shown only to users who may view
    # them; the job permission alone does not show them.
    schedule_admin = site._registry.get(CronSchedule)
    show_schedules = schedule_admin is not None and schedule_admin.has_view_permission(request)
    facts = read_facts(timezone.now(), schedules=show_schedules)
    changelist = reverse("admin:django_cronqueue_job_changelist", current_app=site.name)
    chart = outcome_chart(facts.outcomes)
    ticks = chart_ticks(chart)
    oldest = facts.oldest_pending
    context = {
        **site.each_context(request),
        "title": "Job queue dashboard",
        "opts": model_admin.opts,
        "now": facts.now,
        "facts": facts,
        "chart": chart,
        "charts": [{"line": line, "svg": chart_svg(chart, line, ticks)} for line in chart.series],
        "queues": facts.queues,
        "oldest": oldest,
        "oldest_age": timesince(oldest.run_at, facts.now, depth=2) if oldest else "",
        "workers": [_worker_item(live, facts.now) for live in facts.live_workers],
        "silent_workers": facts.silent_workers,
        "show_schedules": show_schedules,
        "schedules": [_schedule_item(row, facts.now, site.name) for row in facts.schedules],
        **_schedule_counts_context(facts, site.name),
        "status_counts": [
            {
                "status": status,
                "label": label,
                "count": count_text(facts.counts[status]),
                "url": f"{changelist}?status={status}",
            }
            for status, label in JobStatus.choices
        ],
        "changelist_url": changelist,
        "failed_recently_url": f"{changelist}?failed=24h",
        "failed_recently": facts.failed_recently,
        **_pause_context(model_admin, request, facts),
        "media": model_admin.media,
    }
    request.current_app = site.name
    response = TemplateResponse(request, "django_cronqueue/admin/dashboard.html", context)
    return keep_messages(request, response)


def _worker_item(live: observe.LiveWorker, now: dt.datetime) -> dict[str, Any]:
    worker = live.worker
    return {
        "worker": worker,
        "running": live.running,
        "seen": relative(worker.last_seen, now),
        "up": timesince(worker.started_at, now, depth=2),
        "queues": ", ".join(worker.queues) if worker.queues else "all",
    }


def _schedule_item(row: observe.ScheduleRow, now: dt.datetime, site: str) -> dict[str, Any]:
    """A schedule's line, linked to its page on the admin site ``site``."""
    schedule = row.schedule
    schedule_zone = zone(schedule.tz)
    return {
        "row": schedule,
        "description": row.description,
        "next_runs": [
            {"local": local_time(instant, schedule_zone), "relative": relative(instant, now)}
            for instant in row.next_runs
        ],
        "last": local_time(schedule.last_occurrence, schedule_zone)
        if schedule.last_occurrence
        else "",
        "last_status": status_pill(getattr(schedule, "last_job_status", None)),
        "url": reverse(
            "admin:django_cronqueue_cronschedule_change",
            args=[quote(schedule.pk)],
            current_app=site,
        ),
    }


def _schedule_counts_context(facts: DashboardFacts, site: str) -> dict[str, Any]:
    """The counts of every schedule, each linked to the schedules list it filters."""
    counts = facts.schedule_counts
    changelist = reverse("admin:django_cronqueue_cronschedule_changelist", current_app=site)
    return {
        "schedule_counts": counts,
        "schedules_not_shown": counts.total - len(facts.schedules),
        "schedules_url": changelist,
        "schedule_filters": [
            {"count": n, "label": label, "url": f"{changelist}?{query}"}
            for n, label, query in (
                (counts.dynamic, "dynamic", "source__exact=dynamic"),
                (counts.paused, "paused", "paused__exact=1"),
                (counts.inactive, "inactive", "active__exact=0"),
            )
            if n
        ],
        "dynamic_shown": sum(row.schedule.is_dynamic for row in facts.schedules),
    }


def _pause_context(
    model_admin: ReadOnlyAdmin[Job], request: HttpRequest, facts: DashboardFacts
) -> dict[str, Any]:
    """The pause section: every queue and job name with its pause, the URLs its buttons
    post to (for users who may change jobs) and the link to the list of pauses."""
    site = model_admin.admin_site
    pause_admin = site._registry.get(Pause)
    can_view = pause_admin is not None and pause_admin.has_view_permission(request)
    can_pause = model_admin.has_change_permission(request)
    names = [_pause_item(target, facts.now) for target in facts.pauses.names]
    return {
        "pause_queues": [_pause_item(target, facts.now) for target in facts.pauses.queues],
        "pause_names": names,
        # a long list of names is folded away unless one of them is paused
        "pause_names_open": len(names) <= 20 or any(item["paused"] for item in names),
        "paused_count": len(facts.pauses.paused),
        "can_pause": can_pause,
        "pause_url": reverse("admin:django_cronqueue_job_dashboard_pause", current_app=site.name),
        "resume_url": reverse("admin:django_cronqueue_job_dashboard_resume", current_app=site.name),
        "pauses_url": reverse("admin:django_cronqueue_pause_changelist", current_app=site.name)
        if can_view
        else "",
        "add_pause_url": reverse("admin:django_cronqueue_pause_add", current_app=site.name)
        if can_pause and pause_admin is not None
        else "",
    }


def _pause_item(target: observe.PauseTarget, now: dt.datetime) -> dict[str, Any]:
    """A queue's or a job name's line; an ended pause (housekeeping deletes it soon)
    counts as none."""
    pause = target.pause if target.paused else None
    return {
        "target": target,
        "paused": pause is not None,
        "label": f"{'Resume' if pause else 'Pause'} {KIND_WORDS[target.kind]} {target.value}",
        "until": pause_until_text(pause.until, now) if pause else "",
        "reason": pause.reason if pause else "",
        "by": pause.paused_by if pause else "",
        "since": relative(pause.paused_at, now) if pause else "",
    }
