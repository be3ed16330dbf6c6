"""The test settings with the queue in a PostgreSQL database of its own.

``default`` holds the site's data (auth, sessions, the test app's rows), ``jobs`` holds
the queue (``CRONQUEUE["DATABASE"] = "jobs"``, routed by ``CronQueueRouter``), and
``jobs_replica`` is a read-only alias for ``READ_DATABASE``: in tests a mirror of ``jobs``
(Django's ``TEST: {"MIRROR": ...}``), a connection of its own to the same database.

    CRONQUEUE_TEST_DB=postgres python -m pytest --ds tests.queue_db.settings tests/queue_db

A runjobs process started by a test gets the test databases' names in
CRONQUEUE_TEST_DB_EXACT_NAME and CRONQUEUE_TEST_JOBS_DB_EXACT_NAME.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import CRONQUEUE, DB, DB_NAME

if DB != "postgres":
    raise RuntimeError("tests.queue_db.settings needs CRONQUEUE_TEST_DB=postgres")


def _postgres(name: str, test: dict) -> dict:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": os.environ.get("PGUSER", "postgres"),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "TEST": test,
    }


JOBS_DB_NAME = os.environ.get("CRONQUEUE_TEST_JOBS_DB_EXACT_NAME", f"{DB_NAME}_jobs")
DATABASES = {
    "default": _postgres(
        os.environ.get("CRONQUEUE_TEST_DB_EXACT_NAME", DB_NAME), {"NAME": f"test_{DB_NAME}"}
    ),
    "jobs": _postgres(JOBS_DB_NAME, {"NAME": f"test_{DB_NAME}_jobs"}),
    "jobs_replica": _postgres(JOBS_DB_NAME, {"MIRROR": "jobs"}),
}
DATABASE_ROUTERS = ["django_cronqueue.routers.CronQueueRouter"]
CRONQUEUE = {"DATABASE": "jobs", **CRONQUEUE}
