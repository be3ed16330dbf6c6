"""Workflows in the admin (SPEC section 11): the Batch admin (list and read-only batch
page, cheap on a batch of 10,000 members), the blocked state of jobs in the job list and
on the job page (with its batch, upstream and downstream jobs), and a retry from the
admin that lets a batch complete."""

from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.models import Batch, Job, JobStatus
from tests.admin.conftest import messages_of, staff_client
from tests.factories import JobFactory
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cronqueue_job_changelist")
BATCHES = reverse("admin:django_cronqueue_batch_changelist")
#: session, user, the batch (its callbacks' status joined), its members per status (one
#: GROUP BY), its callbacks
MAX_BATCH_PAGE_QUERIES = 5
#: the job page of a workflow job: session, user, the job with its workflow links (twice:
#: the buttons, the form), the pauses that could hold it, its cron schedule, its first
#: upstream jobs and their count (when there are more), its downstream jobs, and the
#: timeline's attempts and admin log entries
MAX_JOB_PAGE_QUERIES = 11

record = test_jobs.record
collect_batch = test_jobs.collect_batch


def batch_url(batch):
    return reverse("admin:django_cronqueue_batch_change", args=[batch.pk])


def job_url(job):
    return reverse("admin:django_cronqueue_job_change", args=[job.pk])


def listed_ids(response):
    return [row.pk for row in response.context["cl"].result_list]


def members_url(batch, status=""):
    return f"{JOBS}?batch__id__exact={batch.pk}" + (f"&status={status}" if status else "")


def batch_with_members(statuses, **fields):
    """A batch whose members (bulk-created) have ``statuses``, its counters to match."""
    succeeded = statuses.count(JobStatus.SUCCEEDED)
    failed = statuses.count(JobStatus.FAILED) + statuses.count(JobStatus.CANCELLED)
    batch = Batch.objects.create(size=len(statuses), succeeded=succeeded, failed=failed, **fields)
    Job.objects.bulk_create(
        (JobFactory.build(batch=batch, status=status) for status in statuses), batch_size=2000
    )
    return batch


def page_queries(client, url):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return response, [query["sql"] for query in captured.captured_queries]


# --- the batch list and the batch page --------------------------------------------------


def test_batch_list_shows_counters_progress_and_callbacks(admin_client):
    batch = (
        jobs.group([record.s(key="a"), record.s(key="b")])
        .then(collect_batch.s(key="then"))
        .finally_(collect_batch.s(key="finally"))
        .enqueue()
    )
    Batch.objects.filter(pk=batch.pk).update(succeeded=1)
    response = admin_client.get(BATCHES)
    assert response.status_code == 200
    assert listed_ids(response) == [batch.pk]
    html = response.content.decode()
    assert 'max="1000" value="500"' in html  # 1 of 2 finished
    for callback in (batch.then_job, batch.finally_job):
        assert f'href="{job_url(callback)}">#{callback.pk}</a>' in html
    assert html.count('class="cq-badge cq-badge-blocked"') == 2  # both wait for the batch


def test_batch_list_query_count_is_constant(admin_client):
    def add(n):
        for _ in range(n):
            jobs.group([record.s(key="a")]).then(collect_batch.s(key="t")).enqueue()

    add(2)
    _, small = page_queries(admin_client, BATCHES)
    add(30)
    _, large = page_queries(admin_client, BATCHES)
    assert len(large) == len(small) <= 6, "\n".join(large)


def test_batch_page_shows_progress_members_by_status_and_callbacks(admin_client):
    then_job = JobFactory(name="testapp.collect_batch", payload={"key": "t"}, blocked=True)
    finally_job = JobFactory(name="testapp.collect_batch", payload={"key": "f"}, blocked=True)
    statuses = ["succeeded"] * 5 + ["failed"] * 2 + ["cancelled"] + ["running"] + ["pending"] * 3
    batch = batch_with_members(statuses, then_job=then_job, finally_job=finally_job)
    response = admin_client.get(batch_url(batch))
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "8 of 12 members finished (66%): 5 succeeded, 3 failed or cancelled, 4 not finished" in (
        html
    )
    assert 'max="1000" value="667"' in html
    for status, n in {"pending": 3, "running": 1, "succeeded": 5, "failed": 2}.items():
        link = f'href="{members_url(batch, status)}" class="cq-count cq-count-{status}"'
        assert link in html
        assert f'{link}><span class="cq-count-label">{status.title()}</span> ' in html
        assert f'<span class="cq-count-n">{n}</span>' in html
    assert f'href="{members_url(batch)}"' in html
    assert f'href="{job_url(then_job)}">#{then_job.pk} testapp.collect_batch</a>' in html
    assert f'href="{job_url(finally_job)}">#{finally_job.pk} testapp.collect_batch</a>' in html
    assert "waits for the batch to finish" in html
    # read-only: no save button, no delete link
    assert 'name="_save"' not in html
    assert "/delete/" not in html


def test_the_member_links_list_those_members(admin_client):
    batch = batch_with_members(["failed", "failed", "succeeded", "pending"])
    other = batch_with_members(["failed"])
    response = admin_client.get(members_url(batch, "failed"))
    failed = set(Job.objects.filter(batch=batch, status="failed").values_list("pk", flat=True))
    assert set(listed_ids(response)) == failed
    counts = {item["status"]: item["count"] for item in response.context["cq_status_counts"]}
    assert counts == {"pending": 1, "running": 0, "succeeded": 1, "failed": 2, "cancelled": 0}
    assert response.context["cq_scope"] == f"batch #{batch.pk}"
    failed_link = next(i for i in response.context["cq_status_counts"] if i["status"] == "failed")
    assert failed_link["url"] == f"?batch__id__exact={batch.pk}&status=failed"
    assert f"Batch #{batch.pk}" in response.content.decode()  # the filter says which batch
    assert len(listed_ids(admin_client.get(members_url(other)))) == 1


@pytest.mark.parametrize("value", ["abc", "-1", "١٢", "9" * 40, ""])
def test_a_batch_filter_value_that_is_no_id_lists_nothing(admin_client, value):
    batch_with_members(["pending"])
    response = admin_client.get(f"{JOBS}?batch__id__exact={value}")
    assert response.status_code == 200
    assert listed_ids(response) == []


def test_the_batch_page_of_10000_members_is_a_few_queries(admin_client):
    """Counts by one GROUP BY: the same queries for 3 members as for 10,000."""

    def callback():
        return JobFactory(name="testapp.collect_batch", payload={"key": "t"}, blocked=True)

    small = batch_with_members(["succeeded", "failed", "pending"], then_job=callback())
    _, few = page_queries(admin_client, batch_url(small))
    statuses = ["succeeded"] * 6000 + ["failed"] * 1000 + ["running"] * 500 + ["pending"] * 2500
    large = batch_with_members(statuses, then_job=callback(), finally_job=callback())
    response, many = page_queries(admin_client, batch_url(large))
    assert len(many) == len(few) <= MAX_BATCH_PAGE_QUERIES, "\n".join(many)
    html = unescape(response.content.decode())
    assert "7,000 of 10,000 members finished (70%)" in html
    assert '<span class="cq-count-n">6,000</span>' in html
    assert '<span class="cq-count-n">2,500</span>' in html
    group_by = [sql for sql in many if "GROUP BY" in sql.upper()]
    assert len(group_by) == 1
    # and the job list of its members stays within the list's own bound
    _, listing = page_queries(admin_client, members_url(large, "pending"))
    assert len(listing) <= 8, "\n".join(listing)


def test_batches_cannot_be_added_changed_or_deleted(admin_client):
    batch = batch_with_members(["pending"])
    assert admin_client.get(reverse("admin:django_cronqueue_batch_add")).status_code == 403
    delete = reverse("admin:django_cronqueue_batch_delete", args=[batch.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    # a batch's page is read-only, and nobody may change a batch: 403
    assert admin_client.post(batch_url(batch), {"size": 99}).status_code == 403
    response = admin_client.get(BATCHES)
    assert response.context["action_form"] is None
    batch.refresh_from_db()
    assert batch.size == 1


def test_a_staff_user_needs_the_view_permission_on_batches(db):
    batch = batch_with_members(["pending"])
    without = staff_client("no-batches", ["view_job", "change_job"])
    assert without.get(BATCHES).status_code == 403
    assert without.get(batch_url(batch)).status_code == 403
    viewer = staff_client("batch-viewer", ["view_job", "view_batch"])
    assert viewer.get(BATCHES).status_code == 200
    assert viewer.get(batch_url(batch)).status_code == 200


def test_a_superuser_sees_batches(admin_client):
    batch = batch_with_members(["pending"])
    assert admin_client.get(BATCHES).status_code == 200
    assert admin_client.get(batch_url(batch)).status_code == 200
    assert 'href="/admin/django_cronqueue/batch/"' in admin_client.get("/admin/").content.decode()


# --- blocked jobs in the job list and on the job page -----------------------------------


def test_the_job_list_shows_and_filters_the_blocked_state(admin_client):
    first, second, third = jobs.chain(
        record.s(key="a"), record.s(key="b"), record.s(key="c")
    ).enqueue()
    second.refresh_from_db()
    response = admin_client.get(JOBS)
    html = response.content.decode()
    assert html.count('class="cq-badge cq-badge-blocked"') == 2
    blocked = admin_client.get(f"{JOBS}?blocked=yes")
    assert sorted(listed_ids(blocked)) == [second.pk, third.pk]
    free = admin_client.get(f"{JOBS}?blocked=no")
    assert listed_ids(free) == [first.pk]
    # a cancelled job keeps its blocked column but is not blocked any more
    jobs.cancel(first)
    assert listed_ids(admin_client.get(f"{JOBS}?blocked=yes")) == []
    assert 'class="cq-badge cq-badge-blocked"' not in admin_client.get(JOBS).content.decode()


def test_the_job_page_of_a_chain_links_its_upstream_and_downstream_jobs(admin_client):
    first, second, third = jobs.chain(
        record.s(key="a"), record.s(key="b"), record.s(key="c")
    ).enqueue()
    html = unescape(admin_client.get(job_url(second)).content.decode())
    assert "yes: waits for 1 upstream job to succeed" in html
    assert f'href="{job_url(first)}">#{first.pk} testapp.record</a>' in html
    assert f'href="{job_url(third)}">#{third.pk} testapp.record</a>' in html
    html = unescape(admin_client.get(job_url(first)).content.decode())
    assert "yes: waits for" not in html
    assert f'href="{job_url(third)}"' not in html  # only its direct downstream job


def test_the_job_page_of_a_member_and_of_a_callback_link_their_batch(admin_client):
    batch = jobs.group([record.s(key="a")]).then(collect_batch.s(key="then")).enqueue()
    member = batch.members.get()
    html = admin_client.get(job_url(member)).content.decode()
    link = f'<a href="{batch_url(batch)}">batch #{batch.pk}</a>'
    assert f"member of {link}" in html
    html = admin_client.get(job_url(batch.then_job)).content.decode()
    assert f"yes: waits for {link} to finish" in html
    assert f"the then callback of {link}" in html


def test_a_job_outside_any_workflow_has_no_workflow_section_and_costs_no_query(
    admin_client,
):
    plain = record.enqueue(key="plain")
    response, queries = page_queries(admin_client, job_url(plain))
    html = response.content.decode()
    assert "Workflow</h2>" not in html
    assert "waits for (upstream jobs)" not in html
    # the workflow tables are read only by the job's own query, which carries its links
    workflow = [sql for sql in queries if "jobdependency" in sql or "batch" in sql]
    assert workflow, "the job's query reads its links"
    assert all("cq_has_upstream" in sql for sql in workflow), "\n".join(workflow)


def test_a_finished_chain_keeps_its_workflow_section(admin_client):
    first, second = jobs.chain(record.s(key="a"), record.s(key="b")).enqueue()
    drain()
    for job in (first, second):
        html = admin_client.get(job_url(job)).content.decode()
        assert "Workflow</h2>" in html
    html = unescape(admin_client.get(job_url(second)).content.decode())
    assert f'href="{job_url(first)}">#{first.pk} testapp.record</a>' in html


def test_the_job_page_lists_many_upstream_jobs_in_few_queries(admin_client):
    from django_cronqueue.observe import LINKS_SHOWN

    def waiting_for(n):
        upstream = Job.objects.bulk_create(JobFactory.build() for _ in range(n))
        ids = [row.pk for row in upstream if row.pk is not None] or list(
            Job.objects.order_by("-pk").values_list("pk", flat=True)[:n]
        )
        return record.using(after=ids).enqueue(key="report")

    few = waiting_for(3)
    _, small = page_queries(admin_client, job_url(few))
    many = waiting_for(LINKS_SHOWN + 150)
    response, large = page_queries(admin_client, job_url(many))
    assert len(small) <= len(large) <= MAX_JOB_PAGE_QUERIES, "\n".join(large)
    html = unescape(response.content.decode())
    assert f"yes: waits for {LINKS_SHOWN + 150} upstream jobs to succeed" in html
    assert "and 150 more" in html
    assert html.count('class="cq-links"') == 1


# --- a retry from the admin lets the batch complete -------------------------------------


def drain(limit=50):
    for _ in range(limit):
        if not jobs.tick().claimed:
            return
    raise AssertionError("still claiming after 50 ticks")


@pytest.mark.django_db(transaction=True)
def test_retrying_a_failed_member_from_the_admin_lets_the_batch_complete(admin_client):
    test_jobs.BATCHES_SEEN.clear()
    batch = (
        jobs.group([record.s(key="a"), test_jobs.fails_until_fixed.s(key="b")])
        .then(collect_batch.s(key="then"))
        .enqueue()
    )
    drain()
    batch.refresh_from_db()
    failed = Job.objects.get(name="testapp.fails_until_fixed")
    assert (failed.status, batch.succeeded, batch.failed) == ("failed", 1, 1)
    assert batch.then_job.status == "cancelled"
    page = unescape(admin_client.get(batch_url(batch)).content.decode())
    assert "2 of 2 members finished (100%): 1 succeeded, 1 failed or cancelled" in page

    SideEffect.objects.create(key="fixed b")  # the operator fixes the cause, then retries
    data = {"action": "retry_jobs", "_selected_action": [failed.pk], "index": 0}
    response = admin_client.post(members_url(batch, "failed"), data, follow=True)
    assert messages_of(response) == [f"Retried 1 job: #{failed.pk}."]
    batch.refresh_from_db()
    assert (batch.failed, batch.finished_at, batch.then_job.status) == (0, None, "pending")
    assert batch.then_job.blocked

    drain()
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed, batch.then_job.status) == (2, 0, "succeeded")
    assert batch.finished_at is not None
    assert [seen[0] for seen in test_jobs.BATCHES_SEEN] == ["then"]
    assert SideEffect.objects.filter(key="then").count() == 1
    page = unescape(admin_client.get(batch_url(batch)).content.decode())
    assert "2 of 2 members finished (100%): 2 succeeded, 0 failed or cancelled" in page
    test_jobs.BATCHES_SEEN.clear()


@pytest.mark.django_db(transaction=True)
def test_retrying_a_failed_member_with_the_button_lets_the_batch_complete(admin_client):
    batch = (
        jobs.group([test_jobs.fails_until_fixed.s(key="x")])
        .then(record.s(key="then"))
        .finally_(record.s(key="finally"))
        .enqueue()
    )
    drain()
    member = batch.members.get()
    assert Job.objects.get(pk=member.pk).status == "failed"
    SideEffect.objects.create(key="fixed x")
    retry = reverse("admin:django_cronqueue_job_retry", args=[member.pk])
    assert admin_client.post(retry).status_code == 302
    drain()
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed) == (1, 0)
    assert batch.then_job.status == "succeeded"
    # finally_ ran once, after the failure; the retry does not run it again
    assert SideEffect.objects.filter(key="finally").count() == 1
    assert SideEffect.objects.filter(key="then").count() == 1
    assert timezone.now() >= batch.finished_at
