from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

if TYPE_CHECKING:
    from django_cronqueue.health import StatusReport


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError(text)
    return value


def one_line(text: str) -> str:
    """``text`` on one line, without control characters (a terminal's escape sequences):
    progress messages and reasons are written by code and operators."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


class Command(BaseCommand):
    help = (
        "Show the state of the job queue: jobs per status and name, the oldest due "
        "pending job, the running jobs and their progress, paused queues and job names, "
        "cron schedules and their next runs, live workers. With --check, exit non-zero "
        "when no worker is alive, a live worker's clock is off the database's by more "
        "than MAX_CLOCK_SKEW, a schedule is overdue, due pending jobs of a name no live "
        "worker defines have waited longer than LEASE, or the oldest due pending job that "
        "no pause holds back is too old (a health probe)."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        from django_cronqueue.health import DEFAULT_MAX_PENDING_AGE, DEFAULT_SCHEDULE_GRACE
        from django_cronqueue.observe import STATUSES_SHOWN

        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument(
            "--check",
            action="store_true",
            help="Exit with status 1, printing each reason, when the queue is unhealthy.",
        )
        parser.add_argument(
            "--max-pending-age",
            type=non_negative_float,
            default=DEFAULT_MAX_PENDING_AGE,
            metavar="S",
            help="--check fails when the oldest due pending job has waited longer than "
            f"this many seconds (default {DEFAULT_MAX_PENDING_AGE:g}); jobs of a paused "
            "queue or job name are not counted.",
        )
        parser.add_argument(
            "--schedule-grace",
            type=non_negative_float,
            default=DEFAULT_SCHEDULE_GRACE,
            metavar="S",
            help="A schedule is overdue when its next occurrence is this many seconds "
            f"late and still not created (default {DEFAULT_SCHEDULE_GRACE:g}).",
        )
        parser.add_argument(
            "--all-schedules",
            action="store_true",
            help="List every dynamic schedule; by default those neither overdue nor paused "
            f"are listed only up to {STATUSES_SHOWN} (the next to run) and counted.",
        )
        parser.add_argument(
            "--min-workers",
            type=int,
            default=1,
            metavar="N",
            help="--check fails with fewer live workers than this (default 1; 0 when "
            "workers run only from time to time, e.g. runjobs --once from cron).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_cronqueue import health

        try:
            report = health.collect(
                schedule_grace=options["schedule_grace"],
                every_schedule=options["all_schedules"],
            )
        except DatabaseError as exc:
            reason = health.explain_failure(exc)
            if options["json"]:
                self.stdout.write(json.dumps({"problems": [reason]}, indent=2))
            raise CommandError(reason, returncode=1) from None
        if options["check"]:
            report.problems = health.problems(
                report,
                max_pending_age=options["max_pending_age"],
                min_workers=options["min_workers"],
            )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            self._print(report, checked=options["check"])
        if report.problems:
            for reason in report.problems:
                self.stderr.write(f"FAIL: {reason}")
            raise CommandError(
                f"cronqueue is unhealthy ({len(report.problems)} problem(s))", returncode=1
            )

    def _print(self, report: StatusReport, *, checked: bool) -> None:
        write = self.stdout.write
        write(f"Jobs at {report.now.isoformat()}")
        write("  " + "  ".join(f"{name}={count}" for name, count in report.counts.items()))
        if report.counts_by_name:
            width = max(len(name) for name in report.counts_by_name)
            for name, counts in report.counts_by_name.items():
                parts = "  ".join(f"{key}={value}" for key, value in sorted(counts.items()))
                write(f"  {name:<{width}}  {parts}")
        oldest = report.oldest_pending
        if oldest is None:
            write("Oldest due pending job: none")
        else:
            write(
                f"Oldest due pending job: {oldest.name} #{oldest.id} (queue {oldest.queue}), "
                f"waiting {oldest.age_seconds:.0f}s"
            )
        for stranded in report.stranded:
            write(
                f"Stranded: {stranded.count} due pending {stranded.name} job(s), the oldest "
                f"waiting {stranded.waited_seconds:.0f}s: no live worker defines this name"
            )
        self._print_running(report)
        self._print_pauses(report)
        self._print_schedules(report)
        self._print_storage(report)
        alive = report.live_workers
        write(f"Workers: {len(alive)} alive, {len(report.workers) - len(alive)} not seen lately")
        for worker in report.workers:
            queues = ",".join(worker.queues) if worker.queues else "all queues"
            clock = "" if worker.clock_offset is None else f"  clock {worker.clock_offset:+.3f}s"
            write(
                f"  {worker.id}  {'alive' if worker.alive else 'DEAD'}  "
                f"last seen {worker.seen_seconds_ago:.0f}s ago  concurrency {worker.concurrency}"
                f"  {queues}{clock}"
            )
        if checked and not report.problems:
            write("OK")

    def _print_storage(self, report: StatusReport) -> None:
        """PostgreSQL only: the job table's dead rows and the oldest open transaction."""
        storage = report.storage
        if storage is None:
            return
        write = self.stdout.write
        write(f"Dead job rows: {storage.dead_tuples}")
        oldest = storage.oldest_transaction
        if oldest is None:
            write("Oldest open transaction on the database: none")
        else:
            write(
                f"Oldest open transaction on the database: {oldest.age_seconds:.0f}s "
                f"(pid {oldest.pid}, {one_line(oldest.state)}, "
                f"application {one_line(oldest.application_name)!r})"
            )

    def _print_schedules(self, report: StatusReport) -> None:
        """Every schedule listed, then how many dynamic ones were not."""
        write = self.stdout.write
        write(f"Cron schedules ({len(report.schedules) + report.schedules_not_listed}):")
        for schedule in report.schedules:
            state = (
                "inactive"
                if not schedule.active
                else "paused"
                if schedule.paused
                else "OVERDUE"
                if schedule.overdue
                else "not armed yet"
                if schedule.cursor is None
                else "ok"
            )
            next_run = schedule.next_run.isoformat() if schedule.next_run else "-"
            runs = f"  (dynamic: runs {schedule.job})" if schedule.job else ""
            write(
                f"  {schedule.name}  {schedule.expression}  {schedule.tz}  [{state}]  "
                f"next run {next_run}{runs}"
            )
        if report.schedules_not_listed:
            write(
                f"  ... and {report.schedules_not_listed} more dynamic schedule(s), neither "
                "overdue nor paused (--all-schedules lists them)"
            )

    def _print_running(self, report: StatusReport) -> None:
        running = report.counts.get("running", 0)
        shown = "" if len(report.running) >= running else f", the {len(report.running)} oldest"
        self.stdout.write(f"Running jobs ({running}{shown}):")
        for job in report.running:
            age = (
                f"started {(report.now - job.started_at).total_seconds():.0f}s ago"
                if job.started_at
                else "not started"
            )
            progress = f"  progress {one_line(job.progress.describe())}" if job.progress else ""
            cancel = (
                f"  [cancel requested by {one_line(job.cancel_requested_by) or 'code'}]"
                if job.cancel_requested_at
                else ""
            )
            self.stdout.write(f"  {job.name} #{job.id}  queue {job.queue}  {age}{progress}{cancel}")

    def _print_pauses(self, report: StatusReport) -> None:
        in_force = report.pauses_in_force
        self.stdout.write(f"Paused ({len(in_force)}):" if in_force else "Paused: nothing")
        for pause in in_force:
            until = f"until {pause.until.isoformat()}" if pause.until else "until resumed"
            by = f"  by {one_line(pause.paused_by)}" if pause.paused_by else ""
            reason = f": {one_line(pause.reason)}" if pause.reason else ""
            self.stdout.write(f"  {pause.target}  {until}{by}{reason}")
