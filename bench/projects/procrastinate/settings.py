"""procrastinate with its Django integration (procrastinate.contrib.django)."""

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "procrastinate.contrib.django", "projects.procrastinate.benchtasks"]
DATABASES = {"default": database()}
