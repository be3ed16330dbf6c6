"""django-cronqueue, as a site installs it (CRONQUEUE left at its defaults)."""

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "django_cronqueue", "projects.cronqueue.benchjobs"]
DATABASES = {"default": database()}
