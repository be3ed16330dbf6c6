"""The worker's management command, ``manage.py runjobs`` and ``manage.py
cronqueue_worker``: the same command under two names, the second one no other app uses
(django-extensions has a ``runjobs`` of its own, which wins when its app is listed
first)."""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import sys
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

if TYPE_CHECKING:
    from django_cronqueue.metrics.worker_metrics import WorkerMetrics

MAX_SECONDS = 86_400.0  # a day: longer waits overflow the thread waits they become


def positive_float(text: str) -> float:
    """Seconds, finite, > 0 and at most a day; argparse turns the error into a
    CommandError (or a usage message on the command line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a number of seconds > 0 and at most {MAX_SECONDS:g} (a day)"
        )
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: give a port from 0 to 65535")
    return value


class WorkerCommand(BaseCommand):
    help = (
        "Run the django-cronqueue worker: materialize cron occurrences and run due jobs. "
        "runjobs and cronqueue_worker are the same command."
    )
    requires_system_checks = []  # checks run below, without database checks

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="Q",
            help="Only claim jobs of this queue (repeatable). Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            metavar="N",
            help="Handler threads, each with its own connection. "
            "Default: CRONQUEUE['CONCURRENCY'].",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--once",
            action="store_true",
            help="Run one tick: the jobs due now, then exit (later retries wait for the next run).",
        )
        mode.add_argument(
            "--burst", action="store_true", help="Run until nothing is due, then exit."
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not materialize cron occurrences in this process.",
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_float,
            metavar="S",
            help="Seconds between polls when idle. Default: CRONQUEUE['POLL_INTERVAL'].",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            metavar="S",
            help="Seconds running handlers get to finish after SIGTERM/SIGINT. "
            "Default: CRONQUEUE['SHUTDOWN_TIMEOUT'].",
        )
        parser.add_argument(
            "--pool",
            choices=["threads", "processes", "asyncio"],
            help="How handlers run: threads (one per --concurrency slot), processes (a "
            "forked child per slot, killed at the job's timeout) or asyncio (async def "
            "handlers as tasks of one event loop). Default: CRONQUEUE['POOL'].",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=int,
            metavar="N",
            help="Process pool: replace a child after N jobs. "
            "Default: CRONQUEUE['MAX_JOBS_PER_CHILD'] (no limit).",
        )
        parser.add_argument(
            "--max-memory-per-child",
            type=int,
            metavar="MB",
            help="Process pool: replace a child whose resident set is over MB after a job. "
            "Default: CRONQUEUE['MAX_MEMORY_PER_CHILD'] (no limit).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            metavar="PORT",
            help="Serve this worker's Prometheus metrics on PORT (0: any free port, logged). "
            "Needs django-cronqueue[prometheus].",
        )
        parser.add_argument(
            "--metrics-addr",
            default="0.0.0.0",
            metavar="ADDR",
            help="The address the metrics are served on. Default: 0.0.0.0 (every interface).",
        )

    from_command_line = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def serve_metrics(self, port: int | None, addr: str) -> WorkerMetrics | None:
        if port is None:
            return None
        from django_cronqueue.metrics import worker_metrics

        try:
            return worker_metrics.serve(port, addr)
        except ImproperlyConfigured as exc:
            raise CommandError(f"--metrics-port: {exc}") from None
        except OSError as exc:
            raise CommandError(
                f"--metrics-port {port}: cannot serve on {addr}:{port} ({exc.strerror or exc}); "
                "choose another port, or stop what holds it."
            ) from None

    def handle(self, *args: Any, **options: Any) -> None:
        from django_cronqueue.running import console

        uninstall = console.install(options["verbosity"], options.get("stderr") or sys.stderr)
        try:
            self.run_worker(options)
        finally:
            uninstall()

    def run_worker(self, options: dict[str, Any]) -> None:
        from django_cronqueue.conf import get_settings
        from django_cronqueue.exceptions import NotMigrated
        from django_cronqueue.worker import checks as pool_checks
        from django_cronqueue.worker import make_worker

        pool = options["pool"] or get_settings().POOL
        pool_checks.pool_in_use = pool  # the soft_timeout check judges this pool
        try:
            # The checks that need no database: a worker started while its database is
            # down must wait for it (the loop's backoff), not fail here. (From Django 6.0
            # a model's field checks connect to every database unless told which: MySQL's
            # column types ask the server's version.)
            self.check(display_num_errors=False, databases=[])
        finally:
            pool_checks.pool_in_use = None
        if options["concurrency"] is not None and options["concurrency"] < 1:
            self.stderr.write("--concurrency must be at least 1")
            raise SystemExit(2)
        for option in ("max_jobs_per_child", "max_memory_per_child"):
            if options[option] is not None and options[option] < 1:
                self.stderr.write(f"--{option.replace('_', '-')} must be at least 1")
                raise SystemExit(2)
        worker = make_worker(
            pool,
            queues=options["queues"],
            concurrency=options["concurrency"],
            poll_interval=options["poll_interval"],
            shutdown_timeout=options["shutdown_timeout"],
            scheduler=not options["no_scheduler"],
            mode="once" if options["once"] else "burst" if options["burst"] else "forever",
            max_jobs_per_child=options["max_jobs_per_child"],
            max_memory_per_child=options["max_memory_per_child"],
        )
        metrics = self.serve_metrics(options["metrics_port"], options["metrics_addr"])
        try:
            exit_code = worker.run()
        except NotMigrated as exc:
            raise CommandError(str(exc)) from None
        finally:
            if metrics is not None:
                metrics.close()
        if self.from_command_line:
            # The process exits next. At exit the interpreter runs its cyclic garbage
            # collector over the whole heap (Django, the drivers, every job module), which
            # took 0.15-0.3 s, longer than the stop itself; nothing is left to collect that
            # matters, and Python does not promise finalizers at exit anyway. The atexit
            # handlers (logging's flush, a site's own) still run.
            gc.freeze()
        if (worker.unfinished or exit_code) and self.from_command_line:
            # Handlers still running (past the shutdown timeout, or past their own timeout)
            # would keep the process alive (an async handler's event loop runs in a
            # non-daemon thread that the interpreter joins at exit): leave now, their
            # leases expire. Called in-process (call_command), the caller goes on.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code)
        if exit_code:
            raise SystemExit(exit_code)
