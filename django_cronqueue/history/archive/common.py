"""What the history of every vendor that keeps one shares: which rows may leave the hot
part of the job table, and how often and how much the housekeeping moves."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import NamedTuple

from ...models import Batch, Job, JobDependency

__all__ = [
    "ARCHIVE_BATCH",
    "ARCHIVE_BATCHES",
    "ARCHIVE_EVERY",
    "FINISHED",
    "MOVABLE",
    "TABLE",
    "Budget",
]

TABLE = Job._meta.db_table
ARCHIVE_EVERY = dt.timedelta(seconds=10)
ARCHIVE_BATCH = 5000
# Batches per pass at most: 100,000 rows every ten seconds keeps up with 10,000 jobs/s,
# and a pass ends, so that the housekeeping around it (a transaction held open that
# makes every batch slower, a stop) is seen in time.
ARCHIVE_BATCHES = 20

FINISHED = "('succeeded', 'failed', 'cancelled')"

# A finished row (alias j) leaves the hot part when no link points at it and its
# dedupe_for span passed (one parameter: now).
MOVABLE = (
    "NOT j.has_downstream AND j.batch_id IS NULL"
    " AND (j.window_dedupe_key IS NULL OR j.dedupe_until <= %s)"
    f" AND NOT EXISTS (SELECT 1 FROM {JobDependency._meta.db_table} l"
    " WHERE l.upstream_id = j.id)"
    f" AND NOT EXISTS (SELECT 1 FROM {JobDependency._meta.db_table} l"
    " WHERE l.downstream_id = j.id)"
    f" AND NOT EXISTS (SELECT 1 FROM {Batch._meta.db_table} b WHERE b.then_job_id = j.id)"
    f" AND NOT EXISTS (SELECT 1 FROM {Batch._meta.db_table} b WHERE b.finally_job_id = j.id)"
)


class Budget(NamedTuple):
    """What one pass moves: ``rows`` at most; the first ``owed`` of them whatever the
    queue does (the jobs the worker claimed since its last pass, so that the hot rows
    do not grow), the rest a batch at a time while ``behind()``, if given, is false."""

    rows: int
    owed: int = 0
    behind: Callable[[], bool] | None = None

    def next_batch(self, moved: int, size: int) -> int:
        """The size of the next batch after ``moved`` rows: 0 when the pass ends."""
        if moved >= self.rows:
            return 0
        if moved >= self.owed and self.behind is not None and self.behind():
            return 0
        return min(size, self.rows - moved)
