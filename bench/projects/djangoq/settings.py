"""django-q2 with its ORM broker (the queue lives in the site's database)."""

import os

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "django_q", "projects.djangoq.benchtasks"]
DATABASES = {"default": database()}
Q_CLUSTER = {"name": "bench", "orm": "default"}
if os.environ.get("BENCH_Q_WORKERS"):  # default: one worker process per CPU
    Q_CLUSTER["workers"] = int(os.environ["BENCH_Q_WORKERS"])
