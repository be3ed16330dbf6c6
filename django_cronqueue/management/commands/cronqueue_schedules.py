from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone


class Command(BaseCommand):
    help = (
        "List every cron schedule with its next five runs (UTC and local). "
        "With --json, print a stable JSON document to diff in CI. The dynamic schedules "
        "are read and written a chunk at a time."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument(
            "--now",
            help="Compute the next runs after this ISO 8601 instant instead of now "
            "(for reproducible output), e.g. 2026-01-01T00:00:00+00:00.",
        )
        parser.add_argument("--count", type=int, default=5, help="Next runs to list (default 5).")

    def handle(self, *args: Any, **options: Any) -> None:
        from django_cronqueue import observe

        now = self._now(options["now"])
        described, rows_readable = observe.describe_schedules(now, options["count"])
        if options["json"]:
            self._write_json(described)
            return
        if not rows_readable:
            self.stderr.write("(database not readable: paused/last occurrence not shown)")
        for item in described:
            state = "inactive" if not item["active"] else "paused" if item["paused"] else "active"
            dynamic = item["source"] == "dynamic"
            runs = f" job={item['job']} payload={json.dumps(item['payload'])}" if dynamic else ""
            self.stdout.write(
                f"{item['name']}  {item['expression']}  {item['tz']}  [{state}] "
                f"{item['source']} catch_up={item['catch_up']} overlap={item['overlap']}{runs}"
            )
            for run in item["next_runs"]:
                self.stdout.write(f"    {run['local']}  ({run['utc']})")

    def _write_json(self, described: Iterable[dict[str, Any]]) -> None:
        """``json.dumps(list(described), indent=2)``, written one schedule at a time (a
        JSON text has no raw newline inside a string: each line is indented by two)."""
        separator = "[\n"
        for item in described:
            self.stdout.write(
                separator + "  " + json.dumps(item, indent=2).replace("\n", "\n  "), ending=""
            )
            separator = ",\n"
        self.stdout.write("[]" if separator == "[\n" else "\n]")

    def _now(self, text: str | None) -> dt.datetime:
        if not text:
            return timezone.now()
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise CommandError(f"--now must be an ISO 8601 datetime, got {text!r}") from None
        if timezone.is_naive(value):
            raise CommandError("--now needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00")
        return value
