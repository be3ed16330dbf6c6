from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone


class Command(BaseCommand):
    help = (
        "List every cron schedule with its next five runs (UTC and local). "
        "With --json, print a stable JSON document to diff in CI."
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
        from django_cronqueue.registry import registry
        from django_cronqueue.scheduler import describe_schedule

        cron_definitions = registry.cron_definitions

        now = self._now(options["now"])
        rows, rows_readable = self._rows()
        definitions = cron_definitions()
        described = [
            describe_schedule(definition, rows.get(name), now, options["count"])
            for name, definition in sorted(definitions.items())
        ]
        for name, row in sorted(rows.items()):
            if name not in definitions:
                described.append(self._inactive(row))
        if options["json"]:
            self.stdout.write(json.dumps(described, indent=2))
            return
        if not rows_readable:
            self.stderr.write("(database not readable: paused/last occurrence not shown)")
        for item in described:
            state = "inactive" if not item["active"] else "paused" if item["paused"] else "active"
            self.stdout.write(
                f"{item['name']}  {item['expression']}  {item['tz']}  [{state}] "
                f"catch_up={item['catch_up']} overlap={item['overlap']}"
            )
            for run in item["next_runs"]:
                self.stdout.write(f"    {run['local']}  ({run['utc']})")

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

    def _rows(self) -> tuple[dict[str, Any], bool]:
        from django_cronqueue.conf import database_alias
        from django_cronqueue.models import CronSchedule

        try:
            rows = CronSchedule.objects.using(database_alias()).all()
            return {row.name: row for row in rows}, True
        except DatabaseError:
            return {}, False

    def _inactive(self, row: Any) -> dict[str, Any]:
        return {
            "name": row.name,
            "expression": row.expression,
            "tz": row.tz,
            "interval": None,
            "catch_up": row.options.get("catch_up"),
            "catch_up_window": row.options.get("catch_up_window"),
            "max_catch_up": row.options.get("max_catch_up"),
            "overlap": row.options.get("overlap"),
            "paused": row.paused,
            "active": False,
            "last_occurrence": row.last_occurrence.isoformat() if row.last_occurrence else None,
            "next_runs": [],
        }
