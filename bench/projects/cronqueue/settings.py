"""django-cronqueue, as a site installs it (CRONQUEUE at its defaults, unless a drain
setting passes some in BENCH_CRONQUEUE, as JSON). With BENCH_COUNT_STATEMENTS set, the
process counts the statements it sends (benchlib/statements.py)."""

import json
import os

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "django_cronqueue", "projects.cronqueue.benchjobs"]
DATABASES = {"default": database()}
CRONQUEUE = json.loads(os.environ.get("BENCH_CRONQUEUE", "{}"))

if os.environ.get("BENCH_COUNT_STATEMENTS"):  # the flow-control drain's worker processes
    from benchlib import statements

    statements.install(os.environ["BENCH_COUNT_STATEMENTS"])
