"""What a move to history does on every vendor that keeps one (PostgreSQL's history
tables, MariaDB's history partition): a retried row comes back and runs again, and the
rows of a workflow and those within their dedupe_for span stay until they may go; a pass
moves what it owes, then yields to the drain."""

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from django_cronqueue import jobs
from django_cronqueue.history import archive
from django_cronqueue.models import Job
from tests.db.history.test_tables import run_all
from tests.testapp import jobs as test_jobs
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite keeps one table"),
]

TABLE = Job._meta.db_table
WHERE_IT_IS = {  # id, and whether the row is in history
    "postgresql": f"SELECT id, tableoid::regclass::text <> '{TABLE}' FROM {TABLE}",
    "mysql": f"SELECT id, archived = 1 FROM {TABLE}",
}


def in_history() -> dict[int, bool]:
    with connection.cursor() as cursor:
        cursor.execute(WHERE_IT_IS[connection.vendor])
        return {pk: bool(moved) for pk, moved in cursor.fetchall()}


def test_a_retried_row_comes_back_from_history_and_runs_again():
    failed = jobs.enqueue(test_jobs.fails_until_fixed, {"key": "retry"})
    now = timezone.now()
    run_all(now)
    assert archive.archive(now) == 1
    assert in_history() == {failed.pk: True}

    SideEffect.objects.create(key="fixed retry", pid=0)
    assert Job.objects.get(pk=failed.pk).retry(now=now)
    assert in_history() == {failed.pk: False}
    run_all(now)
    assert Job.objects.get(pk=failed.pk).status == "succeeded"


def test_workflow_rows_and_rows_within_their_dedupe_span_stay():
    first, second = jobs.chain(test_jobs.record.s(key="1"), test_jobs.record.s(key="2")).enqueue()
    spanned = jobs.enqueue(
        test_jobs.record, {"key": "s"}, dedupe_key="k", dedupe_for=dt.timedelta(hours=1)
    )
    now = timezone.now()
    run_all(now)
    run_all(now)
    assert archive.archive(now) == 0
    assert set(in_history().values()) == {False}

    later = now + dt.timedelta(hours=2)
    assert archive.archive(later) == 1
    assert in_history()[spanned.pk]
    again = jobs.enqueue(
        test_jobs.record, {"key": "s"}, dedupe_key="k", dedupe_for=dt.timedelta(hours=1)
    )
    assert again.pk != spanned.pk
    assert not in_history()[first.pk] and not in_history()[second.pk]


def test_a_pass_moves_what_it_owes_then_stops_once_the_workers_fall_behind():
    for key in range(7):
        jobs.enqueue(test_jobs.record, {"key": f"owed {key}"})
    now = timezone.now()
    run_all(now)
    questions = []

    def behind() -> bool:  # a backlog formed as the pass's third batch was written
        questions.append(now)
        return len(questions) == 2

    # Batches of 2 (a batch never moves more than its size, whatever the plan): 4 rows
    # for the 3 owed, one batch with room, then the pass stops for the drain.
    budget = archive.Budget(rows=7, owed=3, behind=behind)
    assert archive.archive(now, batch_size=2, budget=budget) == 6
    assert len(questions) == 2
    assert sorted(in_history().values()) == [False, True, True, True, True, True, True]
    assert archive.archive(now, batch_size=2) == 1
