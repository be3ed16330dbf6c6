"""Scale: a constant number of queries whatever the number of rows, the status counts in
one aggregate query, and no COUNT(*) over the whole table on a large unfiltered list."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_cronqueue import observe
from django_cronqueue.models import Job, JobStatus
from django_cronqueue.operations import bulk
from tests.factories import CronScheduleFactory, JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_cronqueue_job_changelist")
SCHEDULES = reverse("admin:django_cronqueue_cronschedule_changelist")
DASHBOARD = reverse("admin:django_cronqueue_job_dashboard")
# session, user, status counts, name choices, queue choices, page count (PostgreSQL: the
# planner's estimate, then a capped count), page rows, the live workers' job names (the
# "no worker defines it" mark)
MAX_CHANGELIST_QUERIES = 9


def mixed_jobs(n):
    now = timezone.now()
    statuses = list(JobStatus.values)
    rows = []
    for i in range(n):
        status = statuses[i % len(statuses)]
        finished = now - dt.timedelta(minutes=i) if status in ("succeeded", "failed") else None
        rows.append(
            JobFactory.build(
                name=f"testapp.{['record', 'noop', 'gone_job'][i % 3]}",
                queue=["default", "emails"][i % 2],
                status=status,
                finished_at=finished,
                scheduled_for=now - dt.timedelta(hours=i) if i % 4 == 0 else None,
                last_error=f"RuntimeError: failure {i}\nmore" if status == "failed" else "",
                traceback="Traceback ...\n" * 50 if status == "failed" else "",
                worker_id=f"w{i % 3}" if status == "running" else "",
            )
        )
    Job.objects.bulk_create(rows)


def queries_for(client, url):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return response, [query["sql"] for query in captured.captured_queries]


@pytest.mark.parametrize(
    "params",
    [
        "",
        "?status=failed",
        "?failed=24h",
        "?name=testapp.record",
        "?queue=emails",
        "?q=failure",
        "?blocked=yes",
        "?blocked=no",
        "?batch__id__exact=1",
    ],
)
def test_job_list_query_count_is_constant(admin_client, params):
    mixed_jobs(10)
    _, small = queries_for(admin_client, JOBS + params)
    mixed_jobs(140)
    response, large = queries_for(admin_client, JOBS + params)
    assert len(large) == len(small) <= MAX_CHANGELIST_QUERIES, "\n".join(large)
    if not params:
        assert len(response.context["cl"].result_list) == 100


def test_status_counts_are_one_query(admin_client):
    mixed_jobs(20)
    with CaptureQueriesContext(connection) as captured:
        counts, capped = observe.capped_status_counts()
    assert len(captured) == 1
    assert (sum(counts.values()), capped) == (20, set())
    assert counts == observe.status_counts()
    _, queries = queries_for(admin_client, JOBS)
    assert len([sql for sql in queries if "capped_0" in sql]) == 1


def test_status_counts_of_a_filter_no_row_can_match_are_zero(db):
    mixed_jobs(5)
    zero = dict.fromkeys(JobStatus.values, 0)
    with CaptureQueriesContext(connection) as captured:
        assert observe.capped_status_counts(Job.objects.none()) == (zero, set())
        assert observe.capped_status_counts(Job.objects.filter(pk__in=[])) == (zero, set())
    assert len(captured) == 0


def test_status_counts_stop_at_the_cap(admin_client, monkeypatch):
    mixed_jobs(30)  # 6 rows of each status
    JobFactory(status=JobStatus.FAILED)
    counts, capped = observe.capped_status_counts(cap=6)
    assert capped == {"failed"}
    assert counts == dict.fromkeys(JobStatus.values, 6)
    monkeypatch.setattr(observe, "COUNT_CAP", 6)
    response = admin_client.get(JOBS)
    shown = {item["status"]: item["display"] for item in response.context["cq_status_counts"]}
    assert shown["failed"] == "6+"
    assert shown["pending"] == "6"
    assert response.context["cq_total_display"] == "30+"


def test_list_does_not_load_payloads_or_tracebacks(admin_client):
    mixed_jobs(10)
    _, queries = queries_for(admin_client, JOBS)
    page = [sql for sql in queries if "LIMIT" in sql.upper() and "ORDER BY" in sql.upper()]
    rows_query = page[-1]
    quoted = connection.ops.quote_name
    assert f"{quoted('django_cronqueue_job')}.{quoted('traceback')}" not in rows_query
    assert f"{quoted('django_cronqueue_job')}.{quoted('payload')}" not in rows_query


def test_large_unfiltered_list_uses_an_estimate_not_count(admin_client, monkeypatch):
    mixed_jobs(5)
    monkeypatch.setattr(observe, "estimated_count", lambda queryset: 2_500_000)
    response, queries = queries_for(admin_client, JOBS)
    assert response.context["cl"].result_count == 2_500_000
    assert response.context["cl"].paginator.is_estimate
    assert not [sql for sql in queries if "__count" in sql]
    assert "About 2,500,000 jobs: the database's own estimate" in response.content.decode()


def test_filtered_or_small_lists_count_exactly(admin_client):
    mixed_jobs(12)
    response, _ = queries_for(admin_client, JOBS + "?status=failed")
    assert response.context["cl"].result_count == Job.objects.filter(status="failed").count()
    assert not response.context["cl"].paginator.is_estimate
    response, _ = queries_for(admin_client, JOBS)
    assert response.context["cl"].result_count == 12
    assert not response.context["cl"].paginator.is_estimate


def test_filtered_lists_count_at_most_the_cap(admin_client, monkeypatch):
    from django_cronqueue.admin import JobAdmin

    mixed_jobs(30)  # 6 failed
    monkeypatch.setattr(observe, "COUNT_CAP", 4)
    monkeypatch.setattr(JobAdmin, "list_per_page", 2)
    response, _ = queries_for(admin_client, JOBS + "?status=failed")
    changelist = response.context["cl"]
    assert (changelist.result_count, changelist.paginator.num_pages) == (4, 2)
    assert changelist.paginator.is_lower_bound
    assert "More than 4 jobs match" in response.content.decode()
    assert len(changelist.result_list) == 2


def test_estimated_count_reads_the_statistics(db):
    mixed_jobs(30)
    assert observe.estimated_count(Job.objects.filter(status="failed")) is None
    estimate = observe.estimated_count(Job.objects.all())
    if connection.vendor == "sqlite":
        assert estimate is None
    else:
        # Statistics lag behind inserts (and PostgreSQL says -1 before the first ANALYZE):
        # whatever they say, it is a number or "unknown", never a scan.
        assert estimate is None or estimate >= 0


def test_distinct_values_walk_the_index(db):
    mixed_jobs(30)
    assert observe.distinct_values("name") == [
        "testapp.gone_job",
        "testapp.noop",
        "testapp.record",
    ]
    assert observe.distinct_values("queue") == ["default", "emails"]
    with pytest.raises(ValueError, match="supports name and queue"):
        observe.distinct_values("last_error")


def test_schedule_list_query_count_is_constant(admin_client):
    def add(n):
        for _ in range(n):
            row = CronScheduleFactory(last_occurrence=timezone.now() - dt.timedelta(hours=1))
            JobFactory(name=row.name, scheduled_for=row.last_occurrence, payload={})

    add(2)
    _, small = queries_for(admin_client, SCHEDULES)
    add(30)
    _, large = queries_for(admin_client, SCHEDULES)
    assert len(large) == len(small) <= 6, "\n".join(large)


def test_dashboard_query_count_is_constant(admin_client):
    def add(n, offset):
        mixed_jobs(n)
        for i in range(n // 10):
            WorkerFactory()
            CronScheduleFactory(name=f"tests.dash_{offset}_{i}")

    add(20, 0)
    _, small = queries_for(admin_client, DASHBOARD)
    add(200, 1)
    _, large = queries_for(admin_client, DASHBOARD)
    # 3 of them read schedules: the code ones, the dynamic ones that run next, the counts;
    # 2 count the jobs and 2 the outcomes per hour (each the mark of the counted history,
    # then the counts: observe.counts)
    assert len(large) == len(small) <= 16, "\n".join(large)


def test_select_all_actions_are_batched_with_one_history_insert_per_batch(admin_client):
    """Select all on 3,000 rows: a few queries per batch of 500 (never one per row), no
    Job object loaded, a history entry per job written by one INSERT per batch, one
    message with the count."""
    from django.contrib.admin.models import LogEntry

    def retry_all(n):
        Job.objects.all().delete()
        Job.objects.bulk_create(
            JobFactory.build(status=JobStatus.FAILED, dedupe_key=f"k{i}") for i in range(n)
        )
        LogEntry.objects.all().delete()
        data = {"action": "retry_jobs", "select_across": 1, "index": 0, "_selected_action": [1]}
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.post(JOBS + "?status=failed", {**data, "post": "yes"})
        # read before the next request, which empties the connection's log of queries
        statements = [query["sql"] for query in captured.captured_queries]
        assert response.status_code == 302
        assert Job.objects.filter(status=JobStatus.PENDING).count() == n
        assert LogEntry.objects.count() == n
        shown = [str(message) for message in admin_client.get(JOBS).context["messages"]]
        return statements, shown

    small, _ = retry_all(3)
    large, messages = retry_all(3000)
    extra_batches = 3000 // bulk.BATCH_SIZE - 1
    # per batch: read, dedupe-key check, its transaction (2), the UPDATE's savepoint (2),
    # the lock of the counts, the rows locked, the UPDATE, what the rows wait for (3), the
    # history INSERTs (1 to 4), and a vendor's extra (MariaDB's partition move); then a
    # last read
    assert len(large) <= len(small) + extra_batches * 18 + 1, "\n".join(large)
    inserts = [sql for sql in large if sql.startswith("INSERT") and "django_admin_log" in sql]
    # many entries per INSERT: 500 on PostgreSQL and MariaDB, about 140 under SQLite's limit
    # of 999 parameters per statement
    assert 3000 // bulk.BATCH_SIZE <= len(inserts) <= 3000 // 100
    assert messages[0].startswith("Retried 3,000 jobs: #")
    assert messages[0].endswith(" and 2,990 more.")


def test_job_detail_query_count(admin_client):
    job = JobFactory(status=JobStatus.RUNNING, worker_id="w1")
    _, queries = queries_for(
        admin_client, reverse("admin:django_cronqueue_job_change", args=[job.pk])
    )
    assert len(queries) <= 8, "\n".join(queries)


def test_schedule_list_reads_last_occurrences_for_its_page_only(admin_client):
    """The page's query has no subquery on the job table (an OFFSET would run it for every
    row it skips); one more query reads the last occurrences of the page's rows."""
    for _ in range(3):
        row = CronScheduleFactory(last_occurrence=timezone.now() - dt.timedelta(hours=1))
        JobFactory(name=row.name, scheduled_for=row.last_occurrence, payload={})
    response, captured = queries_for(admin_client, SCHEDULES + "?p=1")
    statements = [sql.replace("`", '"') for sql in captured]  # MySQL quotes with backticks
    reads = [sql for sql in statements if 'FROM "django_cronqueue_cronschedule"' in sql]
    page = [sql for sql in reads if "COUNT(*)" not in sql and " IN (" not in sql]
    job_reads = [sql for sql in statements if "django_cronqueue_job" in sql]
    assert len(page) == 1 and "django_cronqueue_job" not in page[0]
    assert len(job_reads) == 1 and " IN (" in job_reads[0]
    assert response.content.decode().count('href="/admin/django_cronqueue/job/') >= 3
