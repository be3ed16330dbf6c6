from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.conf import settings
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules

if TYPE_CHECKING:
    from .operations.model_methods import Verbs
    from .worker.tick import Housekeeping


# Django's own Tasks backends and the backport's: none of them is a CronQueueBackend.
FRAMEWORK_BACKENDS = ("django.tasks.", "django_tasks.")


def tasks_may_use_cronqueue() -> bool:
    """Whether TASKS names a backend that may be a CronQueueBackend: ours, or any backend
    but Django's (a subclass of ours lives in the site's code). Only then does start-up
    import ``backend`` and the Tasks framework behind it; it then checks each class."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return False
    return any(
        isinstance(params, dict)
        and isinstance(params.get("BACKEND"), str)
        and not params["BACKEND"].startswith(FRAMEWORK_BACKENDS)
        for params in configured.values()
    )


class CronQueueConfig(AppConfig):
    name = "django_cronqueue"
    label = "django_cronqueue"
    verbose_name = "Cron queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .conf import discover_modules
        from .db import (
            routing_checks,  # noqa: F401  (the checks of the queue's database)
            sqlite_defaults,
        )
        from .definitions import checks as definition_checks  # noqa: F401  (sensitive=)
        from .worker import checks as pool_checks  # noqa: F401  (registers pool checks)

        # WAL, a busy timeout and IMMEDIATE transactions on the queue's SQLite database,
        # unless the site's OPTIONS say otherwise.
        connection_created.connect(sqlite_defaults.apply, dispatch_uid="cronqueue-sqlite")
        # Import every installed app's jobs.py (and the other modules DISCOVER lists), as
        # the admin does with admin.py. An error inside one of them propagates: a broken
        # jobs module stops start-up.
        autodiscover_modules(*discover_modules())
        if tasks_may_use_cronqueue():
            from .backend import autodiscover_task_modules

            autodiscover_task_modules()  # tasks.py, when TASKS uses CronQueueBackend (Django 6+)

    # Built when first used, not in ready(): a web process that never retries a job or
    # runs a tick does not load the scheduler and the worker's code behind them.
    @cached_property
    def verbs(self) -> Verbs:
        """What the models' verbs (``Job.retry()``, ``CronSchedule.run_now()``, ...) call."""
        from .operations.model_methods import Verbs

        return Verbs()

    @cached_property
    def housekeeping(self) -> Housekeeping:
        """What this process's in-process ticks (``jobs.tick()``) remember between calls."""
        from .worker.tick import Housekeeping

        return Housekeeping()
