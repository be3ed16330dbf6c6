"""Turning cron occurrences into ``Job`` rows, exactly once.

A process syncs the ``CronSchedule`` rows with its registry on its first tick (and again
when its definitions change or one of their rows has gone missing); every tick then reads
only the due rows and materializes the occurrences that came due since each schedule's
cursor, so a site with a thousand schedules pays for two small queries when nothing is
due. Exactly-once creation rests
on the database, never on there being a single scheduler:

- the cursor advances by compare-and-set (``UPDATE ... WHERE cursor = <the value read>``)
  as the first statement of the transaction that inserts the occurrences, so of several
  processes that read the same cursor exactly one wins and the others insert nothing;
- a unique constraint on (name, scheduled_for) refuses a second row for an occurrence
  whatever path (materialization or backfill) tries to create it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from . import lifecycle, signals
from .conf import database_alias
from .cronspec import MISSED_AFTER, CronSpec
from .enqueue import build_job, enqueue
from .exceptions import UnknownJob
from .models import CronSchedule, Job, JobStatus
from .notify import wake_workers
from .registry import JobDefinition, registry

logger = logging.getLogger("django_cronqueue")

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


def sync_schedules(now: dt.datetime) -> dict[str, CronSchedule]:
    """Create missing rows (armed at ``now``), update changed ones, mark removed ones
    inactive. Returns the rows of the schedules this process defines."""
    definitions = registry.cron_definitions()
    rows = {row.name: row for row in _schedules().all()}
    for name, row in rows.items():
        if name not in definitions and row.active:
            _schedules().filter(pk=row.pk, active=True).update(active=False, updated_at=now)
            logger.info("Cron schedule %s is no longer defined in code: marked inactive", name)
    synced = {}
    for name, definition in definitions.items():
        existing = rows.get(name)
        synced[name] = (
            _create(definition, now) if existing is None else _update(definition, existing, now)
        )
    return synced


def _wanted(definition: JobDefinition) -> dict[str, Any]:
    spec = _spec(definition)
    return {"expression": spec.expression, "tz": spec.tz, "options": spec.options(), "active": True}


def _create(definition: JobDefinition, now: dt.datetime) -> CronSchedule:
    """A schedule seen for the first time is armed at ``now``: nothing earlier fires."""
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
    except IntegrityError:  # another process armed it first
        return _schedules().get(name=definition.name)


def _update(definition: JobDefinition, row: CronSchedule, now: dt.datetime) -> CronSchedule:
    wanted = _wanted(definition)
    changed = {field: value for field, value in wanted.items() if getattr(row, field) != value}
    if not changed:
        return row
    if "expression" in changed or "tz" in changed:
        next_runs = _spec(definition).next_runs(row.cursor or now, 1)
        changed["next_run"] = next_runs[0] if next_runs else None
    changed["updated_at"] = now
    _schedules().filter(pk=row.pk).update(**changed)
    for field, value in changed.items():
        setattr(row, field, value)
    return row


# --- materializing ------------------------------------------------------------------


class Scheduler:
    """Materializes due occurrences, tick after tick, for one process.

    It remembers which definitions it last synced with their rows (per database alias),
    so a tick with nothing due costs two small queries; a fresh Scheduler (a starting
    worker) syncs every schedule row with the code on its first tick.
    """

    def __init__(self) -> None:
        self._synced: dict[str, tuple[JobDefinition, ...]] = {}

    def materialize(self, now: dt.datetime) -> int:
        """Create the rows of every occurrence due by ``now``. Returns how many."""
        definitions = registry.cron_definitions()
        created = 0
        for row in self.due_schedules(definitions, now):
            name = row.name
            try:
                created += materialize_schedule(definitions[name], row, now)
            except (IntegrityError, DatabaseError) as exc:
                # Lost a race with a backfill or another scheduler: the next tick sees the rows.
                logger.info("Cron schedule %s: materialization deferred (%s)", name, exc)
        return created

    def due_schedules(
        self, definitions: dict[str, JobDefinition], now: dt.datetime
    ) -> list[CronSchedule]:
        """The rows of ``definitions`` due by ``now`` (not paused), synced with the code
        first when these definitions were not synced yet or one of their rows is missing
        (deleted, or marked inactive by a process that lacks the code)."""
        alias = database_alias()
        synced = self._synced.get(alias)
        current = tuple(definitions.values())
        in_sync = (
            synced is not None
            and len(synced) == len(current)
            and all(a is b for a, b in zip(synced, current, strict=True))
        )
        if in_sync and current:
            active = set(_schedules().filter(active=True).values_list("name", flat=True))
            in_sync = definitions.keys() <= active
        if not in_sync:
            rows = sync_schedules(now)
            self._synced[alias] = current
            return [row for row in rows.values() if _is_due(row, now)]
        due = _schedules().filter(active=True, paused=False, next_run__lte=now)
        return [row for row in due if row.name in definitions]


def _is_due(row: CronSchedule, now: dt.datetime) -> bool:
    return not row.paused and row.next_run is not None and row.next_run <= now


def materialize_schedule(definition: JobDefinition, row: CronSchedule, now: dt.datetime) -> int:
    spec = _spec(definition)
    cursor = row.cursor
    if cursor is None or cursor >= now:
        return 0
    due = choose_occurrences(definition, cursor, now)
    next_runs = spec.next_runs(now, 1)
    using = database_alias()
    with transaction.atomic(using=using):
        won = (
            _schedules()
            .filter(pk=row.pk, cursor=cursor, paused=False)
            .update(
                cursor=now,
                next_run=next_runs[0] if next_runs else None,
                last_occurrence=due[-1] if due else F("last_occurrence"),
                updated_at=now,
            )
        )
        if not won:
            return 0
        jobs = create_occurrences(definition, due, now)
    row.cursor = now
    for job in jobs:
        signals.send(signals.cron_occurrence_created, definition.name, job=job, schedule=row)
    return len(jobs)


def choose_occurrences(
    definition: JobDefinition, cursor: dt.datetime, now: dt.datetime
) -> list[dt.datetime]:
    """The occurrences in (cursor, now] to create, by the catch-up policy.

    On-time ones (at most a minute old) always; missed ones by ``catch_up``, and never
    any older than the catch-up window.
    """
    spec = _spec(definition)
    oldest = max(cursor, now - spec.window)
    instants = spec.occurrences(oldest, now)
    on_time = [instant for instant in instants if now - instant <= MISSED_AFTER]
    missed = [instant for instant in instants if now - instant > MISSED_AFTER]
    if spec.catch_up == "latest":
        missed = missed[-1:]
    elif spec.catch_up == "all":
        missed = missed[-spec.max_catch_up :]
    else:
        missed = []
    return missed + on_time


def create_occurrences(
    definition: JobDefinition, instants: list[dt.datetime], now: dt.datetime
) -> list[Job]:
    """Insert one row per instant that has none yet (inside the caller's transaction)."""
    if not instants:
        return []
    jobs = Job.objects.using(database_alias())
    existing = set(
        jobs.filter(name=definition.name, scheduled_for__in=instants).values_list(
            "scheduled_for", flat=True
        )
    )
    blocker = None
    overlap = _spec(definition).overlap
    if overlap == "skip":
        blocker = (
            jobs.filter(name=definition.name, status__in=[JobStatus.PENDING, JobStatus.RUNNING])
            .order_by("-id")
            .first()
        )
    rows = []
    for instant in instants:
        if instant in existing:
            continue
        row = build_job(definition, {}, now=now, run_at=instant, scheduled_for=instant)
        if blocker is not None:
            lifecycle.mark_skipped(row, _skip_reason(blocker), now=now)
        elif overlap == "skip":
            blocker = row
        rows.append(row)
    created = jobs.bulk_create(rows)
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


def _definition_of(schedule: CronSchedule) -> JobDefinition:
    definition = registry.get(schedule.name)
    if definition is None or definition.cron is None:
        raise UnknownJob(
            f"Cron schedule {schedule.name!r} is not defined in this process's code "
            "(removed, or its module is not imported), so it cannot run."
        )
    return definition


def run_now(schedule: CronSchedule) -> Job:
    """One manual run, due at once, with no ``scheduled_for``; the cursor is untouched."""
    return enqueue(_definition_of(schedule), {})


def backfill(schedule: CronSchedule, start: dt.datetime, end: dt.datetime) -> int:
    """Create the occurrences in ``[start, end)`` that have no row yet, at most 1,000,
    oldest first. Returns how many it created.

    The occurrences are enumerated lazily and the enumeration stops at the cap, so the
    cost follows what is created (and the rows found to exist already), never the length
    of the range: ``end`` may be in year 9999.
    """
    definition = _definition_of(schedule)
    after, until = _cron_bound(start, "start"), _cron_bound(end, "end")
    if until <= after:
        return 0
    now = timezone.now()
    instants = _spec(definition).iter_occurrences(after, until)
    using = database_alias()
    created: list[Job] = []
    with transaction.atomic(using=using):
        # Serializes concurrent backfills of one schedule (a no-op lock on SQLite,
        # where the transaction is exclusive anyway).
        list(_schedules().select_for_update().filter(pk=schedule.pk).values_list("pk"))
        while len(created) < MAX_BACKFILL:
            chunk = list(itertools.islice(instants, BACKFILL_CHUNK))
            if not chunk:
                break
            existing = set(
                Job.objects.using(using)
                .filter(name=definition.name, scheduled_for__in=chunk)
                .values_list("scheduled_for", flat=True)
            )
            missing = [instant for instant in chunk if instant not in existing]
            missing = missing[: MAX_BACKFILL - len(created)]
            created.extend(create_occurrences(definition, missing, now))
    for job in created:
        signals.send(signals.cron_occurrence_created, definition.name, job=job, schedule=schedule)
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
