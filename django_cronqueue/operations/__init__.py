"""What an operator or user code does to jobs and schedules, besides enqueueing.

- ``model_methods``: ``Job.retry()``, ``cancel()``, ``run_now()`` and ``CronSchedule``'s
  ``run_now()``, ``backfill()``, ``pause()``, ``resume()`` and dynamic schedules' methods,
  carried out (the models sit below the code they call);
- ``bulk``: the admin's actions on many jobs at once (``retry_jobs``, ``cancel_jobs``,
  ``run_jobs_now``), a batch per statement;
- ``pauses``: ``jobs.pause()`` and ``jobs.resume()`` of a queue or a job name.

May import ``schedules`` and everything below it.
"""
