"""Finished jobs: where their rows go and how they are counted.

- ``counting``: the counts of finished rows per name, queue, status, hour and day, kept
  off the worker's per-job path so that no reader counts the history;
- ``archive``: history tables out of the claim's way (PostgreSQL's per-day tables,
  MariaDB's partition) and a retry's way back.

May import ``models``, ``db``, ``conf`` and ``values``.
"""
