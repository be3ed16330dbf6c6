"""Small HTML and text renderers shared by the admin's screens: status badges, times in
a zone, pretty JSON, counts and plurals. Every text goes through ``format_html``, so
whatever a job's name, payload or error holds, it is shown escaped."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any
from zoneinfo import ZoneInfo

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil

from .. import cron, observe
from ..models import JobStatus

STATUS_LABELS = dict(JobStatus.choices)
ORPHAN_HELP = (
    "No code in this process defines a job of this name: it was renamed or removed, or its "
    "module is not imported. Workers leave its pending rows alone."
)


def status_pill(status: str | None) -> str:
    """A job status as a coloured badge."""
    if not status:
        return "-"
    return format_html(
        '<span class="cq-status cq-status-{}">{}</span>',
        status,
        STATUS_LABELS.get(status, status),
    )


def orphan_badge() -> SafeString:
    return format_html(
        '<span class="cq-badge cq-badge-warning" title="{}">no code defines this job</span>',
        ORPHAN_HELP,
    )


#: A line break opportunity that adds no character (copying the text copies no space).
WORD_BREAK = mark_safe("<wbr>")  # a constant: nothing from the database


def breakable_name(name: str, separator: str = ".") -> SafeString:
    """A dotted name (``reports.export_invoices``, or a zone with ``separator="/"``) that
    may wrap after each separator in a narrow column, and is copied as it is written."""
    parts = name.split(separator)
    pieces = [f"{part}{separator}" for part in parts[:-1]] + parts[-1:]
    return format_html_join(WORD_BREAK, "{}", ((piece,) for piece in pieces))


def warning_badge(text: str) -> SafeString:
    return format_html('<span class="cq-badge cq-badge-warning">{}</span>', text)


def pretty_json(value: object) -> SafeString:
    """A JSON value indented, keys sorted, in a ``<pre>``."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return format_html('<pre class="cq-pre">{}</pre>', text)


def preformatted(text: str, kind: str) -> SafeString:
    """A long text (an error, a traceback) as it was written, in a ``<pre>``."""
    return format_html('<pre class="cq-pre cq-{}">{}</pre>', kind, text)


def progress_bar(progress: observe.Progress | None, *, compact: bool = False) -> str:
    """A job's progress as the browser's own ``<progress>`` bar (indeterminate without a
    total) and its text, ``3/10 (30%): chunk 3``; ``compact`` (the job list) shows the
    message only in the tooltip. Nothing when there is no progress."""
    if progress is None:
        return ""
    text = progress.describe()
    if progress.fraction is None:
        bar = format_html('<progress class="cq-progress-bar" aria-label="{}"></progress>', text)
    else:
        bar = format_html(
            '<progress class="cq-progress-bar" max="1000" value="{}" aria-label="{}"></progress>',
            round(progress.fraction * 1000),
            text,
        )
    if not compact:
        return format_html('<span class="cq-progress">{} <span>{}</span></span>', bar, text)
    short = (
        f"{progress.percent}%"
        if progress.percent is not None
        else f"{observe.number(progress.done)}"
    )
    return format_html(
        '<span class="cq-progress" title="{}">{} <span class="cq-quiet">{}</span></span>',
        text,
        bar,
        short,
    )


def zone(name: str) -> ZoneInfo | None:
    """The zone of a schedule row, None when it is not a zone this system knows."""
    try:
        return cron.load_zone(name)
    except cron.InvalidTimeZone:
        return None


def local_time(instant: dt.datetime | None, in_zone: dt.tzinfo | None = None) -> str:
    """An instant as ``Mon 2026-06-01 02:30 EDT`` in ``in_zone`` (default: the current one)."""
    if instant is None:
        return "-"
    local = instant.astimezone(in_zone) if in_zone is not None else timezone.localtime(instant)
    return local.strftime("%a %Y-%m-%d %H:%M %Z")


def wrappable_time(instant: dt.datetime, in_zone: dt.tzinfo | None = None) -> SafeString:
    """``local_time`` that a narrow column wraps between the date and the time only."""
    text = local_time(instant, in_zone)
    weekday, date, rest = text.split(" ", 2)
    return format_html(
        '<span class="cq-nowrap">{} {}</span> <span class="cq-nowrap">{}</span>',
        weekday,
        date,
        rest,
    )


def pause_until_text(until: dt.datetime | None, now: dt.datetime) -> str:
    """``until Mon 2026-06-01 14:00 UTC (in 2 hours)``, or ``until resumed``."""
    if until is None:
        return "until resumed"
    return f"until {local_time(until)} ({relative(until, now)})"


def compact_time(instant: dt.datetime | None) -> str:
    """``2026-06-01 02:30:00`` in the current zone, the full instant in its tooltip; a
    narrow column wraps it between the date and the time, never inside either."""
    if instant is None:
        return "-"
    local = timezone.localtime(instant)
    return format_html(
        '<time datetime="{}" title="{}"><span class="cq-nowrap">{}</span> '
        '<span class="cq-nowrap">{}</span></time>',
        instant.isoformat(),
        local.strftime("%a %Y-%m-%d %H:%M:%S %Z"),
        local.strftime("%Y-%m-%d"),
        local.strftime("%H:%M:%S"),
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
    """``in 5 s``, ``3 minutes ago``, ``in 2 hours``."""
    seconds = (instant - now).total_seconds()
    if abs(seconds) < 60:
        return f"in {seconds:.0f} s" if seconds >= 0 else f"{-seconds:.0f} s ago"
    if seconds > 0:
        return f"in {timeuntil(instant, now, depth=1)}"
    return f"{timesince(instant, now, depth=1)} ago"


def count_text(n: int, more: bool = False) -> str:
    """``1,234``, or ``1,234+`` when there are more than counted."""
    return f"{n:,}+" if more else f"{n:,}"


def plural(n: int, word: str) -> str:
    """``1 job``, ``1,234 jobs``."""
    return f"{n} {word}" if n == 1 else f"{n:,} {word}s"


def listing(items: Iterable[str], at_most: int | None = None) -> str:
    """``a, b, c``; beyond ``at_most`` items, ``a, b and 3 more``."""
    items = list(items)
    if at_most is None or len(items) <= at_most:
        return ", ".join(items)
    return f"{', '.join(items[:at_most])} and {len(items) - at_most} more"


STRANDED_HELP = (
    "No live worker defines this job name, so no worker will run it: define it in a module "
    "the workers import (an app's jobs.py, or a module CRONQUEUE['DISCOVER'] lists) and "
    "restart them."
)


def stranded_badge(job: Any) -> str:
    """A mark for a due pending job whose name no live worker defines (set by
    ``observe.mark_stranded``), else ""."""
    if not getattr(job, "stranded", False):
        return ""
    return format_html(
        '<span class="cq-badge cq-badge-stranded" title="{}">no worker defines it</span>',
        STRANDED_HELP,
    )
