"""The Django admin for jobs, cron schedules, pauses and batches, and the queue dashboard.

Operators see and steer; they never edit a job or schedule row. Every state change is a
CSRF-protected POST that needs the ``change_job`` (or ``change_cronschedule``) permission
and goes through the library's own methods (``actions``; pauses are added, changed and
deleted through ``jobs.pause()`` and ``jobs.resume()``). Every text shown is escaped
(``format_html`` and templates). The job list stays fast on millions of rows: constant
query count, one aggregate for the status counts, and no COUNT(*) over the whole table
(``filters``). Every fact shown is read from ``django_cronqueue.observe``.

May import every concept (``jobs``, ``operations``, ``schedules``, ``observe``, ...); no
module of the package imports it.
"""

from django.contrib import admin

from ..models import Batch, CronSchedule, FairShare, Job, Pause
from .batches import BatchAdmin
from .fair_shares import FairShareAdmin
from .jobs import JobAdmin
from .pauses import PauseAdmin
from .schedules import CronScheduleAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(CronSchedule, CronScheduleAdmin)
admin.site.register(Pause, PauseAdmin)
admin.site.register(Batch, BatchAdmin)
admin.site.register(FairShare, FairShareAdmin)

__all__ = ["BatchAdmin", "CronScheduleAdmin", "FairShareAdmin", "JobAdmin", "PauseAdmin"]
