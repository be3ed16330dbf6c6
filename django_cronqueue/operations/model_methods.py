"""The models' verbs, carried out: ``Job.retry()``, ``Job.cancel()``, ``Job.run_now()``
by ``lifecycle``; ``CronSchedule.run_now()``, ``backfill()``, ``pause()`` and ``resume()``
by ``scheduler``; ``CronSchedule.objects.create_dynamic()``, ``edit()`` and ``delete()`` by
``dynamic``. ``AppConfig.ready()`` attaches one ``Verbs`` to the app config, where
``django_cronqueue.models.verbs()`` finds it: the models sit below both modules and so
cannot import them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import lifecycle
from ..models import CronSchedule, Job, ModelVerbs
from ..schedules import dynamic, scheduler


class Verbs(ModelVerbs):
    def retry_job(self, job: Job, *, now: dt.datetime | None) -> bool:
        return lifecycle.retry(job, now=now)

    def cancel_job(self, job: Job, *, reason: str, by: str, now: dt.datetime | None) -> bool:
        return lifecycle.cancel(job, reason=reason, by=by, now=now)

    def run_job_now(self, job: Job, *, now: dt.datetime | None) -> bool:
        return lifecycle.run_now(job, now=now)

    def run_schedule_now(self, schedule: CronSchedule) -> Job:
        return scheduler.run_now(schedule)

    def backfill_schedule(
        self, schedule: CronSchedule, start: dt.datetime, end: dt.datetime
    ) -> int:
        return scheduler.backfill(schedule, start, end)

    def set_schedule_paused(self, schedule: CronSchedule, paused: bool) -> bool:
        return scheduler.set_paused(schedule, paused)

    def create_dynamic_schedule(self, **definition: Any) -> CronSchedule:
        return dynamic.create(**definition)

    def edit_schedule(self, schedule: CronSchedule, changes: dict[str, Any]) -> None:
        dynamic.edit(schedule, changes)

    def delete_schedule(self, schedule: CronSchedule) -> tuple[int, dict[str, int]]:
        return dynamic.delete(schedule)
