"""Cron schedules turned into job rows, exactly once.

- ``scheduler``: syncs the ``CronSchedule`` rows with the registry and, every tick,
  writes the rows of due occurrences (``run_now``, ``backfill``, pauses);
- ``materialize``: which occurrences a schedule's cursor owes, by its catch-up policy,
  and the batch that writes them;
- ``dynamic``: schedules created, edited and deleted at run time.

The time maths is ``cron``'s. May import ``enqueueing`` and everything below it.
"""
