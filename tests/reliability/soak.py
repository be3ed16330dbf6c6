"""The soak: many jobs through several ``runjobs`` processes, 10% of calls failing at
random and retried, then an exact audit.

``run_soak`` is shared by tests/reliability/test_soak.py (a reduced size, in CI) and
``bench/soak.py`` (the full 100,000 jobs, by hand). It needs Django set up on a
database with the suite's jobs registered (``tests.reliability.worker_settings``) and
a ``start`` callable that starts one ``runjobs`` process with the given arguments.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection
from django.db.models import Sum

from django_cronqueue import jobs
from django_cronqueue.models import Job, JobStatus
from tests.testapp.models import SideEffect

from . import jobs as rel

Start = Callable[..., subprocess.Popen]
WARM_UP = 0.05  # RSS "at start" is taken once this share of the jobs has finished


@dataclass
class SoakReport:
    enqueued: int
    workers: int
    concurrency: int
    duration: float = 0.0
    succeeded: int = 0
    failed: int = 0
    running: int = 0
    pending: int = 0
    attempts: int = 0
    handler_calls: int = 0
    jobs_whose_calls_differ_from_attempts: int = 0
    rss_start_kb: list[int] = field(default_factory=list)
    rss_end_kb: list[int] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.enqueued / self.duration if self.duration else 0.0

    def problems(self) -> list[str]:
        found = []
        if self.succeeded + self.failed != self.enqueued:
            found.append(
                f"succeeded + failed = {self.succeeded + self.failed}, enqueued {self.enqueued}"
            )
        if self.running or self.pending:
            found.append(f"{self.running} running and {self.pending} pending rows left")
        if self.attempts != self.handler_calls:
            found.append(f"sum of attempts {self.attempts} != handler calls {self.handler_calls}")
        if self.jobs_whose_calls_differ_from_attempts:
            found.append(f"{self.jobs_whose_calls_differ_from_attempts} jobs' calls != attempts")
        if any(code != 0 for code in self.exit_codes):
            found.append(f"worker exit codes {self.exit_codes}")
        return found

    def lines(self) -> list[str]:
        mb = [f"{start / 1024:.1f} -> {end / 1024:.1f} MB"
              for start, end in zip(self.rss_start_kb, self.rss_end_kb, strict=True)]  # fmt: skip
        return [
            f"jobs enqueued      {self.enqueued:,} through {self.workers} workers "
            f"x {self.concurrency} slots",
            f"duration           {self.duration:.1f} s ({self.throughput:,.0f} jobs/s)",
            f"succeeded          {self.succeeded:,}",
            f"failed             {self.failed:,} (after 4 attempts)",
            f"running / pending  {self.running} / {self.pending}",
            f"sum of attempts    {self.attempts:,}",
            f"handler calls      {self.handler_calls:,}",
            f"worker RSS         {', '.join(mb)} (after {WARM_UP:.0%} of the jobs -> at the end)",
            f"worker exit codes  {self.exit_codes}",
        ]


def rss_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def enqueue_soak_jobs(count: int, batch: int = 5000) -> None:
    for first in range(0, count, batch):
        jobs.enqueue_many(rel.soak, [{"n": n} for n in range(first, min(first + batch, count))])


def analyze() -> None:
    """Give the planner statistics of the freshly filled table, as a table in service has
    (until autovacuum's first ANALYZE, PostgreSQL plans claims for an empty table)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")


def run_soak(
    start: Start,
    *,
    count: int,
    workers: int = 4,
    concurrency: int = 2,
    timeout: float = 3600,
    progress: Callable[[str], None] | None = None,
) -> SoakReport:
    report = SoakReport(enqueued=count, workers=workers, concurrency=concurrency)
    enqueue_soak_jobs(count)
    analyze()
    began = time.monotonic()
    processes = [start("--concurrency", str(concurrency)) for _ in range(workers)]
    unfinished = Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
    deadline = began + timeout
    last_report = 0.0
    while True:
        left = unfinished.count()
        if not report.rss_start_kb and left <= count * (1 - WARM_UP):
            report.rss_start_kb = [rss_kb(process.pid) for process in processes]
        if left == 0:
            break
        if any(process.poll() is not None for process in processes):
            raise RuntimeError(f"a worker exited: {[p.returncode for p in processes]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{left} jobs unfinished after {timeout}s")
        if progress and time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            progress(f"{count - left:,} of {count:,} finished, {time.monotonic() - began:.0f} s")
        time.sleep(0.5)
    report.duration = time.monotonic() - began
    report.rss_end_kb = [rss_kb(process.pid) for process in processes]
    for process in processes:
        process.send_signal(signal.SIGTERM)
    report.exit_codes = [process.wait(60) for process in processes]
    audit(report)
    return report


def audit(report: SoakReport) -> None:
    statuses = Counter(dict(Job.objects.values_list("status").annotate(n=Sum(1)).order_by()))
    report.succeeded = statuses.get(JobStatus.SUCCEEDED, 0)
    report.failed = statuses.get(JobStatus.FAILED, 0)
    report.running = statuses.get(JobStatus.RUNNING, 0)
    report.pending = statuses.get(JobStatus.PENDING, 0)
    report.attempts = Job.objects.aggregate(total=Sum("attempts"))["total"] or 0
    calls = Counter(
        int(key[len("call:") :])
        for key in SideEffect.objects.filter(key__startswith="call:").values_list("key", flat=True)
    )
    report.handler_calls = sum(calls.values())
    report.jobs_whose_calls_differ_from_attempts = sum(
        1
        for n, attempts in Job.objects.filter(name="rel.soak").values_list("payload__n", "attempts")
        if calls.get(int(n), 0) != attempts
    )
