"""What a worker's ticks keep tidy besides running jobs.

- ``maintenance``: expired leases returned, finished rows pruned past their retention
  (and out of the counts), old batches, flow-control rows and dead workers removed;
- ``vacuum``: the worker's own vacuum of the job table on PostgreSQL, between
  autovacuum's visits.

May import ``lifecycle``, ``observe`` and everything below them.
"""
