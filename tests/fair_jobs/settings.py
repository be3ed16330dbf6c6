"""The test settings plus the ``tests.fair_jobs`` app (its workers define the fair jobs)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.fair_jobs"]
