"""Running claimed jobs: call the handler, then record the outcome on the row.

``run_claimed`` does both for one job (``jobs.tick()`` uses it). The worker uses
``call`` and a ``Recorder``, which writes quick successes in batches: one UPDATE for
many rows instead of one per job.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import Q

from .. import lifecycle, signals
from ..claiming import (
    NOTHING_ERASED,
    ClaimedJob,
    ClaimRequest,
    complete_and_claim,
    complete_successes,
)
from ..conf import database_alias, get_settings
from ..definitions.registry import JobDefinition, registry
from ..exceptions import ChildDied, JobCancelled, Snooze, TimeLimitExceeded
from ..integrations import encryption, tracing
from ..integrations.tracing import consumer_span
from ..lifecycle import Outcome
from ..models import Batch, Job, JobStatus
from ..values import typedjson
from ..values.error_text import describe
from ..values.validation import json_problem
from . import console
from .cancellable import run_cancellable
from .context import JobContext, enter, leave

logger = logging.getLogger("django_cronqueue")

# opentelemetry (when installed) loads with the code that runs jobs, not inside the first
# job's timed run: a run's duration decides whether its success is batched.
tracing.enabled()

Clock = Callable[[], dt.datetime]


@dataclass
class Call:
    """What one handler call did."""

    job: ClaimedJob
    definition: JobDefinition | None
    duration: float = 0.0
    result: Any = None
    error: BaseException | None = None
    context: JobContext | None = None
    # Why the database cannot store ``result`` (it is dropped), or None.
    result_problem: str | None = field(default=None, init=False)
    # The error allows no retry: the handler returned, and would return the same again.
    final: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.error is not None or self.result is None:
            return
        if self.sensitive_result:
            self._judge_sensitive_result()
            return
        self.result_problem = result_problem(self.result)
        if self.result_problem and self.definition and self.definition.unstorable_result_fails:
            self.error = TypeError(
                f"Job {self.job.name} #{self.job.id} returned a value that cannot be "
                f"stored: {self.result_problem}"
            )
            self.final = True

    def _judge_sensitive_result(self) -> None:
        """A sensitive return value is never stored, so never dropped; one the database
        could not store still fails a job that must store it (a Django task), with an
        error that does not quote it."""
        definition = self.definition
        if definition is None or not definition.unstorable_result_fails:
            return
        if result_problem(self.result):
            self.error = TypeError(
                f"Job {self.job.name} #{self.job.id} returned a {type(self.result).__name__} "
                "that cannot be stored as JSON (its value is sensitive: not shown)"
            )
            self.final = True

    @property
    def sensitive(self) -> bool:
        """Its payload holds encrypted values, erased when it succeeds."""
        return self.definition is not None and self.definition.sensitive

    @property
    def sensitive_result(self) -> bool:
        """Its return value is sensitive (``sensitive=True``): never stored nor judged,
        since a message about it would quote it."""
        return self.definition is not None and self.definition.sensitive_all

    @property
    def announced_result(self) -> Any:
        """The result ``job_succeeded`` receivers get: none of a sensitive one."""
        return self.stored_result if self.sensitive_result else self.result

    @property
    def succeeded(self) -> bool:
        return self.definition is not None and self.error is None

    @property
    def progress(self) -> dict[str, Any] | None:
        """The last progress the handler set, or None."""
        return self.context.progress if self.context is not None else None

    @property
    def stored_result(self) -> Any:
        """What the row keeps of the handler's return value: nothing of a job with
        ``sensitive=True``, whose result is erased as soon as it succeeded."""
        if self.sensitive_result:
            return None if self.result is None else encryption.erased()
        return None if self.result_problem else self.result


def occurrence_of(job: ClaimedJob) -> dt.datetime | None:
    """The occurrence a row runs: its ``scheduled_for``; for a manual run of a dynamic
    schedule (``run_now()``), the request time, as a code schedule's handler sees it."""
    if job.scheduled_for is None and job.schedule:
        return job.created_at
    return job.scheduled_for


def new_context(job: ClaimedJob, *, ask_database: bool = False) -> JobContext:
    """The ``jobs.current()`` of a claimed job. The worker tells it of cancel requests;
    with ``ask_database`` (``jobs.tick()``, eager mode: no heartbeat), checking for one
    reads the row, at most once a second."""
    return JobContext(
        job_id=job.id,
        name=job.name,
        attempt=job.attempts,
        scheduled_for=occurrence_of(job),
        payload=job.payload,
        ask_database=(lambda: bool(lifecycle.cancel_requested_among([job])))
        if ask_database
        else None,
        find_batch=lambda: batch_of(job.id, job.batch_id),
        find_upstream_results=lambda: upstream_results_of(job.id),
    )


def upstream_results_of(job_id: int) -> dict[int, Any]:
    """The results of the succeeded jobs that ``job_id`` waited for, by id."""
    upstream = Job.objects.using(database_alias()).filter(
        downstream_links__downstream_id=job_id, status=JobStatus.SUCCEEDED
    )
    return dict(upstream.order_by("pk").values_list("pk", "result"))


def batch_of(job_id: int, batch_id: int | None) -> Batch | None:
    """The batch a job is a member of, or the one whose callback it is."""
    batches = Batch.objects.using(database_alias())
    if batch_id is not None:
        return batches.filter(pk=batch_id).first()
    return batches.filter(Q(then_job_id=job_id) | Q(finally_job_id=job_id)).first()


def call(job: ClaimedJob, context: JobContext | None = None) -> Call:
    """Call the handler of ``job`` with ``context`` as ``jobs.current()`` (a new one
    that asks the database when None). Never raises: whatever the handler raises,
    including SystemExit and KeyboardInterrupt, is kept in ``Call.error``. A job whose
    cancel was requested before it started is not called: it ends cancelled."""
    definition = registry.get(job.name)
    if definition is None:
        return Call(job, None)
    if context is None:
        context = new_context(job, ask_database=True)
    if context.ask_database():
        error = JobCancelled(f"Job {job.name} #{job.id}: cancelled before it started")
        return Call(job, definition, error=error, context=context)
    signals.send(signals.job_started, job.name, job=job)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "Job %s #%s started (attempt %s)",
            job.name,
            job.id,
            job.attempts,
            extra=_extra(job, "started"),
        )
    started = time.monotonic()
    try:
        with consumer_span(job):
            result = call_handler(definition, job, context)
    except BaseException as exc:
        outcome = Call(job, definition, time.monotonic() - started, error=exc, context=context)
    else:
        outcome = Call(job, definition, time.monotonic() - started, result=result, context=context)
    return within_timeout(outcome)


def within_timeout(outcome: Call, *, overran: bool = False) -> Call:
    """``outcome``, or in its place a ``TimeLimitExceeded`` failure when the handler
    ran past its job's ``timeout``: whatever it returned or raised, a run that overran
    fails, retried or failed by the job's policy. The heartbeat reads the deadline only
    once a beat, so a timeout shorter than a beat is caught here, from the run's own
    duration; ``overran``: the heartbeat saw the deadline pass first. A child process
    that died (``ChildDied``) did not overrun: it is kept unless the heartbeat saw it."""
    definition = outcome.definition
    if definition is None or isinstance(outcome.error, TimeLimitExceeded):
        return outcome
    timeout = definition.effective_timeout
    if not overran and (outcome.duration <= timeout or isinstance(outcome.error, ChildDied)):
        return outcome
    ended = "returned" if outcome.error is None else f"raised {type(outcome.error).__name__}"
    error = TimeLimitExceeded(
        f"Job {outcome.job.name} #{outcome.job.id} ran past its timeout of {timeout:g}s "
        f"(it {ended} after {outcome.duration:.1f}s)"
    )
    error.__cause__ = outcome.error
    return Call(outcome.job, definition, outcome.duration, error=error, context=outcome.context)


def record(outcome: Call, now: dt.datetime) -> Outcome:
    """Write one call's outcome to its row (token-guarded). Returns the outcome."""
    job = outcome.job
    if outcome.definition is None:  # unregistered since the claim: give the row back
        lifecycle.release_unstarted([job])
        return Outcome.RELEASED
    if isinstance(outcome.error, Snooze):
        return lifecycle.complete_snooze(job, outcome.error, now=now, progress=outcome.progress)
    if outcome.error is not None:
        result = lifecycle.complete_failure(
            job,
            outcome.error,
            now=now,
            definition=outcome.definition,
            final=outcome.final or outcome.definition.gives_up_on(outcome.error),
            progress=outcome.progress,
        )
        if result == Outcome.CANCELLED:
            return result
        log = logger.error if result == Outcome.FAILED else logger.warning
        log(
            "Job %s #%s raised %s on attempt %s of %s (%s)",
            job.name,
            job.id,
            type(outcome.error).__name__,
            job.attempts,
            job.max_attempts,
            result,
            extra=_extra(job, result, outcome.duration),
        )
        return result
    if outcome.result_problem:
        _log_dropped_result(job, outcome.result_problem)
    if not lifecycle.complete_success(
        job,
        now=now,
        result=outcome.stored_result,
        progress=outcome.progress,
        payload=encryption.erase_payload(job.payload) if outcome.sensitive else None,
    ):
        return Outcome.DISCARDED
    announce_successes([outcome])
    return Outcome.SUCCEEDED


def run_claimed(job: ClaimedJob, clock: Clock) -> tuple[bool, Outcome]:
    """Call the handler and record the outcome. Returns (handler succeeded, outcome)."""
    outcome = call(job)
    return outcome.succeeded, record(outcome, clock())


def announce_successes(outcomes: Sequence[Call]) -> None:
    """Send ``job_succeeded`` for each of ``outcomes`` and log them: on runjobs's own
    console, one write for all (no log record on the hot path)."""
    for outcome in outcomes:
        job = outcome.job
        signals.send(
            signals.job_succeeded,
            job.name,
            job=job,
            result=outcome.announced_result,
            duration=outcome.duration,
        )
    lines = console.success_line
    if lines is not None:
        lines((outcome.job.name, outcome.job.id, outcome.duration) for outcome in outcomes)
    elif logger.isEnabledFor(logging.INFO):
        for outcome in outcomes:
            job = outcome.job
            logger.info(
                "Job %s #%s succeeded in %.3fs",
                job.name,
                job.id,
                outcome.duration,
                extra=_extra(job, Outcome.SUCCEEDED, outcome.duration),
            )


class Recorder:
    """Records outcomes for a worker slot, batching quick successes.

    A first attempt's success whose handler returned None and took under ``QUICK``
    seconds waits in a batch; the batch is written when a slow or failed job comes, when
    it is ``MAX_WAIT`` old, or on ``flush()``. Everything else is written at once. A
    sensitive job's success waits with its payload erased (``erased``, by id), written
    in the statement that marks it succeeded.
    """

    QUICK = 0.005
    MAX_WAIT = 0.02

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pending: list[Call] = []
        self.erased: dict[int, Any] = {}
        self.oldest = 0.0

    def add(self, outcome: Call) -> None:
        quick = (
            outcome.succeeded
            and not outcome.job.has_downstream  # recorded alone, releasing its downstream
            and outcome.job.attempts == 1  # a later attempt's success writes its attempt row
            and outcome.result is None
            and outcome.progress is None
            and outcome.duration < self.QUICK
        )
        if not quick:
            self.flush()
            record(outcome, self.clock())
            return
        if outcome.sensitive:
            self.erased[outcome.job.id] = encryption.erase_payload(outcome.job.payload)
        if not self.pending:
            self.oldest = time.monotonic()
        self.pending.append(outcome)
        if time.monotonic() - self.oldest >= self.MAX_WAIT:
            self.flush()

    def add_or_flush(self, outcome: Call) -> None:
        """``add``, or on a second try (the first failed to write), just write the batch
        ``outcome`` already joined: as its last, since a failed write puts it back."""
        if self.pending and self.pending[-1] is outcome:
            self.flush()
        else:
            self.add(outcome)

    def flush(self) -> None:
        if not self.pending:
            return
        batch, erased = self.take()
        finished_at = self.clock()
        try:
            written = write_successes(
                [outcome.job for outcome in batch],
                lambda jobs: complete_successes(
                    jobs, finished_at=finished_at, using=database_alias(), erased=erased
                ),
                finished_at,
            )
        except BaseException:
            self.pending = batch + self.pending  # kept for the next try (token-guarded)
            self.erased.update(erased)
            raise
        self.announce(batch, written)

    def take(self) -> tuple[list[Call], Mapping[int, Any]]:
        """Hand the waiting successes and the erased payloads of the sensitive ones to
        the caller, who writes them (with its next claim) and then calls ``announce``, or
        ``put_back`` if writing failed."""
        batch, self.pending = self.pending, []
        if not self.erased:
            return batch, NOTHING_ERASED
        erased, self.erased = self.erased, {}
        return batch, erased

    def put_back(self, batch: list[Call], erased: Mapping[int, Any] = NOTHING_ERASED) -> None:
        if batch:
            self.pending = batch + self.pending
            self.erased.update(erased)
            self.oldest = time.monotonic()

    def announce(self, batch: list[Call], written: set[int]) -> None:
        announce_successes([outcome for outcome in batch if outcome.job.id in written])
        unwritten = [outcome for outcome in batch if outcome.job.id not in written]
        gained = gained_downstream(unwritten)
        for outcome in gained:
            record(outcome, self.clock())
        recorded = {outcome.job.id for outcome in gained}
        for outcome in unwritten:
            if outcome.job.id not in recorded:
                log_discarded(outcome.job)  # its lease was lost: another run owns the row


def write_successes(
    jobs: list[ClaimedJob], write: Callable[[list[ClaimedJob]], set[int]], now: dt.datetime
) -> set[int]:
    """Run ``write`` (the UPDATE of quick successes; it returns the ids written) and, if
    group members are among ``jobs``, count those written in their batches in the same
    transaction: a crash cannot record a member's success and lose its count."""
    if not any(job.batch_id is not None for job in jobs):
        return write(jobs)
    with transaction.atomic(using=database_alias()):
        written = write(jobs)
        lifecycle.members_succeeded(
            [job for job in jobs if job.batch_id is not None and job.id in written], now
        )
    return written


def write_and_claim(
    request: ClaimRequest,
    succeeded: list[ClaimedJob],
    now: dt.datetime,
    erased: Mapping[int, Any] = NOTHING_ERASED,
) -> tuple[list[ClaimedJob], set[int]]:
    """A worker's quick successes and its next claim: one statement on PostgreSQL, unless
    group members are among the successes: they are written and counted in their batches
    in a transaction of their own, then the claim follows. Sensitive jobs (``erased``:
    their erased payloads by id) are written with them by the statement that marks them
    succeeded."""
    using = database_alias()
    if not any(job.batch_id is not None for job in succeeded):
        return complete_and_claim(request, succeeded, finished_at=now, using=using, erased=erased)
    written = write_successes(
        succeeded,
        lambda jobs: complete_successes(jobs, finished_at=now, using=using, erased=erased),
        now,
    )
    jobs, _ = complete_and_claim(request, [], finished_at=now, using=using)
    return jobs, written


def log_discarded(job: ClaimedJob) -> None:
    logger.warning(
        "Discarded the success of job %s #%s: its lease was lost and the row has moved on",
        job.name,
        job.id,
        extra={"job_id": job.id, "job_name": job.name, "outcome": "discarded"},
    )


def gained_downstream(unwritten: list[Call]) -> list[Call]:
    """Of the successes a batch left unwritten, those whose row is still theirs to
    complete but gained a downstream job after the claim (``using(after=...)`` on a
    running job): they are recorded alone. The others lost their lease."""
    if not unwritten:
        return []
    ids = set(lifecycle.running_with_downstream([outcome.job for outcome in unwritten]))
    return [outcome for outcome in unwritten if outcome.job.id in ids]


def handler_arguments(
    definition: JobDefinition, job: ClaimedJob, context: JobContext
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The handler's positional and keyword arguments: a schedule's ``CronRun``, or the
    payload."""
    if definition.cron is not None:
        run = definition.cron.run_for(
            job_id=job.id, scheduled_for=job.scheduled_for, created_at=job.created_at
        )
        context.scheduled_for = run.scheduled_for
        return (run,), {}
    payload = job.payload
    if definition.sensitive:  # decrypted for the handler only: the job keeps its tokens
        payload = encryption.decrypt_payload(payload, f"Job {job.name} #{job.id}")
    if job.tagged and definition.typed_values:
        return (), typedjson.decode_payload(payload)
    return (), payload


def call_handler(definition: JobDefinition, job: ClaimedJob, context: JobContext) -> Any:
    args, kwargs = handler_arguments(definition, job, context)
    token = enter(context)
    try:
        if definition.is_async:
            return async_to_sync(run_cancellable)(
                context, definition.func, args, kwargs, definition.soft_timeout
            )
        return definition.func(*args, **kwargs)
    finally:
        leave(token)


def storable_result(value: Any) -> Any:
    """The handler's return value if the database can store it as JSON, else None."""
    return None if result_problem(value) else value


def result_problem(value: Any) -> str | None:
    """Why the database cannot store a handler's return value as JSON, or None.

    Not storable: what ``validation.json_problem`` refuses (non-JSON values, NaN, NUL,
    lone surrogates, nesting past MariaDB's 31 levels, circular values, integers too
    long for JSON text), JSON over ``MAX_PAYLOAD_BYTES``, and values that break when
    read (a broken ``__iter__``)."""
    if value is None:
        return None
    try:
        problem = json_problem(value, "result", noun="return value")
        if problem:
            return problem
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except Exception as exc:
        return f"return value could not be read as JSON: {describe(exc)}"
    limit = get_settings().MAX_PAYLOAD_BYTES
    if size > limit:
        return (
            f"return value is {size} bytes of JSON, over the limit of {limit} "
            "(CRONQUEUE['MAX_PAYLOAD_BYTES'])."
        )
    return None


def _log_dropped_result(job: ClaimedJob, problem: str) -> None:
    logger.warning(
        "Job %s #%s succeeded, but its return value was dropped (result is None): %s",
        job.name,
        job.id,
        problem,
        extra=_extra(job, "result_dropped"),
    )


def _extra(job: ClaimedJob, outcome: str, duration: float | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "job_id": job.id,
        "job_name": job.name,
        "attempt": job.attempts,
        "outcome": outcome,
    }
    if duration is not None:
        extra["duration"] = duration
    return extra
