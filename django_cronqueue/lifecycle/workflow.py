"""Workflows on the completion side (``django_cronqueue.enqueueing.workflows`` writes them).

Each function runs inside the transaction of the transition that calls it, so a crash
cannot record an upstream success and lose the release of its downstream:

- ``after_success``: the jobs that waited for it count one upstream less, and those left
  with none are released (``blocked`` false, due now at the latest); a group member is
  counted in its batch.
- ``after_end``: a job that failed for good or was cancelled cancels the jobs that waited
  for it (and theirs), naming it in their ``last_error``; a member is counted as failed.
- A batch whose last member finished is finished once (its row is locked by the count,
  so of two members finishing at once on two workers exactly one sees the batch full):
  ``then`` is released if every member succeeded, else cancelled; ``finally_`` released.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Greatest

from ..claiming import ClaimedJob
from ..conf import database_alias
from ..db.notify import wake_workers
from ..history.counting import ROW_FIELDS
from ..models import Batch, Job, JobDependency, JobStatus
from ..values.error_text import MAX_ERROR_CHARS, clean_text
from .common import apply_changes, erase_secrets, erase_unsaved, job_rows

ENDED = (JobStatus.FAILED, JobStatus.CANCELLED)
BATCH_TABLE = Batch._meta.db_table
# A batch's count of members, by outcome, returning what finishing it needs to know.
RETURNING_COUNTS = " WHERE id = %s RETURNING size, succeeded, failed, finished_at"
COUNT_MEMBERS = {
    "succeeded": f"UPDATE {BATCH_TABLE} SET succeeded = succeeded + %s{RETURNING_COUNTS}",
    "failed": f"UPDATE {BATCH_TABLE} SET failed = failed + %s{RETURNING_COUNTS}",
}


def upstream_ended_text(pk: int, name: str, status: str) -> str:
    """The ``last_error`` of a job cancelled because its upstream job ``pk`` ended."""
    verb = "failed" if status == JobStatus.FAILED else "was cancelled"
    return f"upstream job #{pk} ({name}) {verb}"


def mark_upstream_ended(job: Job, reason: str, *, now: dt.datetime) -> None:
    """An unsaved row whose upstream job ended without success: created cancelled."""
    erase_unsaved(job)
    apply_changes(job, _cancelled(reason, now))


def _cancelled(reason: str, now: dt.datetime) -> dict[str, object]:
    return {
        "status": JobStatus.CANCELLED,
        "finished_at": now,
        "active_dedupe_key": None,
        "last_error": clean_text(reason, MAX_ERROR_CHARS),
    }


def after_success(
    job_id: int, *, has_downstream: bool, batch_id: int | None, now: dt.datetime
) -> None:
    """Job ``job_id`` has just been marked succeeded, in the caller's transaction."""
    if has_downstream:
        release_downstream([job_id], now)
    if batch_id is not None:
        member_finished(batch_id, job_id, succeeded=True, now=now)


def after_end(job_ids: Sequence[int], now: dt.datetime) -> None:
    """The jobs ``job_ids`` have just ended without success (failed for good or
    cancelled), in the caller's transaction."""
    if not job_ids:
        return
    rows = (
        job_rows()
        .filter(pk__in=list(job_ids), status__in=ENDED)
        .exclude(has_downstream=False, batch__isnull=True)
        .values_list("pk", "name", "status", "has_downstream", "batch_id")
    )
    for pk, name, status, has_downstream, batch_id in rows:
        if has_downstream:
            cancel_downstream(pk, name, status, now)
        if batch_id is not None:
            member_finished(batch_id, pk, succeeded=False, now=now)


def release_downstream(upstream_ids: Sequence[int], now: dt.datetime) -> int:
    """Count one upstream job less for each job waiting on ``upstream_ids``; release
    those left waiting on none. Returns how many were released."""
    links = JobDependency.objects.using(database_alias()).filter(upstream_id__in=upstream_ids)
    counts = Counter(links.values_list("downstream_id", flat=True))
    if not counts:
        return 0
    by_count: dict[int, list[int]] = {}
    for downstream, count in counts.items():
        by_count.setdefault(count, []).append(downstream)
    waiting = job_rows().filter(status=JobStatus.PENDING, blocked=True)
    for count, ids in by_count.items():
        waiting.filter(pk__in=ids, waiting_for__gte=count).update(
            waiting_for=F("waiting_for") - count
        )
    return _release(waiting.filter(pk__in=list(counts), waiting_for=0), now)


def _release(rows: object, now: dt.datetime) -> int:
    released = rows.update(blocked=False, run_at=Greatest(F("run_at"), now))  # type: ignore[attr-defined]
    if released:
        wake_workers(database_alias(), [now], now)
    return int(released)


def cancel_downstream(pk: int, name: str, status: str, now: dt.datetime) -> int:
    """Cancel the pending jobs that wait on job ``pk`` (which ended with ``status``),
    and theirs, each naming the job it waited for. Returns how many."""
    cancelled = 0
    ended = [(pk, name, status)]
    while ended:
        up_pk, up_name, up_status = ended.pop()
        links = JobDependency.objects.using(database_alias()).filter(upstream_id=up_pk)
        # Locked as they are read: a using(after=...) that is adding a job after one of
        # them has committed its has_downstream, or waits and then sees it cancelled.
        downstream = list(
            job_rows()
            .filter(pk__in=links.values("downstream_id"), status=JobStatus.PENDING)
            .select_for_update()
            .values_list("pk", "name", "has_downstream", "batch_id")
        )
        if not downstream:
            continue
        reason = upstream_ended_text(up_pk, up_name, up_status)
        ids = [row[0] for row in downstream]
        job_rows().filter(pk__in=ids, status=JobStatus.PENDING).update(**_cancelled(reason, now))
        erase_secrets(ids)
        cancelled += len(ids)
        for down_pk, down_name, has_downstream, batch_id in downstream:
            if has_downstream:
                ended.append((down_pk, down_name, JobStatus.CANCELLED))
            if batch_id is not None:
                member_finished(batch_id, down_pk, succeeded=False, now=now)
    return cancelled


def members_succeeded(jobs: Sequence[ClaimedJob], now: dt.datetime) -> None:
    """Count the members ``jobs``, just written succeeded (in the caller's transaction),
    in their batches: one UPDATE per batch."""
    by_batch: dict[int, list[int]] = {}
    for job in jobs:
        if job.batch_id is not None:
            by_batch.setdefault(job.batch_id, []).append(job.id)
    for batch_id, ids in sorted(by_batch.items()):  # in id order: no deadlock between two
        member_finished(batch_id, ids[-1], succeeded=True, now=now, count=len(ids))


def member_finished(
    batch_id: int, job_id: int, *, succeeded: bool, now: dt.datetime, count: int = 1
) -> None:
    """Count ``count`` members (the last of them ``job_id``) of batch ``batch_id``;
    finish the batch if they were the last. The UPDATE locks the batch row until the
    caller's transaction ends."""
    counter = "succeeded" if succeeded else "failed"
    connection = connections[database_alias()]
    # MariaDB and MySQL have no UPDATE ... RETURNING, SQLite has it from 3.35.
    if connection.vendor == "mysql" or not connection.features.can_return_columns_from_insert:
        Batch.objects.using(database_alias()).filter(pk=batch_id).update(
            **{counter: F(counter) + count}
        )
        finish_if_complete(batch_id, job_id, now)
        return
    with connection.cursor() as cursor:
        cursor.execute(COUNT_MEMBERS[counter], [count, batch_id])
        found = cursor.fetchone()
    if found is not None:
        size, succeeded_count, failed_count, finished_at = found
        if finished_at is None and succeeded_count + failed_count >= size:
            finish_if_complete(batch_id, job_id, now)


def finish_if_complete(batch_id: int, last_member: int, now: dt.datetime) -> bool:
    """Finish the batch if every member finished and it was not finished yet: release
    or cancel its callbacks. True when this call finished it."""
    batches = Batch.objects.using(database_alias())
    found = (
        batches.filter(pk=batch_id)
        .values_list("size", "succeeded", "failed", "finished_at", "then_job_id", "finally_job_id")
        .first()
    )
    if found is None:
        return False
    size, succeeded, failed, finished_at, then_id, finally_id = found
    if finished_at is not None or succeeded + failed < size:
        return False
    if not batches.filter(pk=batch_id, finished_at__isnull=True).update(finished_at=now):
        return False
    callbacks = job_rows().filter(status=JobStatus.PENDING, blocked=True)
    if then_id is not None:
        if failed:
            callbacks.filter(pk=then_id).update(
                **_cancelled(_batch_failed_text(batch_id, failed, size, last_member), now)
            )
        else:
            _release(callbacks.filter(pk=then_id), now)
    if finally_id is not None:
        _release(callbacks.filter(pk=finally_id), now)
    return True


def _batch_failed_text(batch_id: int, failed: int, size: int, last_member: int) -> str:
    """Names the first member that failed or was cancelled, and the count."""
    first = (
        job_rows()
        .filter(batch_id=batch_id, status__in=[JobStatus.FAILED, JobStatus.CANCELLED])
        .order_by("pk")
        .values_list("pk", "name", "status")
        .first()
    )
    pk, name, status = first or (last_member, "?", JobStatus.FAILED)
    return (
        f"{upstream_ended_text(pk, name, status)}: {failed} of {size} member(s) of "
        f"batch #{batch_id} failed or were cancelled"
    )


def reopen(job_ids: Sequence[int], now: dt.datetime) -> list[tuple[Any, ...]]:
    """The jobs ``job_ids`` were retried (failed or cancelled -> pending), in the
    caller's transaction. Each waits again for what it waits for, as things stand now
    (``settle``); a member counts as unfinished again in its batch, and a batch whose
    ``then`` callback was cancelled for its failures is reopened (the callback waits
    again); the jobs that were cancelled because one of them ended are reopened too, and
    theirs. Returns the rows it reopened as they were (``history.ROW_FIELDS``), for the
    caller to take out of the counts of finished rows."""
    rows = list(
        job_rows()
        .filter(pk__in=list(job_ids), status=JobStatus.PENDING)
        .values_list("pk", "has_downstream", "batch_id")
    )
    left: list[tuple[Any, ...]] = []
    for _, _, batch_id in rows:
        if batch_id is not None:
            left += _reopen_batch(batch_id)
    settle([pk for pk, _, _ in rows], now)
    reopened = [pk for pk, has_downstream, _ in rows if has_downstream]
    while reopened:
        pk = reopened.pop()
        links = JobDependency.objects.using(database_alias()).filter(upstream_id=pk)
        cancelled = job_rows().filter(
            pk__in=links.values("downstream_id"),
            status=JobStatus.CANCELLED,
            last_error__startswith=f"upstream job #{pk} (",
        )
        ids = _wait_again(cancelled, left)
        settle(ids, now)
        again = job_rows().filter(pk__in=ids, status=JobStatus.PENDING)
        for down_pk, has_downstream, batch_id in again.values_list(
            "pk", "has_downstream", "batch_id"
        ):
            if batch_id is not None:
                left += _reopen_batch(batch_id)
            if has_downstream:
                reopened.append(down_pk)
    return left


def _wait_again(cancelled: QuerySet[Job], left: list[tuple[Any, ...]]) -> list[int]:
    """The ``cancelled`` rows wait again; appends them, as they were, to ``left``."""
    rows = list(cancelled.values_list("pk", *ROW_FIELDS))
    ids = [row[0] for row in rows]
    cancelled.filter(pk__in=ids).update(**_waiting_again())
    left += [row[1:] for row in rows]
    return ids


def settle(job_ids: Sequence[int], now: dt.datetime) -> None:
    """Jobs just made pending again (a retry): a batch's callback waits while its batch
    runs, and once it finished is released (``then``: if no member failed, else
    cancelled again); a job with upstream jobs waits for those that have not succeeded
    yet, is released if all have, and is cancelled again, naming it, if one of them
    failed for good or was cancelled (retry that one: it brings this one back)."""
    if not job_ids:
        return
    ended: list[int] = []
    for pk, batch_id, kind in _callbacks(job_ids):
        ended += _settle_callback(pk, batch_id, kind, now)
    # One UPDATE per outcome (per reason, per count left), not one per job: a retry of
    # 500 rows from the admin is a batch.
    cancel: dict[str, list[int]] = {}
    wait: dict[int, list[int]] = {}
    for pk, (not_succeeded, ended_upstream) in _upstream_states(job_ids).items():
        if ended_upstream is not None:
            cancel.setdefault(upstream_ended_text(*ended_upstream), []).append(pk)
        else:
            wait.setdefault(not_succeeded, []).append(pk)
    pending = job_rows().filter(status=JobStatus.PENDING)
    for reason, ids in cancel.items():
        rows = pending.filter(pk__in=ids)
        ended += list(rows.values_list("pk", flat=True))
        rows.update(**_cancelled(reason, now))
    for not_succeeded, ids in wait.items():
        rows = pending.filter(pk__in=ids)
        if not_succeeded:
            rows.update(blocked=True, waiting_for=not_succeeded)
        else:
            _release(rows.filter(blocked=True), now)
            rows.update(waiting_for=0)
    after_end(ended, now)


def _callbacks(job_ids: Sequence[int]) -> list[tuple[int, int, str]]:
    """(job id, batch id, "then" or "finally") of the jobs among ``job_ids`` that are a
    batch's callback."""
    ids = set(job_ids)
    batches = Batch.objects.using(database_alias()).filter(
        Q(then_job_id__in=ids) | Q(finally_job_id__in=ids)
    )
    found = []
    for batch_id, then_id, finally_id in batches.values_list("pk", "then_job_id", "finally_job_id"):
        found += [(then_id, batch_id, "then")] if then_id in ids else []
        found += [(finally_id, batch_id, "finally")] if finally_id in ids else []
    return found


def _settle_callback(pk: int, batch_id: int, kind: str, now: dt.datetime) -> list[int]:
    """Returns [pk] if the callback is cancelled again."""
    rows = job_rows().filter(pk=pk, status=JobStatus.PENDING)
    batch = Batch.objects.using(database_alias()).filter(pk=batch_id)
    size, failed, finished_at = batch.values_list("size", "failed", "finished_at").get()
    if finished_at is None:
        rows.update(blocked=True, waiting_for=0)
    elif kind == "then" and failed:
        if rows.update(**_cancelled(_batch_failed_text(batch_id, failed, size, pk), now)):
            return [pk]
    else:
        _release(rows.filter(blocked=True), now)
    return []


def _upstream_states(job_ids: Sequence[int]) -> dict[int, tuple[int, tuple[int, str, str] | None]]:
    """For each of ``job_ids`` with upstream jobs: how many of them have not succeeded,
    and the first (by id) that failed for good or was cancelled, if any."""
    links = (
        JobDependency.objects.using(database_alias())
        .filter(downstream_id__in=list(job_ids))
        .order_by("downstream_id", "upstream_id")
        .values_list("downstream_id", "upstream_id", "upstream__name", "upstream__status")
    )
    states: dict[int, tuple[int, tuple[int, str, str] | None]] = {}
    for down_pk, up_pk, up_name, up_status in links:
        not_succeeded, ended = states.get(down_pk, (0, None))
        if up_status != JobStatus.SUCCEEDED:
            not_succeeded += 1
        if ended is None and up_status in ENDED:
            ended = (up_pk, up_name, up_status)
        states[down_pk] = (not_succeeded, ended)
    return states


def _waiting_again() -> dict[str, object]:
    return {"status": JobStatus.PENDING, "blocked": True, "finished_at": None, "last_error": ""}


def _reopen_batch(batch_id: int) -> list[tuple[Any, ...]]:
    """A member of the batch was retried; returns the ``then`` callback it reopened, as
    it was (none, or one row)."""
    batches = Batch.objects.using(database_alias()).filter(pk=batch_id)
    batches.filter(failed__gt=0).update(failed=F("failed") - 1)
    then_id = batches.values_list("then_job_id", flat=True).first()
    if then_id is None:
        return []
    cancelled_then = job_rows().filter(
        pk=then_id, status=JobStatus.CANCELLED, last_error__startswith="upstream job #"
    )
    left: list[tuple[Any, ...]] = []
    if _wait_again(cancelled_then, left):
        batches.update(finished_at=None)
    return left
