"""A fault-injection run: real ``runjobs`` processes of one pool work jobs on a PostgreSQL
cluster of the run's own while a seeded schedule of faults hits them; then the recorded
history is checked (tests/reliability/fault_history.py, the invariants).

The faults: a worker killed (SIGKILL; a new one takes its place, as a supervisor would
start), a worker stopped past its lease (SIGSTOP to its process group, SIGCONT later), a
process-pool child killed, every session of the database cut (``pg_terminate_backend``)
and the server restarted. With ``pgbouncer`` the workers reach the server through
PgBouncer in transaction mode, without ``DISABLE_SERVER_SIDE_CURSORS``.

``run_faults`` sets Django up on the cluster it starts, so it runs in a process of its own:
``bench/faults.py`` (the command line, the long run) and tests/reliability/test_faults.py
(a short run per pool in CI, which calls bench/faults.py).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .fault_history import GRACE, Fault, Held, History, JobRow, Refusal, Run, Violation, check

DATABASE = "cronqueue_faults"
WORKER_SETTINGS = "tests.reliability.worker_settings"
POOLS = ("threads", "processes", "asyncio")
T = TypeVar("T")
BOUNCER_RETRY = "server_login_retry = 1\n"
# The process pool's worker, finding a running job's lease run out, kills its child.
LEASE_KILL = re.compile(r"its lease ran out while it ran .*?: its child process (\d+) was killed")


@dataclass(frozen=True)
class FaultPlan:
    pool: str
    jobs: int = 1000
    seconds: float = 30.0  # how long faults hit; the jobs are enqueued over this time
    seed: int = 1
    workers: int = 3
    concurrency: int = 4
    lease: float = 6.0
    poll_interval: float = 0.5
    grace: float = GRACE  # what the machine may add to a claim that is due (invariant 5)
    pgbouncer: bool = False
    restarts: bool = True  # restart the server (the run's own cluster) among the faults
    drain_timeout: float = 240.0
    folder: Path | None = None  # where the workers' logs go (a temporary folder if None)

    def kinds(self) -> list[str]:
        kinds = ["kill_worker", "stop_worker", "cut_sessions"]
        if self.pool == "processes":
            kinds += ["kill_child", "stop_parent"]
        if self.restarts:
            kinds.append("restart_server")
        return kinds


@dataclass
class Outcome:
    plan: FaultPlan
    history: History
    violations: list[Violation]
    duration: float
    faults: Counter[str] = field(default_factory=Counter)


# --- a PostgreSQL cluster of the run's own ---------------------------------------------


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if not found:
        raise RuntimeError("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


def _version(path: str) -> float:
    return float(Path(path).parts[-3])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """``initdb`` in a temporary folder, a server on a free port with durability off (the
    run tests the queue, not the disk). As root, it runs as ``postgres``, which PostgreSQL
    requires."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="cq-faults-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.bin = postgres_bin()

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*prefix, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def start(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.folder / "server.log"), "-w", "start")  # fmt: skip

    def restart(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "restart")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def create_database(port: int) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.execute(f"CREATE DATABASE {DATABASE}")


def setup_django(port: int) -> None:
    """Django on the run's database, with the suite's settings (this process only)."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE=WORKER_SETTINGS,
        CRONQUEUE_TEST_DB="postgres",
        CRONQUEUE_TEST_DB_EXACT_NAME=DATABASE,
        PGPORT=str(port),
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def with_database(action: Callable[[], T], timeout: float = 60.0) -> T:
    """``action()``, retried on a new connection while the faults keep the database away."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except DatabaseError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# --- the workers and the faults ----------------------------------------------------


class Workers:
    """The run's ``runjobs`` processes: each in a session of its own, so that a stop
    reaches its children too."""

    def __init__(self, plan: FaultPlan, folder: Path, port: int) -> None:
        from tests.processes import Runjobs

        self.plan = plan
        self.port = port
        self.runner = Runjobs(folder, WORKER_SETTINGS)
        self.alive: list[subprocess.Popen[bytes]] = []
        self.killed: set[int] = set()
        self.stopped: dict[int, tuple[float, bool]] = {}  # pid -> (SIGCONT's time, group)
        self.may_exit: set[int] = set()  # workers whose forker was killed

    def replace_exited(self) -> None:
        """A worker that exited after its forker was killed is replaced, as a supervisor
        would; any other exit is left for the checker."""
        for process in list(self.alive):
            if process.poll() is not None and process.pid in self.may_exit:
                self.alive.remove(process)
                self.start_one()

    def start_one(self) -> None:
        settings = {
            "LEASE": self.plan.lease,
            "POLL_INTERVAL": self.plan.poll_interval,
            "DISCOVER": ["jobs", "fault_jobs"],
        }
        arguments = ["--pool", self.plan.pool, "--concurrency", str(self.plan.concurrency)]
        process = self.runner.start(
            *arguments,
            settings=settings,
            env={"PGPORT": str(self.port), "CRONQUEUE_TEST_LOG_LEVEL": "WARNING"},
            new_session=True,
        )
        self.alive.append(process)

    def running(self) -> list[subprocess.Popen[bytes]]:
        return [process for process in self.alive if process.pid not in self.stopped]

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        self.killed.add(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        self.alive.remove(process)

    def stop(self, process: subprocess.Popen[bytes], until: float, group: bool = True) -> None:
        """Stop the worker with its children (``group``), or the worker process alone."""
        (os.killpg if group else os.kill)(process.pid, signal.SIGSTOP)
        self.stopped[process.pid] = (until, group)

    def resume_due(self, now: float) -> None:
        for pid, (until, group) in list(self.stopped.items()):
            if until <= now:
                (os.killpg if group else os.kill)(pid, signal.SIGCONT)
                del self.stopped[pid]

    def resume_all(self) -> None:
        self.resume_due(float("inf"))

    def unexpected_exits(self) -> list[tuple[int, int | None]]:
        return [
            (process.pid, process.returncode)
            for process in self.runner.processes
            if process.pid not in self.killed | self.may_exit and process.poll() is not None
        ]

    def terminate(self) -> None:
        self.resume_all()
        for process in self.alive:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.alive:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def logs(self) -> str:
        return self.runner.logs()

    def kill_all(self) -> None:
        for process in self.runner.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def descendants_of(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        found += [child, *descendants_of(child)]
    return found


def held_by(pid: int) -> tuple[Held, ...]:
    """The jobs a worker holds (claimed, running or not yet started) and their leases."""
    from django_cronqueue.models import Job

    rows = with_database(
        lambda: list(
            Job.objects.filter(status="running", worker_id__contains=f":{pid}:").values_list(
                "id", "attempts", "locked_until"
            )
        )
    )
    return tuple(Held(job, attempts, until.timestamp()) for job, attempts, until in rows)


def cut_sessions() -> None:
    from django.db import connection

    def terminate() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [DATABASE],
            )

    with_database(terminate)


class ReturnWatch:
    """Watches the jobs a killed or stopped worker held, and notes when each came back:
    no longer running under the attempt it held (pending again by whatever path, or claimed
    again), read from the database every tick."""

    def __init__(self) -> None:
        self.watched: dict[int, int] = {}  # job -> the attempt its worker held
        self.returns: dict[tuple[int, int], float] = {}

    def add(self, held: tuple[Held, ...]) -> None:
        for job in held:
            self.watched.setdefault(job.job, job.attempt)

    def look(self) -> None:
        from django.db import DatabaseError, connection

        from django_cronqueue.models import Job

        if not self.watched:
            return
        try:
            rows = Job.objects.filter(id__in=list(self.watched)).values_list(
                "id", "status", "attempts"
            )
            now = time.time()
            for job, status, attempts in rows:
                attempt = self.watched[job]
                if status != "running" or attempts != attempt:
                    self.returns[(job, attempt)] = now
                    del self.watched[job]
        except DatabaseError:
            connection.close()  # the faults keep the database away: the next tick looks again


class Injector:
    """Applies the seeded faults, one at a time."""

    # A stop this long past the lease: its jobs' leases expire while it is stopped.
    STOP_BEYOND_LEASE = (1.0, 3.0)

    def __init__(self, plan: FaultPlan, workers: Workers, cluster: Cluster) -> None:
        self.plan = plan
        self.workers = workers
        self.cluster = cluster
        self.random = random.Random(plan.seed)
        self.faults: list[Fault] = []
        self.returns = ReturnWatch()

    def note(self, fault: Fault) -> None:
        self.faults.append(fault)
        self.returns.add(fault.held)

    def next_pause(self) -> float:
        return self.random.uniform(0.5, 3.0)

    def inject(self) -> None:
        kind = self.random.choice(self.plan.kinds())
        running = self.workers.running()
        # Keep one worker going: a run where every worker is stopped tests nothing more.
        if kind in ("kill_worker", "stop_worker", "stop_parent", "kill_child") and len(running) < 2:
            kind = "cut_sessions"
        getattr(self, kind)(running)

    def kill_worker(self, running: list[subprocess.Popen[bytes]]) -> None:
        victim = self.random.choice(running)
        descendants = tuple(descendants_of(victim.pid))
        at = time.time()
        self.workers.kill(victim)
        self.note(
            Fault(
                at,
                "kill_worker",
                victim.pid,
                held=settled_holdings(victim),
                descendants=descendants,
            )
        )
        self.workers.start_one()

    def stop_worker(self, running: list[subprocess.Popen[bytes]]) -> None:
        victim = self.random.choice(running)
        at = time.time()
        until = at + self.plan.lease + self.random.uniform(*self.STOP_BEYOND_LEASE)
        self.workers.stop(victim, until)
        self.note(Fault(at, "stop_worker", victim.pid, until=until, held=settled_holdings(victim)))

    def stop_parent(self, running: list[subprocess.Popen[bytes]]) -> None:
        """The process pool's worker stopped while its children go on."""
        victim = self.random.choice(running)
        at = time.time()
        until = at + self.plan.lease + self.random.uniform(*self.STOP_BEYOND_LEASE)
        self.workers.stop(victim, until, group=False)
        self.note(Fault(at, "stop_parent", victim.pid, until=until, held=settled_holdings(victim)))

    def kill_child(self, running: list[subprocess.Popen[bytes]]) -> None:
        """SIGKILL to one of a worker's pool processes: its forker (its one child) or a
        job's child (the forker's). A worker whose forker died may stop; a supervisor
        starts another in its place."""
        candidates = [
            (process, child) for process in running for child in descendants_of(process.pid)
        ]
        if not candidates:
            return self.cut_sessions(running)
        process, child = self.random.choice(candidates)
        descendants = tuple(descendants_of(child))
        if child in children(process.pid):
            self.workers.may_exit.add(process.pid)
        at = time.time()
        os.kill(child, signal.SIGKILL)
        self.faults.append(Fault(at, "kill_child", child, descendants=descendants))
        return None

    def cut_sessions(self, running: list[subprocess.Popen[bytes]]) -> None:
        self.faults.append(Fault(time.time(), "cut_sessions"))
        cut_sessions()

    def restart_server(self, running: list[subprocess.Popen[bytes]]) -> None:
        from django.db import connection

        at = time.time()
        self.cluster.restart()
        self.faults.append(Fault(at, "restart_server", until=time.time()))
        connection.close()


def settled_holdings(process: subprocess.Popen[bytes]) -> tuple[Held, ...]:
    """The jobs a killed or stopped worker held, read once anything it had sent before the
    signal has reached the server (a heartbeat on its way could still extend a lease)."""
    time.sleep(0.5)
    return held_by(process.pid)


# --- the run -----------------------------------------------------------------------


LONG_SHARE = 0.03  # of the jobs run one to three leases: a stop past a lease finds them mid-run


def duration(plan: FaultPlan, rng: random.Random) -> float:
    if rng.random() < LONG_SHARE:
        return rng.uniform(plan.lease, 3 * plan.lease)
    return rng.uniform(0.02, 0.3)


def enqueue(plan: FaultPlan, rng: random.Random, count: int) -> None:
    from django_cronqueue import jobs

    from . import fault_jobs

    payloads = [{"seconds": round(duration(plan, rng), 3)} for _ in range(count)]
    if plan.pool == "asyncio":  # half the handlers async, half sync (run in threads)
        half = count // 2
        with_database(lambda: jobs.enqueue_many(fault_jobs.fault_async, payloads[:half]))
        with_database(lambda: jobs.enqueue_many(fault_jobs.fault_sync, payloads[half:]))
    else:
        with_database(lambda: jobs.enqueue_many(fault_jobs.fault_sync, payloads))


def finished(total: int) -> bool:
    from django_cronqueue.models import Job

    done = with_database(lambda: Job.objects.filter(status__in=("succeeded", "failed")).count())
    return done >= total


def run_faults(plan: FaultPlan, report: Callable[[str], None] = print) -> Outcome:
    """Start the cluster (and PgBouncer), the workers, the faults; drain; check."""
    cluster = Cluster()
    cluster.start()
    bouncer = None
    try:
        create_database(cluster.port)
        setup_django(cluster.port)
        port = cluster.port
        if plan.pgbouncer:
            from .pgbouncer import PgBouncer

            # PgBouncer waits server_login_retry (15 s by default) after a failed login
            # before it tries the server again: a restart's outage, lengthened by the pooler.
            bouncer = PgBouncer(
                "127.0.0.1", cluster.port, "postgres", pool_size=20, extra=BOUNCER_RETRY
            )
            bouncer.start()
            port = bouncer.port
        folder = plan.folder or Path(tempfile.mkdtemp(prefix="cq-faults-"))
        folder.mkdir(parents=True, exist_ok=True)
        return _run(plan, cluster, port, folder, report)
    finally:
        if bouncer is not None:
            bouncer.stop()
        cluster.stop()


def _run(
    plan: FaultPlan, cluster: Cluster, port: int, folder: Path, report: Callable[[str], None]
) -> Outcome:
    workers = Workers(plan, folder, port)
    try:
        return _inject_and_drain(plan, cluster, workers, folder, report)
    except BaseException:
        workers.kill_all()  # a run cut short (an error, Ctrl-C) leaves no worker behind
        raise


def _inject_and_drain(
    plan: FaultPlan,
    cluster: Cluster,
    workers: Workers,
    folder: Path,
    report: Callable[[str], None],
) -> Outcome:
    injector = Injector(plan, workers, cluster)
    payload_random = random.Random(plan.seed + 1)
    origin = time.time()
    for _ in range(plan.workers):
        workers.start_one()
    report(f"{plan.pool}: {plan.workers} workers x {plan.concurrency}, seed {plan.seed}")
    enqueued = 0
    next_fault = time.monotonic() + injector.next_pause()
    end_of_faults = time.monotonic() + plan.seconds
    while time.monotonic() < end_of_faults:
        due = int(
            plan.jobs * min(1.0, (time.monotonic() - (end_of_faults - plan.seconds)) / plan.seconds)
        )
        if due > enqueued:
            enqueue(plan, payload_random, due - enqueued)
            enqueued = due
        workers.resume_due(time.time())
        workers.replace_exited()
        injector.returns.look()
        if time.monotonic() >= next_fault:
            injector.inject()
            next_fault = time.monotonic() + injector.next_pause()
        time.sleep(0.1)
    if enqueued < plan.jobs:
        enqueue(plan, payload_random, plan.jobs - enqueued)
    workers.resume_all()
    report(f"{plan.pool}: {len(injector.faults)} faults in {plan.seconds:.0f}s; draining")
    deadline = time.monotonic() + plan.drain_timeout
    while not finished(plan.jobs) and time.monotonic() < deadline:
        workers.replace_exited()
        injector.returns.look()
        time.sleep(0.2)
    exits = workers.unexpected_exits()
    workers.terminate()
    history = read_history(plan, origin, injector.faults, exits)
    for key, instant in injector.returns.returns.items():  # seen, or recorded, first
        history.recoveries[key] = min(instant, history.recoveries.get(key, instant))
    logs = workers.logs()
    (folder / "workers.log").write_text(logs)
    history.dead_threads = [line for line in logs.splitlines() if "Exception in thread" in line]
    history.lease_kills = {int(pid) for pid in LEASE_KILL.findall(logs)}
    return Outcome(
        plan=plan,
        history=history,
        violations=check(history),
        duration=time.time() - origin,
        faults=Counter(fault.kind for fault in injector.faults),
    )


def read_history(
    plan: FaultPlan, origin: float, faults: list[Fault], exits: list[tuple[int, int | None]]
) -> History:
    from django_cronqueue.models import Job
    from tests.testapp.models import SideEffect

    from .fault_jobs import END, RECOVERED, REFUSED, START

    rows = with_database(
        lambda: list(Job.objects.values_list("id", "status", "attempts", "last_error"))
    )
    marks = with_database(
        lambda: list(
            SideEffect.objects.filter(key__startswith="fault-").values_list(
                "key", "pid", "created_at"
            )
        )
    )
    ends: dict[tuple[int, int], float] = {}
    for key, _, created_at in marks:
        if key.startswith(f"{END}:"):
            _, job, attempt = key.split(":")
            ends[(int(job), int(attempt))] = created_at.timestamp()
    runs = []
    for key, pid, created_at in marks:
        if key.startswith(f"{START}:"):
            _, job, attempt, worker_pid, claimed = key.split(":")
            runs.append(
                Run(
                    job=int(job),
                    attempt=int(attempt),
                    worker_pid=int(worker_pid),
                    pid=pid,
                    claimed=None if claimed == "-" else float(claimed),
                    started=created_at.timestamp(),
                    ended=ends.get((int(job), int(attempt))),
                )
            )
    recoveries = {}
    for key, _, created_at in marks:
        if key.startswith(f"{RECOVERED}:"):
            _, job, attempt = key.split(":")
            recoveries[(int(job), int(attempt))] = created_at.timestamp()
    refusals = []
    for key, pid, created_at in marks:
        if key.startswith(f"{REFUSED}:"):
            _, job, attempt, error = key.split(":")
            refusals.append(Refusal(int(job), int(attempt), pid, created_at.timestamp(), error))
    return History(
        origin=origin,
        lease=plan.lease,
        poll_interval=plan.poll_interval,
        grace=plan.grace,
        jobs=[JobRow(*row) for row in rows],
        runs=runs,
        faults=faults,
        concurrency=handler_threads(plan),
        refusals=refusals,
        recoveries=recoveries,
        unexpected_exits=exits,
    )


def handler_threads(plan: FaultPlan) -> int:
    """How many threads of one process run handlers, each with its own connections."""
    if plan.pool == "processes":
        return 1  # a child runs one job at a time
    if plan.pool == "asyncio":
        from django_cronqueue.worker.asyncio_pool import SYNC_THREADS

        return SYNC_THREADS + 1  # sync handlers' threads, and async handlers' one
    return plan.concurrency


def summary(outcome: Outcome) -> dict[str, Any]:
    jobs = outcome.history.jobs
    statuses = Counter(job.status for job in jobs)
    return {
        "pool": outcome.plan.pool,
        "pgbouncer": outcome.plan.pgbouncer,
        "seed": outcome.plan.seed,
        "jobs": len(jobs),
        "succeeded": statuses["succeeded"],
        "failed": statuses["failed"],
        "attempts": sum(job.attempts for job in jobs),
        "runs": len(outcome.history.runs),
        "faults": dict(outcome.faults),
        "violations": len(outcome.violations),
        "seconds": round(outcome.duration, 1),
    }
