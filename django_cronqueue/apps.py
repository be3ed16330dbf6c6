from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class CronQueueConfig(AppConfig):
    name = "django_cronqueue"
    label = "django_cronqueue"
    verbose_name = "Cron queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .backend import autodiscover_task_modules
        from .ticks import Housekeeping
        from .verbs import Verbs
        from .worker import checks as pool_checks  # noqa: F401  (registers pool checks)

        # What the models' verbs (Job.retry(), CronSchedule.run_now(), ...) call, and
        # what this process's in-process ticks (jobs.tick()) remember between calls.
        self.verbs = Verbs()
        self.housekeeping = Housekeeping()
        # Import every installed app's jobs.py, as the admin does with admin.py. An
        # error inside one of them propagates: a broken jobs module stops start-up.
        autodiscover_modules("jobs")
        autodiscover_task_modules()  # tasks.py, when TASKS uses CronQueueBackend (Django 6+)
