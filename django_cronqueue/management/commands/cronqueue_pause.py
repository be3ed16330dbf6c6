from __future__ import annotations

import argparse
import datetime as dt
import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

HELP_UNTIL = (
    "End the pause by itself at this instant: an ISO 8601 date and time, e.g. "
    "2026-06-01T14:00+02:00 or 2026-06-01T12:00Z. One without an offset "
    "(2026-06-01T14:00) is read in settings.TIME_ZONE; a local time that a daylight "
    "saving change skips or repeats is refused. Default: until resumed."
)


def parse_until(text: str) -> dt.datetime:
    """An aware instant in the future from ``--until``; argparse turns the error into a
    CommandError (or a usage message on the command line)."""
    try:
        value = parse_datetime(text.strip())
    except ValueError:  # well formed, but no such date or time (2026-02-30)
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date and time (such as 2026-06-01T14:00+02:00)"
        )
    if timezone.is_naive(value):
        value = _local(value, text)
    if value <= timezone.now():
        raise argparse.ArgumentTypeError(f"{text!r} has passed: the pause would end at once")
    return value


def _local(value: dt.datetime, text: str) -> dt.datetime:
    """A naive ``value`` read in settings.TIME_ZONE, refused when that local time does
    not exist (a spring-forward gap) or exists twice (a fall-back hour)."""
    zone = timezone.get_default_timezone()
    first, second = value.replace(tzinfo=zone, fold=0), value.replace(tzinfo=zone, fold=1)
    if first.utcoffset() != second.utcoffset():
        skipped = first.astimezone(dt.timezone.utc).astimezone(zone).replace(tzinfo=None) != value
        problem = "does not exist (the clocks skip it)" if skipped else "happens twice"
        raise argparse.ArgumentTypeError(
            f"{text!r} {problem} in {zone} (settings.TIME_ZONE): give an offset, e.g. +01:00"
        )
    return first


def who() -> str:
    """Who paused, as the pause records it: the operating system user."""
    try:
        return f"{getpass.getuser()} (cronqueue_pause)"
    except (KeyError, OSError):  # no name for this process's user id
        return "cronqueue_pause"


def unused_queue_note(queue: str) -> str:
    """A note when no job this process defines uses ``queue`` and no job row is in it
    (a typo, most likely), naming the queues in use; else ""."""
    from django_cronqueue import observe
    from django_cronqueue.definitions.registry import registry

    defined = {definition.effective_queue for definition in registry}
    if queue in defined or observe.jobs().filter(queue=queue).exists():
        return ""
    in_use = sorted(defined | set(observe.distinct_values("queue")))
    return (
        f"Note: no job that code in this process defines uses queue {queue}, and no job row "
        f"is in it; the pause holds all the same. Queues in use: {', '.join(in_use) or 'none'}."
    )


class Command(BaseCommand):
    help = (
        "Pause a queue or a job name: no worker claims its pending jobs until it is "
        "resumed or --until passes (running jobs finish; enqueue and cron go on). With "
        "--resume, end the pause and wake idle workers. "
        "--until takes an ISO 8601 date and time; without an offset it is read in "
        "settings.TIME_ZONE."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--queue", metavar="Q", help="The queue to pause or resume.")
        target.add_argument(
            "--name", metavar="N", help="The job name to pause or resume (shop.send_email)."
        )
        parser.add_argument("--until", type=parse_until, metavar="ISO8601", help=HELP_UNTIL)
        parser.add_argument(
            "--reason", default="", metavar="TEXT", help="Why, as shown to other operators."
        )
        parser.add_argument(
            "--resume", action="store_true", help="End the pause instead (wakes idle workers)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_cronqueue import jobs
        from django_cronqueue.definitions.registry import registry

        queue, name = options["queue"], options["name"]
        label = f"queue {queue}" if queue is not None else f"job {name}"
        if options["resume"]:
            if options["until"] or options["reason"]:
                raise CommandError("--resume ends a pause: it takes no --until or --reason.")
            try:
                resumed = jobs.resume(queue=queue, name=name)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            message = f"Resumed {label}." if resumed else f"{label.capitalize()} was not paused."
            self.stdout.write(message)
            return
        try:
            pause = jobs.pause(
                queue=queue, name=name, until=options["until"], reason=options["reason"], by=who()
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        until = f"until {pause.until.isoformat()}" if pause.until else "until resumed"
        self.stdout.write(f"Paused {label} {until}: no worker claims its pending jobs.")
        if name is not None and name not in registry:
            self.stderr.write(
                f"Note: no code in this process defines a job named {name}; "
                "the pause holds all the same."
            )
        note = unused_queue_note(queue) if queue is not None else ""
        if note:
            self.stderr.write(note)
