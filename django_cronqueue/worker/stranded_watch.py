"""A worker's warning about stranded jobs: due pending jobs whose name no live worker
defines (``observe.stranded``), once per name, checked every ``LEASE`` seconds."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING

from ..conf import discover_modules

if TYPE_CHECKING:  # the read model loads at the first check, not before the first claim
    from ..observe import StrandedName

logger = logging.getLogger("django_cronqueue")


def advice(name: str) -> str:
    """Where the definition of ``name`` must live for the workers to know it."""
    modules = discover_modules()
    listed = ", ".join(f"{module}.py" for module in modules)
    return (
        f"define {name!r} with @jobs.job in a module the workers import: an installed app's "
        f"{listed} (CRONQUEUE['DISCOVER'] = {modules!r} lists the modules imported from "
        'every app; add "tasks" to it for tasks.py), then restart the workers'
    )


def describe(stranded: StrandedName) -> str:
    return (
        f"{stranded.count} due pending job(s) named {stranded.name!r}, the oldest waiting "
        f"{stranded.waited_seconds:.0f}s, will not run: no live worker defines that name; "
        f"{advice(stranded.name)}."
    )


class StrandedWatch:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_check = 0.0  # the first housekeeping checks at once
        self.warned: set[str] = set()

    def check(self, now: dt.datetime) -> None:
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + self.interval
        from ..observe import stranded_names

        for stranded in stranded_names(now):
            if stranded.name not in self.warned:
                self.warned.add(stranded.name)
                logger.warning(
                    "%s",
                    describe(stranded),
                    extra={"job_name": stranded.name, "outcome": "stranded"},
                )
