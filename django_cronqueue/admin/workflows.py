"""How the admin shows workflows (``jobs.chain``, ``jobs.group``, ``using(after=...)``):
the blocked state of a job, links to jobs and batches, a batch's progress, and the
"Workflow" fields of the job's change page (its batch, the batch it is a callback of,
the jobs it waits for and those waiting for it). Every fact is read from
``django_cronqueue.observe`` in a bounded number of queries."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import observe
from ..models import Job, JobStatus
from .renderers import plural, progress_bar, status_pill

BLOCKED_HELP = "Pending, but no worker claims it until its upstream jobs or its batch are done."


def is_blocked(job: Job) -> bool:
    """Pending but waiting: ``blocked`` means nothing once a job has left pending."""
    return job.status == JobStatus.PENDING and job.blocked


def blocked_badge() -> SafeString:
    return format_html(
        '<span class="cq-badge cq-badge-blocked" title="{}">blocked</span>', BLOCKED_HELP
    )


def status_with_blocked(status: str, blocked: bool) -> str:
    """A status badge, followed by "blocked" for a pending job that waits."""
    if status == JobStatus.PENDING and blocked:
        return format_html("{} {}", status_pill(status), blocked_badge())
    return status_pill(status)


def job_url(pk: int, site: str) -> str:
    return reverse("admin:django_cronqueue_job_change", args=[quote(pk)], current_app=site)


def batch_url(pk: int, site: str) -> str:
    return reverse("admin:django_cronqueue_batch_change", args=[quote(pk)], current_app=site)


def members_url(batch_id: int, site: str, status: str = "") -> str:
    """The job list filtered to the members of a batch (and to one status)."""
    params = {"batch__id__exact": str(batch_id), **({"status": status} if status else {})}
    url = reverse("admin:django_cronqueue_job_changelist", current_app=site)
    return f"{url}?{urlencode(params)}"


def job_ref_link(ref: observe.JobRef, site: str) -> str:
    """``#12 testapp.parse`` linked to its page, then its status."""
    return format_html(
        '<a href="{}">#{} {}</a> {}',
        job_url(ref.pk, site),
        ref.pk,
        ref.name,
        status_with_blocked(ref.status, ref.blocked),
    )


def batch_link(batch_id: int, site: str) -> str:
    return format_html('<a href="{}">batch #{}</a>', batch_url(batch_id, site), batch_id)


def batch_progress_bar(size: int, succeeded: int, failed: int, *, compact: bool = False) -> str:
    """The browser's ``<progress>`` bar of a batch's finished members, with its text."""
    finished, _, _ = observe.batch_progress(size, succeeded, failed)
    if size <= 0:
        return "no members"
    progress = observe.Progress(
        done=finished,
        total=size,
        message=f"{failed:,} failed or cancelled" if failed else "",
        at=None,
    )
    return progress_bar(progress, compact=compact)


def linked_jobs(linked: observe.Linked, site: str) -> str:
    """The jobs of a list, one a line, and how many more there are."""
    if not linked.shown:
        return "-"
    lines = format_html_join(
        "", "<li>{}</li>", ((job_ref_link(ref, site),) for ref in linked.shown)
    )
    more = format_html("<li>and {} more</li>", f"{linked.more:,}") if linked.more else ""
    return format_html('<ul class="cq-links">{}{}</ul>', lines, more)


# --- the "Workflow" fields of a job's change page --------------------------------------


def links_of(job: Job) -> observe.WorkflowLinks:
    """``observe.workflow_links``, read once per job object (several fields show it)."""
    if "_cq_links" not in job.__dict__:
        job.__dict__["_cq_links"] = observe.workflow_links(job)
    links: observe.WorkflowLinks = job.__dict__["_cq_links"]
    return links


def blocked_text(job: Job, site: str) -> str:
    """Whether the job waits, and for what: its upstream jobs, or its batch."""
    if not is_blocked(job):
        return "no"
    if job.waiting_for:
        return format_html(
            "{} yes: waits for {} to succeed",
            blocked_badge(),
            plural(job.waiting_for, "upstream job"),
        )
    callback = links_of(job).callback
    if callback is not None:
        return format_html(
            "{} yes: waits for {} to finish", blocked_badge(), batch_link(callback.batch_id, site)
        )
    return format_html("{} yes", blocked_badge())


def batch_text(job: Job, site: str) -> str:
    """The batch the job is a member of, and the batch it is a callback of."""
    parts = []
    if job.batch_id is not None:
        parts.append(format_html("member of {}", batch_link(job.batch_id, site)))
    callback = links_of(job).callback
    if callback is not None:
        when = "every member succeeded" if callback.kind == "then" else "every member finished"
        parts.append(
            format_html(
                "the {} callback of {} (runs once {})",
                callback.kind,
                batch_link(callback.batch_id, site),
                when,
            )
        )
    if not parts:
        return "-"
    return format_html_join("; ", "{}", ((part,) for part in parts))
