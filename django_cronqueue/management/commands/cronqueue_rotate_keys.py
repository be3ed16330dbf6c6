"""``manage.py cronqueue_rotate_keys``: encrypt every stored sensitive value again under
the first key of ``CRONQUEUE["ENCRYPTION_KEYS"]`` (``operations.key_rotation``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...operations.key_rotation import BATCH_SIZE, rotate_keys

MAX_LISTED = 50


class Command(BaseCommand):
    help = (
        "Encrypt every stored sensitive argument again under the first key of "
        "CRONQUEUE['ENCRYPTION_KEYS'], in batches, while workers run. Lists the rows no "
        "configured key decrypts (exit status 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH_SIZE,
            help=f"Rows per transaction (default {BATCH_SIZE}).",
        )

    def handle(self, *args: Any, batch_size: int, **options: Any) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        rotation = rotate_keys(batch_size=batch_size)
        self.stdout.write(f"Re-encrypted the sensitive values of {rotation.rotated} rows.")
        if rotation.locked:
            self.stdout.write(
                f"{len(rotation.locked)} rows stayed locked by other transactions; run the "
                f"command again for them: {_listed(rotation.locked)}"
            )
        if rotation.undecryptable:
            raise CommandError(
                f"{len(rotation.undecryptable)} rows hold values no key of "
                "CRONQUEUE['ENCRYPTION_KEYS'] decrypts (add the key they were encrypted "
                f"with, and run the command again): {_listed(rotation.undecryptable)}"
            )


def _listed(rows: list[str]) -> str:
    more = f" and {len(rows) - MAX_LISTED} more" if len(rows) > MAX_LISTED else ""
    return ", ".join(rows[:MAX_LISTED]) + more
