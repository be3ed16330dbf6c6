"""Finished jobs: where their rows go and how they are counted.

- ``counting``: the counts of finished rows per name, queue, status, hour and day, kept
  off the worker's per-job path so that no reader counts the history;
- ``archive``: history tables out of the claim's way (PostgreSQL's per-day tables,
  MariaDB's partition) and a retry's way back.

May import ``models``, ``db``, ``conf`` and ``values``.
"""


class Busy(Exception):
    """Another process holds what a housekeeping chore needs: the counts' mark
    (``counting.lock_mark(wait=False)``) or a history table it is making
    (``archive.postgresql.ensure_table``). A pass never waits for it (the other process
    may be frozen, by SIGSTOP, with it in hand): the chore is left to the next pass."""
