from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules


class CronQueueConfig(AppConfig):
    name = "django_cronqueue"
    label = "django_cronqueue"
    verbose_name = "Cron queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            routing_checks,  # noqa: F401  (registers the checks of the queue's database)
            sqlite_defaults,
        )
        from .backend import autodiscover_task_modules
        from .conf import discover_modules
        from .ticks import Housekeeping
        from .verbs import Verbs
        from .worker import checks as pool_checks  # noqa: F401  (registers pool checks)

        # What the models' verbs (Job.retry(), CronSchedule.run_now(), ...) call, and
        # what this process's in-process ticks (jobs.tick()) remember between calls.
        # WAL, a busy timeout and IMMEDIATE transactions on the queue's SQLite database,
        # unless the site's OPTIONS say otherwise.
        connection_created.connect(sqlite_defaults.apply, dispatch_uid="cronqueue-sqlite")
        self.verbs = Verbs()
        self.housekeeping = Housekeeping()
        # Import every installed app's jobs.py (and the other modules DISCOVER lists), as
        # the admin does with admin.py. An error inside one of them propagates: a broken
        # jobs module stops start-up.
        autodiscover_modules(*discover_modules())
        autodiscover_task_modules()  # tasks.py, when TASKS uses CronQueueBackend (Django 6+)
