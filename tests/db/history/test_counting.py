"""The counts of finished rows kept by housekeeping (``django_cronqueue.history.counting``) and
read with the live rows (``observe.counts``), on every database: a pass counts each
finished row once; the prune, a retry and the workflow jobs a retry reopens take their
rows out; two passes at once (separate processes) never count a row twice; and the
dashboard, ``cronqueue_status`` and ``MetricsView`` show what an exact count shows."""

import datetime as dt
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count
from django.test import override_settings
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.history import counting
from django_cronqueue.housekeeping import maintenance
from django_cronqueue.models import (
    FINISHED_STATUSES,
    FinishedCount,
    FinishedCountMark,
    FinishedDayCount,
    Job,
    JobStatus,
)
from django_cronqueue.observe import counts
from tests.cron_helpers import schedule
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
SETTLED = dt.timedelta(minutes=5)  # past the settle margin: a pass counts what finished
HOUR = dt.timedelta(hours=1)
DASHBOARD = "/admin/django_cronqueue/job/dashboard/"


def exact():
    """Rows per (status, name, queue), counted from the job table."""
    rows = Job.objects.order_by().values_list("status", "name", "queue").annotate(n=Count("*"))
    return {(status, name, queue): n for status, name, queue, n in rows}


def exact_finished():
    return {key: n for key, n in exact().items() if key[0] in FINISHED_STATUSES}


def kept():
    """What the counts table holds in all."""
    rows = FinishedCount.objects.filter(hour__isnull=True)
    return {(c.status, c.name, c.queue): c.rows for c in rows}


def kept_days():
    return {(c.status, c.name, c.queue, c.day): c.rows for c in FinishedDayCount.objects.all()}


def exact_days():
    """Finished rows per (status, name, queue, UTC day of finished_at), from the job table."""
    days: dict[tuple, int] = {}
    rows = Job.objects.filter(status__in=FINISHED_STATUSES, finished_at__isnull=False)
    for status, name, queue, finished_at in rows.values_list(
        "status", "name", "queue", "finished_at"
    ):
        key = (status, name, queue, finished_at.astimezone(dt.timezone.utc).date())
        days[key] = days.get(key, 0) + 1
    return days


def kept_hours():
    rows = FinishedCount.objects.filter(hour__isnull=False)
    return {(c.status, c.name, c.queue, c.hour): c.rows for c in rows}


def finish_some(now):
    """Two successes (one on queue emails), a failure and a cancelled job, run at ``now``;
    returns the failed one."""
    jobs.enqueue(test_jobs.record, {"key": "a"}, run_at=now)
    jobs.enqueue(test_jobs.record, {"key": "b"}, run_at=now, queue="emails")
    failing = jobs.enqueue(test_jobs.fails_now, {"key": "c"}, run_at=now)
    jobs.enqueue(test_jobs.record, {"key": "d"}, run_at=now + dt.timedelta(days=1)).cancel(now=now)
    jobs.tick(now=now)
    return failing


def test_a_pass_counts_each_finished_row_once():
    now = timezone.now() - HOUR
    finish_some(now)
    jobs.enqueue(test_jobs.record, {"key": "pending"}, run_at=now + dt.timedelta(days=1))
    assert kept() == {}
    assert counting.count_finished(now + SETTLED) == 4
    assert (
        kept()
        == exact_finished()
        == {
            ("succeeded", "testapp.record", "default"): 1,
            ("succeeded", "testapp.record", "emails"): 1,
            ("failed", "testapp.fails_now", "default"): 1,
            ("cancelled", "testapp.record", "default"): 1,
        }
    )
    assert kept_days() == exact_days() and sum(kept_days().values()) == 4
    assert counting.count_finished(now + 2 * SETTLED) == 0
    assert kept() == exact_finished()
    assert counts.job_counts() == exact()


def test_a_pass_after_the_first_reads_its_rows_once_and_keeps_every_count_exact():
    """A minute of a busy drain is hundreds of thousands of rows: a pass whose rows all
    finished within the hours kept reads them once, by hour, and adds the counts in all
    and per day from those hours."""
    now = timezone.now() - HOUR
    finish_some(now - dt.timedelta(days=1))
    counting.count_finished(now - dt.timedelta(days=1) + SETTLED)
    finish_some(now)
    reads = []

    def capture(execute, sql, params, many, context):
        if "GROUP BY" in sql and Job._meta.db_table in sql:
            reads.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        assert counting.count_finished(now + SETTLED) == 4
    assert len(reads) == 1
    assert kept() == exact_finished()
    assert kept_days() == exact_days() and len({key[3] for key in kept_days()}) == 2
    assert sum(kept_hours().values()) == 8 and len({key[3] for key in kept_hours()}) == 2


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": None})
def test_counts_kept_without_their_days_are_counted_again_with_them():
    """As on a site upgraded from a version that kept no counts per day: its next pass
    counts the history again, with the days, in one transaction."""
    now = timezone.now() - HOUR
    finish_some(now - dt.timedelta(days=2))
    finish_some(now)
    counting.count_finished(now + SETTLED)
    FinishedDayCount.objects.all().delete()
    FinishedCountMark.objects.update(by_day=False)
    assert counting.count_finished(now + SETTLED) == 8  # all of them again, none twice
    assert kept() == exact_finished()
    assert kept_days() == exact_days() and len({key[3] for key in kept_days()}) == 2
    assert FinishedCountMark.objects.get().by_day
    assert counts.job_counts() == exact()


def test_rows_finished_within_the_settle_margin_are_read_from_the_table_until_counted():
    now = timezone.now() - HOUR
    finish_some(now)
    assert counting.count_finished(now) == 0  # finished at now: not settled yet
    assert kept() == {}
    assert counts.job_counts() == exact()
    assert counting.count_finished(now + SETTLED) == 4
    assert counts.job_counts() == exact()


def test_before_any_pass_the_finished_rows_are_counted_from_the_table():
    finish_some(timezone.now())
    assert counts.job_counts() == exact()


def test_a_pass_never_counts_past_the_clock_of_its_process():
    """A tick given a ``now`` a day ahead (as tests do) counts nothing ahead: the rows that
    finish meanwhile, stamped by the real clock, are counted by a later pass."""
    counting.count_finished(timezone.now() + dt.timedelta(days=1))
    finish_some(timezone.now())
    assert counts.job_counts() == exact()
    assert counting.count_finished(timezone.now() + SETTLED) == 0  # not settled yet
    mark = FinishedCountMark.objects.get().counted_until
    assert mark <= timezone.now() - counting.settle_margin()


def test_a_cancel_stamped_by_a_clock_behind_the_counts_mark_is_counted():
    """A web host whose clock runs five minutes behind cancels pending jobs (a chain's
    head, whose downstream job is cancelled with it) after a pass moved the mark past
    that time: their rows are stamped before the mark, where no pass looks. Before,
    they were never counted; the cancel now counts them itself, once."""
    now = timezone.now()
    finish_some(now - HOUR)
    counting.count_finished(now)  # the mark: a minute before now
    later = now + dt.timedelta(days=1)
    single = jobs.enqueue(test_jobs.record, {"key": "single"}, run_at=later)
    head = jobs.chain(
        test_jobs.record.using(run_at=later).s(key="head"), test_jobs.record.s(key="next")
    ).enqueue()[0]
    behind = now - dt.timedelta(minutes=5)
    assert single.cancel(now=behind) and head.cancel(now=behind)
    assert Job.objects.filter(status="cancelled", finished_at=behind).count() == 3
    assert counts.job_counts() == exact()
    counting.count_finished(now + SETTLED)  # a later pass does not count them again
    assert kept() == exact_finished()
    assert kept_days() == exact_days()
    assert counts.job_counts() == exact()


def test_a_tick_given_a_past_now_counts_the_rows_it_finishes_before_the_mark():
    """``jobs.tick(now=<an hour ago>)`` after a pass moved the mark to a minute ago: the
    successes, the failure and the cancel it stamps an hour ago are before the mark,
    where no pass looks. Before, none of them was ever counted."""
    now = timezone.now()
    counting.count_finished(now)  # the mark: a minute before now
    finish_some(now - HOUR)
    assert counts.job_counts() == exact()
    counting.count_finished(now + SETTLED)  # a later pass does not count them again
    assert kept() == exact_finished()
    assert sum(kept().values()) == 4
    assert kept_days() == exact_days()
    assert counts.job_counts() == exact()


def test_a_job_created_cancelled_behind_the_counts_mark_is_counted():
    """``using(after=[a failed job])`` writes its job cancelled at once, stamped by this
    host's clock; a pass on a host whose clock runs five minutes ahead has moved the
    mark past that instant. The enqueue counts the row itself, once."""
    now = timezone.now()
    upstream = finish_some(now - HOUR)  # the failed one
    counting.count_finished(now)
    FinishedCountMark.objects.update(counted_until=now + dt.timedelta(minutes=5))
    down = test_jobs.record.using(after=[upstream]).enqueue(key="down")
    assert down.status == JobStatus.CANCELLED
    assert counts.job_counts() == exact()
    counting.count_finished(now + SETTLED)  # a later pass does not count it again
    assert kept() == exact_finished()
    assert counts.job_counts() == exact()


def test_a_tick_given_a_past_now_counts_the_occurrences_it_skips_before_the_mark():
    """An overlap skip is created cancelled, stamped with the tick's ``now``: an hour ago,
    behind the mark of a pass a minute ago. The tick counts it itself."""
    now = timezone.now()
    counting.count_finished(now)  # the mark: a minute before now
    past = (now - HOUR).replace(second=30, microsecond=0)
    with schedule("* * * * *", name="tests.counted_skip", tz="UTC", overlap="skip"):
        jobs.pause(name="tests.counted_skip")  # its occurrences wait, pending
        jobs.tick(now=past)  # armed
        jobs.tick(now=past + dt.timedelta(minutes=1))  # the first occurrence waits
        jobs.tick(now=past + dt.timedelta(minutes=2))  # the next is skipped meanwhile
        skipped = Job.objects.get(status=JobStatus.CANCELLED, name="tests.counted_skip")
        assert skipped.finished_at == past + dt.timedelta(minutes=2)
    assert counts.job_counts() == exact()
    counting.count_finished(now + SETTLED)
    assert kept() == exact_finished()
    assert counts.job_counts() == exact()


def test_a_finished_row_without_finished_at_is_read_never_counted():
    now = timezone.now()
    Job.objects.create(name="testapp.record", status=JobStatus.FAILED)  # as a site might
    counting.count_finished(now + SETTLED)
    assert kept() == {}
    assert counts.job_counts() == exact() == {("failed", "testapp.record", "default"): 1}


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "FAILED_RETENTION": 60})
def test_the_prune_takes_what_it_deletes_out_of_the_counts():
    now = timezone.now() - 2 * HOUR
    finish_some(now)
    counting.count_finished(now + SETTLED)
    later = now + dt.timedelta(minutes=30)
    jobs.enqueue(test_jobs.record, {"key": "later"}, run_at=later)
    jobs.tick(now=later)  # finished after the mark: not counted yet
    assert maintenance.prune(now + dt.timedelta(hours=1)) == 5
    assert Job.objects.count() == 0
    assert kept() == {}  # the counted rows left, and the uncounted one took nothing
    assert kept_days() == {}
    assert counts.job_counts() == exact() == {}


@override_settings(CRONQUEUE={"SUCCEEDED_RETENTION": 60, "FAILED_RETENTION": None})
def test_the_prune_in_batches_keeps_the_counts_of_what_it_keeps():
    now = timezone.now() - 2 * HOUR
    finish_some(now)
    counting.count_finished(now + SETTLED)
    maintenance.prune(now + dt.timedelta(hours=1))
    assert (
        kept()
        == exact_finished()
        == {
            ("failed", "testapp.fails_now", "default"): 1,
            ("cancelled", "testapp.record", "default"): 1,
        }
    )
    assert kept_days() == exact_days()


def test_a_retry_from_failed_leaves_the_failed_count():
    now = timezone.now() - HOUR
    failing = finish_some(now)
    counting.count_finished(now + SETTLED)
    assert kept()[("failed", "testapp.fails_now", "default")] == 1
    failing.refresh_from_db()
    assert failing.retry(now=now + SETTLED)
    assert ("failed", "testapp.fails_now", "default") not in kept()
    assert kept() == exact_finished()
    assert kept_days() == exact_days()
    assert counts.job_counts() == exact()
    jobs.tick(now=now + SETTLED)  # fails again, counted again once settled
    counting.count_finished(now + 2 * SETTLED)
    assert kept() == exact_finished()
    assert kept()[("failed", "testapp.fails_now", "default")] == 1


def test_a_retry_of_a_row_not_counted_yet_takes_nothing_out():
    now = timezone.now() - HOUR
    failing = finish_some(now)
    counting.count_finished(now)  # the mark is set, before these rows finished
    failing.refresh_from_db()
    assert failing.retry(now=now)
    assert kept() == {}
    counting.count_finished(now + SETTLED)
    assert kept() == exact_finished()
    assert counts.job_counts() == exact()


def test_a_retry_that_reopens_a_chain_takes_the_cancelled_downstream_out_too():
    now = timezone.now() - HOUR
    _, second, third = jobs.chain(
        test_jobs.record.s(key="a"), test_jobs.fails_now.s(key="b"), test_jobs.record.s(key="c")
    ).enqueue()
    Job.objects.update(run_at=now)  # enqueued due now: moved to the past of the test
    for step in range(3):
        jobs.tick(now=now + dt.timedelta(seconds=step + 1))
    third.refresh_from_db()
    assert third.status == "cancelled"
    counting.count_finished(now + SETTLED)
    assert (
        kept()
        == exact_finished()
        == {
            ("succeeded", "testapp.record", "default"): 1,
            ("failed", "testapp.fails_now", "default"): 1,
            ("cancelled", "testapp.record", "default"): 1,
        }
    )
    second.refresh_from_db()
    assert second.retry(now=now + SETTLED)
    third.refresh_from_db()
    assert (third.status, third.blocked) == ("pending", True)
    assert kept() == exact_finished() == {("succeeded", "testapp.record", "default"): 1}
    assert kept_days() == exact_days()
    assert counts.job_counts() == exact()


# --- the readers ----------------------------------------------------------------------


def status_report():
    out = io.StringIO()
    call_command("cronqueue_status", "--json", stdout=out)
    return json.loads(out.getvalue())


def metrics_per_status(client):
    totals = dict.fromkeys(JobStatus.values, 0)
    for line in client.get("/metrics/").content.decode().splitlines():
        if line.startswith("cronqueue_jobs{"):
            status = line.split('status="')[1].split('"')[0]
            totals[status] += int(float(line.rsplit(" ", 1)[1]))
    return totals


def test_the_dashboard_status_and_metrics_show_the_exact_counts_after_housekeeping(admin_client):
    now = timezone.now() - HOUR
    finish_some(now)
    failing = finish_some(now + dt.timedelta(minutes=1))
    counting.count_finished(now + SETTLED)
    failing.refresh_from_db()
    failing.retry(now=now)  # out of the counts, pending again
    jobs.enqueue(test_jobs.record, {"key": "recent"}, run_at=now)
    jobs.tick(now=now + SETTLED)  # both finish after the mark: read from the table
    per_status = dict.fromkeys(JobStatus.values, 0)
    per_name: dict[str, dict[str, int]] = {}
    for (status, name, _), n in exact().items():
        per_status[status] += n
        per_name.setdefault(name, {})[status] = per_name.get(name, {}).get(status, 0) + n
    assert (per_status["succeeded"], per_status["failed"], per_status["cancelled"]) == (5, 2, 2)
    report = status_report()
    assert (report["counts"], report["counts_by_name"]) == (per_status, per_name)
    assert metrics_per_status(admin_client) == per_status
    response = admin_client.get(DASHBOARD)
    shown = {item["status"]: item["count"] for item in response.context["status_counts"]}
    assert shown == {status: f"{n:,}" for status, n in per_status.items()}


def per_hour(rows):
    summed = {}
    for name, status, hour, n in rows:
        key = (name, status, counting.hour_of(hour))
        summed[key] = summed.get(key, 0) + n
    return summed


def test_the_outcomes_per_hour_are_those_of_the_table_after_housekeeping():
    now = counting.hour_of(timezone.now()) - dt.timedelta(minutes=30)  # 30 to 90 minutes ago
    for hours_ago in (30, 20, 3, 1):  # 30 hours ago: out of the chart
        finish_some(now - dt.timedelta(hours=hours_ago))
    failing = finish_some(now)
    counting.count_finished(now + SETTLED)
    assert counting.hour_of(now) in {key[3] for key in kept_hours()}
    assert counting.hour_of(now - dt.timedelta(hours=30)) in {key[3] for key in kept_hours()}
    failing.refresh_from_db()
    failing.retry(now=now + SETTLED)  # out of its hour too
    jobs.enqueue(test_jobs.record, {"key": "recent"}, run_at=now + SETTLED)
    jobs.tick(now=now + SETTLED)  # after the mark
    later = now + SETTLED + dt.timedelta(seconds=1)
    first = counting.hour_of(later) - dt.timedelta(hours=23)
    statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED]
    table = Job.objects.filter(status__in=statuses, finished_at__gte=first, finished_at__lte=later)
    exact_rows = table.values_list("name", "status", "finished_at").annotate(n=Count("pk"))
    read = per_hour(counts.finished_per_hour(first, later, statuses))
    assert read == per_hour(exact_rows)
    # 20, 3 and 1 hours ago and now, three each; the retried one failed again, and "recent"
    assert sum(read.values()) == 4 * 3 + 1


# --- two passes at once ------------------------------------------------------------------

# The child sets Django up on the test database, says "ready", waits for "go" on stdin and
# runs one pass, printing how many rows it added, or "busy" (another holds the counts).
PASS = """
import datetime as dt, sys
import django

django.setup()
from django.db import connection, transaction
from django_cronqueue import history
from django_cronqueue.history import counting

connection.ensure_connection()
print("ready", flush=True)
sys.stdin.readline()
try:
    print(counting.count_finished(dt.datetime.fromisoformat(sys.argv[1])), flush=True)
except history.Busy:
    print("busy", flush=True)
"""


def start_pass(now):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "CRONQUEUE_TEST_DB_EXACT_NAME": str(connection.settings_dict["NAME"]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", PASS, now.isoformat()],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "ready\n", child.communicate(timeout=60)[1]
    return child


@pytest.mark.e2e
def test_a_pass_in_another_process_leaves_the_counts_to_the_pass_in_progress():
    """Row locks (PostgreSQL, MariaDB): the second pass stops at once, holding nothing (a
    worker frozen with the counts in hand holds up no other worker's pass). SQLite, one
    writer at a time: it waits for the first pass, then finds everything counted."""
    now = timezone.now()
    finished = now - dt.timedelta(minutes=10)
    Job.objects.bulk_create(
        Job(
            name=f"testapp.job_{i % 7}",
            queue=("default", "emails")[i % 2],
            status=FINISHED_STATUSES[i % 3],
            finished_at=finished + dt.timedelta(milliseconds=i),
        )
        for i in range(300)
    )
    counting.count_finished(finished)  # an earlier pass: the mark row is there, counting none
    child = start_pass(now)
    try:
        with transaction.atomic():
            assert counting.count_finished(now) == 300  # not committed yet
            child.stdin.write("go\n")
            child.stdin.flush()
            if connection.vendor == "sqlite":
                with pytest.raises(subprocess.TimeoutExpired):
                    child.wait(timeout=2)  # it waits for this pass's write lock
            else:
                child.wait(timeout=60)  # done while this pass holds the mark
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        # SQLite: everything it would count was counted by the first pass
        assert out.strip() == ("0" if connection.vendor == "sqlite" else "busy")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert kept() == exact_finished()
    assert sum(kept().values()) == 300
