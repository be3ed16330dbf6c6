"""Turning cron occurrences into ``Job`` rows, exactly once.

A process syncs the ``CronSchedule`` rows with its registry on its first tick (and again
when its definitions change or one of their rows has gone missing); every tick then reads
only the due rows and materializes the occurrences that came due since each schedule's
cursor, so a site with a hundred thousand schedules pays for one query on the due
index when nothing is due. Exactly-once creation rests
on the database, never on there being a single scheduler:

- the cursor advances by compare-and-set (``UPDATE ... WHERE cursor = <the value read>``)
  as the first statement of the transaction that inserts the occurrences, so of several
  processes that read the same cursor exactly one wins and the others insert nothing;
- a unique constraint on (name, scheduled_for, schedule) refuses a second row for an
  occurrence whatever path (materialization or backfill) tries to create it: ``name`` is
  the job's, ``schedule`` is "" for a code schedule and the schedule's name for a
  dynamic one, so two dynamic schedules of one job have an occurrence each.

Code schedules (``@jobs.cron``) and dynamic ones (``django_cronqueue.schedules.dynamic``) share
this path; ``Target`` says what a schedule's occurrences are.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import socket
from contextlib import nullcontext
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from .. import lifecycle, signals
from ..conf import database_alias, get_settings
from ..cron.spec import CronSpec
from ..db.notify import wake_workers
from ..definitions.registry import JobDefinition, registry
from ..exceptions import UnknownJob
from ..history import counting
from ..integrations.tracing import producer_span
from ..models import CronSchedule, CronScheduleSource, Job, JobStatus
from .dynamic import Target, code_target, dynamic_target
from .materialize import Occurrences, Planned, build_row, choose_occurrences, plan, write_batch

logger = logging.getLogger("django_cronqueue")

#: Due schedules materialized in one transaction (``Scheduler.materialize``).
BATCH_SIZE = 1000

MAX_BACKFILL = 1000
#: Backfill looks up existing rows this many occurrences at a time (their instants are
#: parameters, and SQLite before 3.32 takes at most 999).
BACKFILL_CHUNK = 500
ONE_MICROSECOND = dt.timedelta(microseconds=1)
EARLIEST_UTC = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _schedules() -> QuerySet[CronSchedule]:
    return CronSchedule.objects.using(database_alias())


def _spec(definition: JobDefinition) -> CronSpec:
    assert definition.cron is not None, f"{definition.name} is not a cron schedule"
    return definition.cron


# --- syncing rows with the code -----------------------------------------------------


def this_process() -> str:
    """How the logs name a process that is not a worker (``jobs.tick()``, a shell)."""
    return f"process {socket.gethostname()}:{os.getpid()}"


def sync_schedules(now: dt.datetime, actor: str | None = None) -> set[str]:
    """Create missing rows (armed at ``now``), update changed ones (an inactive one
    becomes active again), and mark inactive the active rows that neither this process
    nor any live worker defines: of the code schedules only, whatever the number of
    dynamic ones. Both changes of ``active`` are logged at WARNING naming ``actor`` (this
    process). Returns the names of the rows left active for the live workers that
    define them although this process does not."""
    by = actor or this_process()
    definitions = registry.cron_definitions()
    rows = {row.name: row for row in _schedules().filter(source=CronScheduleSource.CODE)}
    undefined = [row for name, row in rows.items() if name not in definitions and row.active]
    kept = _retire(undefined, now, by)
    for name, definition in definitions.items():
        existing = rows.get(name)
        if existing is None:
            _create(definition, now)
        else:
            _update(definition, existing, now, by)
    return kept


def _retire(undefined: list[CronSchedule], now: dt.datetime, by: str) -> set[str]:
    """Mark inactive the rows of ``undefined`` (active rows this process's code lacks)
    that no live worker defines either. One process's settings (a ``DISCOVER`` that
    misses a module) must not switch off the schedules every other worker runs. Returns
    the names left active."""
    if not undefined:
        return set()
    from ..observe.stranded import defined_names

    elsewhere = defined_names(now) or set()
    for row in undefined:
        if row.name in elsewhere:
            continue
        if _schedules().filter(pk=row.pk, active=True).update(active=False, updated_at=now):
            logger.warning(
                "Cron schedule %s is no longer defined in code: marked inactive by %s, as "
                "no live worker defines it either (a process that defines it marks it "
                "active again)",
                row.name,
                by,
            )
    return {row.name for row in undefined if row.name in elsewhere}


def _wanted(definition: JobDefinition) -> dict[str, Any]:
    spec = _spec(definition)
    return {"expression": spec.expression, "tz": spec.tz, "options": spec.options(), "active": True}


def _create(definition: JobDefinition, now: dt.datetime) -> CronSchedule | None:
    """A schedule seen for the first time is armed at ``now``: nothing earlier fires.
    None when a dynamic schedule holds its name (it keeps it; logged)."""
    next_runs = _spec(definition).next_runs(now, 1)
    try:
        with transaction.atomic(using=database_alias()):
            return _schedules().create(
                name=definition.name,
                cursor=now,
                next_run=next_runs[0] if next_runs else None,
                created_at=now,
                updated_at=now,
                **_wanted(definition),
            )
    except IntegrityError:  # another process armed it first, or a dynamic schedule has it
        row = _schedules().get(name=definition.name)
    if row.is_dynamic:
        logger.error(
            "Cron schedule %s is defined in code, but a dynamic schedule has that name: the "
            "code schedule does not run. Rename one of them.",
            definition.name,
        )
        return None
    return row


def _update(definition: JobDefinition, row: CronSchedule, now: dt.datetime, by: str) -> None:
    wanted = _wanted(definition)
    changed = {field: value for field, value in wanted.items() if getattr(row, field) != value}
    if not changed:
        return
    if "active" in changed and _schedules().filter(pk=row.pk, active=False).update(
        active=True, updated_at=now
    ):
        logger.warning(
            "Cron schedule %s is defined in code again: marked active by %s (it was "
            "inactive; its catch-up policy decides which missed occurrences run)",
            row.name,
            by,
        )
    if "expression" in changed or "tz" in changed:
        next_runs = _spec(definition).next_runs(row.cursor or now, 1)
        changed["next_run"] = next_runs[0] if next_runs else None
    changed["updated_at"] = now
    _schedules().filter(pk=row.pk).update(**changed)
    for field, value in changed.items():
        setattr(row, field, value)


# --- materializing ------------------------------------------------------------------


class Scheduler:
    """Materializes due occurrences, tick after tick, for one process.

    It remembers which definitions it last synced with their rows (per database alias),
    so a tick with nothing due costs one query on the due index; a fresh Scheduler (a
    starting worker) syncs the code schedules' rows with its code on its first tick.
    A process materializes the code schedules it defines and the dynamic schedules of
    the jobs it defines: a dynamic schedule of a job it lacks (a rolling deploy) is left
    to a process that has it, and logged once.

    ``actor`` names this process in the logs of the schedules it marks inactive or active
    again (``"worker <id>"``). While it leaves active schedules it lacks because a live
    worker defines them, it syncs again every ``LEASE`` seconds: once the last of those
    workers is gone, the schedule is marked inactive.
    """

    def __init__(self, actor: str | None = None) -> None:
        self.actor = actor
        self._synced: dict[str, tuple[JobDefinition, ...]] = {}
        self._unrunnable: set[tuple[str, str]] = set()
        # Per alias: the schedules left active for other workers, and when that was seen.
        self._kept: dict[str, tuple[set[str], dt.datetime]] = {}

    def materialize(self, now: dt.datetime) -> int:
        """Create the rows of every occurrence due by ``now``. Returns how many.

        Schedules with ``overlap="skip"`` are materialized one at a time (each looks at
        its previous occurrence); the others in batches of ``BATCH_SIZE``, one
        transaction each, so that ten thousand schedules due at once cost a few dozen
        statements rather than ten thousand transactions."""
        definitions = registry.cron_definitions()
        created = 0
        batch: list[Planned] = []
        maths = Occurrences(now)
        for row in self.due_schedules(definitions, now):
            target = self._target(row, definitions)
            if target is None:
                continue
            if target.spec.overlap != "allow":
                created += _materialize_alone(target, row, now)
                continue
            planned = plan(target, row, maths)
            if planned is not None:
                batch.append(planned)
        for start in range(0, len(batch), BATCH_SIZE):
            created += _materialize_batch(batch[start : start + BATCH_SIZE], now)
        return created

    def _target(self, row: CronSchedule, definitions: dict[str, JobDefinition]) -> Target | None:
        """What ``row`` materializes into in this process, or None (not this process's)."""
        if not row.is_dynamic:
            definition = definitions.get(row.name)
            return None if definition is None else code_target(definition)
        try:
            target = dynamic_target(row)
        except (UnknownJob, ValueError) as exc:
            key = (row.name, row.job)
            if key not in self._unrunnable:
                self._unrunnable.add(key)
                logger.warning(
                    "Dynamic cron schedule %s is not materialized by this process: %s",
                    row.name,
                    exc,
                )
            return None
        self._unrunnable.discard((row.name, row.job))
        return target

    def due_schedules(
        self, definitions: dict[str, JobDefinition], now: dt.datetime
    ) -> list[CronSchedule]:
        """The rows due by ``now`` (active, not paused), read with the rows named by
        ``definitions`` in one query; the code rows are synced with the code first when
        these definitions were not synced yet or one of their rows is missing (deleted,
        or marked inactive by a process that lacks the code)."""
        alias = database_alias()
        current = tuple(definitions.values())
        synced = self._synced.get(alias)
        in_sync = (
            synced is not None
            and len(synced) == len(current)
            and all(a is b for a, b in zip(synced, current, strict=True))
        )
        if in_sync:
            rows = _due_or_named(now, definitions)
            in_sync = definitions.keys() <= {row.name for row in rows if row.active}
        if not in_sync or self._recheck_due(alias, now):
            self._note_kept(alias, sync_schedules(now, self.actor), now)
            self._synced[alias] = current
            rows = _due_or_named(now, {})
        return [row for row in rows if _is_due(row, now)]

    def _recheck_due(self, alias: str, now: dt.datetime) -> bool:
        """Whether schedules were left active for other workers a ``LEASE`` or more
        before ``now`` (or after it: a ``now`` from the past, as tests inject)."""
        if alias not in self._kept:
            return False
        since = self._kept[alias][1]
        return now < since or (now - since).total_seconds() >= get_settings().LEASE

    def _note_kept(self, alias: str, kept: set[str], now: dt.datetime) -> None:
        earlier = self._kept.pop(alias, (set(), now))[0]
        if not kept:
            return
        self._kept[alias] = (kept, now)
        for name in sorted(kept - earlier):
            logger.info(
                "Cron schedule %s is not defined in the code of %s, but a live worker "
                "defines it: left active (this process does not create its occurrences)",
                name,
                self.actor or this_process(),
            )


def _due_or_named(now: dt.datetime, definitions: dict[str, JobDefinition]) -> list[CronSchedule]:
    due = Q(active=True, paused=False, next_run__lte=now)
    if definitions:
        due |= Q(name__in=list(definitions))
    return list(_schedules().filter(due).order_by())


def _is_due(row: CronSchedule, now: dt.datetime) -> bool:
    return row.active and not row.paused and row.next_run is not None and row.next_run <= now


def _materialize_alone(target: Target, row: CronSchedule, now: dt.datetime) -> int:
    try:
        return materialize_schedule(target, row, now)
    except (IntegrityError, DatabaseError) as exc:
        # Lost a race with a backfill or another scheduler: the next tick sees the rows.
        logger.info("Cron schedule %s: materialization deferred (%s)", row.name, exc)
    except ValueError as exc:  # a row changed by hand (a bad queue): the others go on
        logger.warning("Cron schedule %s: not materialized: %s", row.name, exc)
    return 0


def _materialize_batch(batch: list[Planned], now: dt.datetime) -> int:
    """Materialize ``batch`` in one transaction; on a database error (a lost race with a
    backfill, a deadlock, SQLite's busy snapshot) fall back to one schedule at a time."""
    try:
        won, created = write_batch(batch, now)
    except (IntegrityError, DatabaseError) as exc:
        logger.info(
            "Cron schedules: a batch of %d fell back to one at a time (%s)", len(batch), exc
        )
        return sum(_materialize_alone(p.target, p.row, now) for p in batch)
    for planned in won:
        planned.row.cursor = planned.row.updated_at = now
        planned.row.next_run = planned.next_run
    if signals.cron_occurrence_created.receivers:  # model instances only for receivers
        schedules = {(p.target.definition.name, p.target.schedule): p.row for p in won}
        for columns in created:
            job = Job(**columns)
            job._state.adding = False
            job._state.db = database_alias()
            row = schedules[(job.name, job.schedule)]
            signals.send(signals.cron_occurrence_created, row.name, job=job, schedule=row)
    return len(created)


def materialize_schedule(target: Target, row: CronSchedule, now: dt.datetime) -> int:
    cursor = row.cursor
    if cursor is None or cursor >= now:
        return 0
    due = choose_occurrences(target.spec, cursor, now)
    next_runs = target.spec.next_runs(now, 1)
    using = database_alias()
    with transaction.atomic(using=using):
        # The row as it was read: an edit, pause or delete since then makes this one
        # lose, and the next tick reads the row again.
        won = (
            _schedules()
            .filter(pk=row.pk, cursor=cursor, updated_at=row.updated_at, paused=False)
            .update(
                cursor=now,
                next_run=next_runs[0] if next_runs else None,
                last_occurrence=due[-1] if due else F("last_occurrence"),
                updated_at=now,
            )
        )
        if not won:
            return 0
        jobs = create_occurrences(target, due, now)
    row.cursor = row.updated_at = now
    for job in jobs:
        signals.send(signals.cron_occurrence_created, row.name, job=job, schedule=row)
    return len(jobs)


def _rows_of(target: Target) -> QuerySet[Job]:
    """The job rows of the schedule ``target`` belongs to."""
    return Job.objects.using(database_alias()).filter(
        name=target.definition.name, schedule=target.schedule
    )


def create_occurrences(target: Target, instants: list[dt.datetime], now: dt.datetime) -> list[Job]:
    """Insert one row per instant that has none yet (inside the caller's transaction)."""
    if not instants:
        return []
    existing = set(
        _rows_of(target).filter(scheduled_for__in=instants).values_list("scheduled_for", flat=True)
    )
    blocker = None
    overlap = target.spec.overlap
    if overlap == "skip":
        blocker = (
            _rows_of(target)
            .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
            .order_by("-id")
            .first()
        )
    rows = []
    for instant in instants:
        if instant in existing:
            continue
        row = build_row(target, now, scheduled_for=instant)
        if blocker is not None:
            lifecycle.mark_skipped(row, _skip_reason(blocker), now=now)
        elif overlap == "skip":
            blocker = row
        rows.append(row)
    skipped = any(row.status == JobStatus.CANCELLED for row in rows)
    # Skipped rows are created finished at ``now``: under jobs.tick() (a clock the counts
    # cannot trust) they are counted in the same transaction, whatever the mark.
    with counting.finishing(now, atomic=False) if skipped else nullcontext():
        created = Job.objects.using(database_alias()).bulk_create(rows)
    wake_workers(database_alias(), [row.run_at for row in created], now)
    return created


def _skip_reason(blocker: Job) -> str:
    scheduled = blocker.scheduled_for.isoformat() if blocker.scheduled_for else "a manual run"
    reference = f"job #{blocker.pk}" if blocker.pk else "an occurrence created in the same tick"
    return (
        f"skipped (overlap='skip'): the previous occurrence ({reference}, scheduled for "
        f"{scheduled}) was still {blocker.status}"
    )


# --- operator actions ---------------------------------------------------------------


def target_of(schedule: CronSchedule) -> Target:
    """What ``schedule`` runs in this process; raises UnknownJob when its code (or, for
    a dynamic schedule, its job) is not defined here."""
    if schedule.is_dynamic:
        return dynamic_target(schedule)
    definition = registry.get(schedule.name)
    if definition is None or definition.cron is None:
        raise UnknownJob(
            f"Cron schedule {schedule.name!r} is not defined in this process's code "
            "(removed, or its module is not imported), so it cannot run."
        )
    return code_target(definition)


def run_now(schedule: CronSchedule) -> Job:
    """One manual run, due at once, with no ``scheduled_for``; the cursor is untouched."""
    target = target_of(schedule)
    from ..enqueueing.enqueue import enqueue, note_fair_keys

    if not target.schedule:
        return enqueue(target.definition, {})
    now = timezone.now()
    row = build_row(target, now, scheduled_for=None)
    using = database_alias()
    with producer_span(row.name, row.queue) as producer, transaction.atomic(using=using):
        row.traceparent = producer.traceparent
        row.save(force_insert=True, using=using)
        note_fair_keys(using, [row])
        wake_workers(using, [row.run_at], now)
        producer.set_message_ids([row.pk])
    if get_settings().EAGER:  # tests: run it now (django_cronqueue.enqueueing.eager)
        from ..enqueueing.eager import run_eagerly

        return run_eagerly(row)
    return row


def backfill(schedule: CronSchedule, start: dt.datetime, end: dt.datetime) -> int:
    """Create the occurrences in ``[start, end)`` that have no row yet, at most 1,000,
    oldest first. Returns how many it created.

    The occurrences are enumerated lazily and the enumeration stops at the cap, so the
    cost follows what is created (and the rows found to exist already), never the length
    of the range: ``end`` may be in year 9999.
    """
    target = target_of(schedule)
    after, until = _cron_bound(start, "start"), _cron_bound(end, "end")
    if until <= after:
        return 0
    now = timezone.now()
    instants = target.spec.iter_occurrences(after, until)
    created: list[Job] = []
    with transaction.atomic(using=database_alias()):
        # Serializes concurrent backfills of one schedule (a no-op lock on SQLite,
        # where the transaction is exclusive anyway).
        list(_schedules().select_for_update().filter(pk=schedule.pk).values_list("pk"))
        while len(created) < MAX_BACKFILL:
            chunk = list(itertools.islice(instants, BACKFILL_CHUNK))
            if not chunk:
                break
            existing = set(
                _rows_of(target)
                .filter(scheduled_for__in=chunk)
                .values_list("scheduled_for", flat=True)
            )
            missing = [instant for instant in chunk if instant not in existing]
            missing = missing[: MAX_BACKFILL - len(created)]
            created.extend(create_occurrences(target, missing, now))
    for job in created:
        signals.send(signals.cron_occurrence_created, schedule.name, job=job, schedule=schedule)
    return len(created)


def _cron_bound(value: dt.datetime, label: str) -> dt.datetime:
    """A bound of backfill's ``[start, end)`` as a bound of the cron functions'
    ``(after, until]``: in UTC, one microsecond earlier. Raises ValueError for a value
    that is not an aware datetime or has no UTC equivalent."""
    if not isinstance(value, dt.datetime) or timezone.is_naive(value):
        raise ValueError(f"backfill() needs an aware datetime for {label}, got {value!r}.")
    try:
        utc = value.astimezone(dt.timezone.utc)
    except OverflowError:
        fix = "a later start" if label == "start" else "an earlier end"
        raise ValueError(
            f"backfill() {label}={value.isoformat()} is out of range: in UTC it falls "
            f"outside the years 1 to 9999; pass {fix}."
        ) from None
    # datetime.min cannot move back, and no occurrence is that early anyway
    return utc - ONE_MICROSECOND if utc > EARLIEST_UTC else utc


def set_paused(schedule: CronSchedule, paused: bool) -> bool:
    """Pause or resume; resuming follows the catch-up policy. False if unchanged."""
    updated = (
        _schedules()
        .filter(pk=schedule.pk, paused=not paused)
        .update(paused=paused, updated_at=timezone.now())
    )
    if updated:
        schedule.paused = paused
    return bool(updated)
