"""Settings of the ``runjobs`` processes that the reliability suite starts.

The test settings, plus this folder as an installed app (so that its ``jobs.py`` is
discovered like any app's) and a log format that names each record's level, so that
tests can tell DEBUG lines from the rest. ``CRONQUEUE_TEST_LOG_LEVEL`` sets the level.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.reliability"]

LOG_LEVEL = os.environ.get("CRONQUEUE_TEST_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        # "@@" starts a record; a traceback's lines follow it without the marker.
        "levelled": {"format": "@@ %(levelname)s %(name)s [%(threadName)s] %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "levelled"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}

# CONN_HEALTH_CHECKS (Django 4.1): a connection is checked before it is reused.
if os.environ.get("CRONQUEUE_TEST_CONN_HEALTH_CHECKS"):
    from tests.settings import DATABASES

    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
