"""The reliability workers' settings plus the ``tests.pool_jobs`` app."""

from tests.reliability.worker_settings import *  # noqa: F403
from tests.reliability.worker_settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.pool_jobs"]
