"""django-cronqueue, as a site installs it (CRONQUEUE at its defaults, unless a drain
setting passes some in BENCH_CRONQUEUE, as JSON)."""

import json
import os

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "django_cronqueue", "projects.cronqueue.benchjobs"]
DATABASES = {"default": database()}
CRONQUEUE = json.loads(os.environ.get("BENCH_CRONQUEUE", "{}"))
