"""Signals sent around a job's life. Every one is sent with ``sender`` = the job's name.

- ``job_started(job)``: a worker is about to call the handler.
- ``job_succeeded(job, result, duration)``: the handler returned.
- ``job_retrying(job, exc, run_at)``: the handler raised (or its lease was lost) and the
  job will run again at ``run_at``.
- ``job_failed(job, exc)``: the last attempt failed; the job is ``failed``.
- ``cron_occurrence_created(job, schedule)``: a cron occurrence became a job row.
"""

from django.dispatch import Signal

job_started = Signal()
job_succeeded = Signal()
job_failed = Signal()
job_retrying = Signal()
cron_occurrence_created = Signal()
