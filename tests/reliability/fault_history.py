"""The checker of a fault-injection run's history (tests/reliability/faults.py).

Pure: it reads what the run recorded (the jobs' final rows, each handler run's start and
end, the faults with their instants) and returns the violations of the invariants that
docs/reliability.md publishes:

1. Every job ends: none is left pending or running once the run has drained.
2. Each ``succeeded`` row is backed by one complete run of its recorded attempt, and no
   attempt (one claim) runs twice.
3. No run starts while an earlier run of the same job still executes on a worker that was
   not stopped past its lease (a run that was killed ends at the fault that killed its
   process, or as its worker found the lease run out and killed the child); a process-pool
   child that went on while its worker was stopped is killed by the worker as it resumes.
   (A thread's handler, which nothing can stop, runs on to its end after its worker
   resumes: docs/reliability.md, "Writing idempotent handlers".)
4. No job fails for a reason the faults do not explain. Each job may retry far more often
   than the faults can make it fail, so a failed row is such a failure; and a handler whose
   first query meets a dead connection is explained once per handler thread after each cut
   or restart (Django's own rule: a connection is found unusable by the query that fails),
   not again and again: a pool that keeps dead connections fails every later job.
5. Jobs held by a killed or stopped worker come back (pending again, or claimed again)
   within their lease plus one poll interval (plus ``GRACE`` for the machine's own delays);
   a database fault in that time adds itself and the workers' reconnection backoff.
6. No worker exits by itself, and none of its threads dies (a slot thread that dies leaves a
   worker that looks alive and runs less, or nothing).

Instants are epoch seconds of the one machine's clock (the handlers', the harness's and the
database server's, all on this host).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

GRACE = 12.0  # seconds a loaded machine may add to a claim that is due (the default)
TOLERANCE = 0.05  # the database's and Python's reading of the same clock
RESUME_MARGIN = 2.0  # seconds a resumed worker may take to kill a child whose lease it lost


@dataclass(frozen=True)
class Run:
    job: int
    attempt: int
    worker_pid: int  # the runjobs process that claimed it
    pid: int  # the process that ran the handler (a child in the process pool)
    claimed: float | None  # the claim's instant (the row's started_at); None: unknown, the
    # handler began after a later claim had taken the row over (its worker was stopped)
    started: float
    ended: float | None  # None: no end was recorded (its process was killed)


@dataclass(frozen=True)
class Held:
    job: int
    attempt: int
    lease_until: float


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str  # kill_worker, stop_worker, stop_parent, kill_child, cut_sessions, restart_server
    pid: int | None = None  # the process signalled
    until: float | None = None  # a stop's end (SIGCONT)
    held: tuple[Held, ...] = ()
    descendants: tuple[int, ...] = ()  # a killed process's children, which die with it

    def describe(self, origin: float) -> str:
        text = f"{self.at - origin:8.2f}s  {self.kind}"
        if self.pid is not None:
            text += f" pid {self.pid}"
        if self.until is not None:
            text += f" for {self.until - self.at:.1f}s"
        if self.held:
            text += f", holding jobs {', '.join(str(held.job) for held in self.held)}"
        return text


@dataclass(frozen=True)
class Refusal:
    """A handler's first query refused by the database."""

    job: int
    attempt: int
    pid: int
    at: float
    error: str


@dataclass(frozen=True)
class JobRow:
    id: int
    status: str
    attempts: int
    last_error: str


@dataclass(frozen=True)
class Violation:
    invariant: int
    at: float | None
    text: str


@dataclass
class History:
    origin: float  # when the run began
    lease: float
    poll_interval: float
    jobs: list[JobRow]
    runs: list[Run]
    faults: list[Fault]
    concurrency: int = 1  # threads of one process that run handlers
    refusals: list[Refusal] = field(default_factory=list)
    # (job, attempt) -> when the job was made pending again after that attempt
    recoveries: dict[tuple[int, int], float] = field(default_factory=dict)
    unexpected_exits: list[tuple[int, int | None]] = field(default_factory=list)
    dead_threads: list[str] = field(default_factory=list)  # "Exception in thread" in a log
    # process-pool children their worker killed as it found their job's lease run out (logged)
    lease_kills: set[int] = field(default_factory=set)
    grace: float = GRACE  # what the machine may add to a claim that is due (``--grace``)

    def runs_by_job(self) -> dict[int, list[Run]]:
        grouped: dict[int, list[Run]] = defaultdict(list)
        for run in sorted(self.runs, key=lambda run: run.attempt):  # one claim per attempt
            grouped[run.job].append(run)
        return grouped


def check(history: History) -> list[Violation]:
    return [
        *every_job_ends(history),
        *succeeded_rows_are_backed(history),
        *no_two_runs_at_once(history),
        *no_job_fails(history),
        *dead_connections_are_renewed(history),
        *held_jobs_come_back(history),
        *no_worker_exits_by_itself(history),
    ]


def every_job_ends(history: History) -> list[Violation]:
    return [
        Violation(1, None, f"job {job.id} is still {job.status} after the drain")
        for job in history.jobs
        if job.status not in ("succeeded", "failed")
    ]


def succeeded_rows_are_backed(history: History) -> list[Violation]:
    found = []
    runs = history.runs_by_job()
    for job in history.jobs:
        starts: dict[int, list[Run]] = defaultdict(list)
        for run in runs.get(job.id, []):
            starts[run.attempt].append(run)
        for attempt, same in starts.items():
            if len(same) > 1:
                found.append(
                    Violation(2, same[1].started, f"job {job.id}: attempt {attempt} ran twice")
                )
        if job.status != "succeeded":
            continue
        backing = starts.get(job.attempts, [])
        if not backing or backing[0].ended is None:
            found.append(
                Violation(
                    2,
                    None,
                    f"job {job.id} succeeded at attempt {job.attempts}, which has no complete run",
                )
            )
    return found


def no_two_runs_at_once(history: History) -> list[Violation]:
    found = []
    for job, runs in history.runs_by_job().items():
        for index, earlier in enumerate(runs):
            end = end_of(earlier, history.faults)
            if end is None and earlier.pid in history.lease_kills:
                continue  # its worker killed it as the lease ran out, before another claim
            if end is None:
                found.append(
                    Violation(
                        3,
                        earlier.started,
                        f"job {job}: the run of attempt {earlier.attempt} (pid {earlier.pid}) "
                        "never ended, and no fault killed its process",
                    )
                )
                continue
            for later in runs[index + 1 :]:
                claimed = claim_of(later)
                if claimed + TOLERANCE >= end:
                    continue
                stop = stopped(earlier, claimed, history.faults)
                if stop is not None and not ended_on_resume(earlier, end, stop):
                    found.append(
                        Violation(
                            3,
                            end,
                            f"job {job}: the child {earlier.pid} went on with attempt "
                            f"{earlier.attempt} {end - (stop.until or stop.at):.2f}s after its "
                            f"worker {earlier.worker_pid} resumed, while attempt {later.attempt} "
                            f"ran on worker {later.worker_pid}",
                        )
                    )
                if stop is None:
                    found.append(
                        Violation(
                            3,
                            claimed,
                            f"job {job}: attempt {later.attempt} was claimed by worker "
                            f"{later.worker_pid} {end - claimed:.2f}s before attempt "
                            f"{earlier.attempt} ended on worker {earlier.worker_pid}, "
                            "which was not stopped",
                        )
                    )
    return found


def end_of(run: Run, faults: list[Fault]) -> float | None:
    """When ``run`` ended: its recorded end, or the kill of its process or its worker, or
    (a process-pool child) the end of its worker's stop, when the worker, finding the
    lease lost, kills the child before anything else."""
    if run.ended is not None:
        return run.ended
    ends = [
        fault.at
        for fault in faults
        if fault.kind in ("kill_worker", "kill_child")
        and {run.pid, run.worker_pid} & {fault.pid, *fault.descendants}
        and fault.at >= run.started - TOLERANCE
    ]
    ends += [
        fault.until
        for fault in faults
        if fault.kind in ("stop_worker", "stop_parent")
        and fault.until is not None
        and run.pid != run.worker_pid
        and fault.pid == run.worker_pid
        and fault.until >= run.started
    ]
    return min(ends) if ends else None


def claim_of(run: Run) -> float:
    """When ``run`` was claimed: its claim's instant, or at the latest its start."""
    return run.claimed if run.claimed is not None else run.started


def stopped(run: Run, instant: float, faults: list[Fault]) -> Fault | None:
    """The stop of ``run``'s worker (with its children, or alone) that let its lease run
    out before ``instant``: one that began after the run's claim (its recorded start may
    come after its real one: a handler stopped before it wrote it). A thread's handler
    cannot be stopped from outside: once its worker resumes it runs on to its end, beside
    the run that took the job over (its outcome is discarded: the row moved on)."""
    for fault in faults:
        if (
            fault.kind in ("stop_worker", "stop_parent")
            and fault.pid == run.worker_pid
            and fault.until is not None
            and (run.claimed is None or run.claimed - TOLERANCE <= fault.at)
            and fault.at <= instant
        ):
            return fault
    return None


def ended_on_resume(run: Run, end: float, stop: Fault) -> bool:
    """A process-pool child must not go on past its worker's resumption: the worker, finding
    the lease lost, kills it before anything else."""
    if run.pid == run.worker_pid:
        return True
    return end <= (stop.until or stop.at) + RESUME_MARGIN


def no_job_fails(history: History) -> list[Violation]:
    return [
        Violation(4, None, f"job {job.id} failed after {job.attempts} attempts: {job.last_error}")
        for job in history.jobs
        if job.status == "failed"
    ]


DATABASE_FAULTS = ("cut_sessions", "restart_server")
OUTAGE_MARGIN = 1.0  # seconds after a restart when a refusal needs no counting


def dead_connections_are_renewed(history: History) -> list[Violation]:
    """Refusals while the server restarts are explained; after a cut or a restart, each
    process may meet a dead connection once per slot (and once for the worker's own)."""
    faults = sorted(
        (fault for fault in history.faults if fault.kind in DATABASE_FAULTS),
        key=lambda fault: fault.at,
    )
    counted: Counter[tuple[int, int]] = Counter()
    found = []
    for refusal in sorted(history.refusals, key=lambda refusal: refusal.at):
        before = [index for index, fault in enumerate(faults) if fault.at <= refusal.at]
        if not before:
            found.append(
                Violation(4, refusal.at, f"job {refusal.job}: the database refused attempt "
                          f"{refusal.attempt} ({refusal.error}) before any database fault")
            )  # fmt: skip
            continue
        fault = faults[before[-1]]
        if refusal.at <= (fault.until or fault.at) + OUTAGE_MARGIN:
            continue
        counted[(refusal.pid, before[-1])] += 1
        if counted[(refusal.pid, before[-1])] == history.concurrency + 2:
            found.append(
                Violation(
                    4,
                    refusal.at,
                    f"pid {refusal.pid}: handlers met a dead connection more than "
                    f"{history.concurrency + 1} times after the {fault.kind} at "
                    f"{fault.at - history.origin:.2f}s ({refusal.error}, job {refusal.job}): "
                    "its connections are not renewed",
                )
            )
    return found


def held_jobs_come_back(history: History) -> list[Violation]:
    found = []
    runs = history.runs_by_job()
    status = {job.id: job for job in history.jobs}
    for fault in history.faults:
        for held in fault.held:
            back = came_back(held, runs, history)
            if back is None:
                job = status.get(held.job)
                if job is not None and job.status == "succeeded" and job.attempts == held.attempt:
                    continue  # it finished just before the fault, or its worker resumed in time
                found.append(
                    Violation(
                        5, fault.at, f"job {held.job}, held by pid {fault.pid}, never came back"
                    )
                )
                continue
            if back > claim_due(held.lease_until, history):
                found.append(
                    Violation(
                        5,
                        fault.at,
                        f"job {held.job}, held by pid {fault.pid} ({fault.kind}), came back "
                        f"{back - held.lease_until:.1f}s after its lease ended",
                    )
                )
    return found


def came_back(held: Held, runs: dict[int, list[Run]], history: History) -> float | None:
    """When a held job came back: made pending again (by a worker that found its lease
    expired, or by its own resumed worker recording its failure), or claimed again, whichever
    came first."""
    instants = [claim_of(run) for run in runs.get(held.job, []) if run.attempt > held.attempt]
    recovered = history.recoveries.get((held.job, held.attempt))
    if recovered is not None:
        instants.append(recovered)
    return min(instants, default=None)


RECONNECT_BACKOFF = 3.5  # a worker's retries after an outage: 0.5 + 1 + 2 seconds


def claim_due(lease_until: float, history: History) -> float:
    """When a job whose lease ends at ``lease_until`` must have been claimed again: one
    poll interval later, and later by each database fault in that time."""
    wait = history.poll_interval + history.grace
    due = lease_until + wait
    for fault in sorted(history.faults, key=lambda fault: fault.at):
        if fault.kind in DATABASE_FAULTS and lease_until - RECONNECT_BACKOFF <= fault.at <= due:
            due = max(due, (fault.until or fault.at) + RECONNECT_BACKOFF + wait)
    return due


def no_worker_exits_by_itself(history: History) -> list[Violation]:
    return [
        Violation(6, None, f"worker pid {pid} exited by itself (exit code {code})")
        for pid, code in history.unexpected_exits
    ] + [Violation(6, None, f"a worker's thread died: {line}") for line in history.dead_threads]


def return_delays(history: History) -> list[float]:
    """How long after its lease ended each held job came back."""
    runs = history.runs_by_job()
    delays = []
    for fault in history.faults:
        for held in fault.held:
            back = came_back(held, runs, history)
            if back is not None:
                delays.append(back - held.lease_until)
    return delays


def explain(violation: Violation, history: History, window: float = 10.0) -> str:
    """The violation, with the faults within ``window`` seconds of it."""
    lines = [f"invariant {violation.invariant}: {violation.text}"]
    if violation.at is not None:
        lines[0] = f"{violation.at - history.origin:8.2f}s  " + lines[0]
        around = [fault for fault in history.faults if abs(fault.at - violation.at) <= window]
        lines += ["      fault " + fault.describe(history.origin) for fault in around]
    return "\n".join(lines)
