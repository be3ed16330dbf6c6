"""Running one claimed job: the handler called, its outcome recorded.

- ``execution``: call the handler with its payload, turn what happened into an outcome
  and record it (successes in batches); ``run_claimed`` does both for one job;
- ``context``: the running job's ``jobs.current()`` (a context variable, right in async
  handlers too);
- ``console``: what ``runjobs`` prints to stderr when the site has not set up logging.

May import ``lifecycle``, ``claiming`` and everything below them; never the worker.
"""
