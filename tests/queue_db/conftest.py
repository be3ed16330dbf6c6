"""The queue in a PostgreSQL database of its own: these tests run only under
``tests.queue_db.settings`` (scripts/test runs them once, on PostgreSQL); the rest of the
suite, on one database, leaves them out."""

import pytest
from django.conf import settings
from django.db import connections

from tests.processes import Runjobs

if "jobs" not in settings.DATABASES:
    collect_ignore_glob = ["test_*.py"]

SETTINGS_MODULE = "tests.queue_db.settings"
BOTH = ["default", "jobs"]


@pytest.fixture
def runjobs(tmp_path):
    """``runjobs`` processes with the site in ``default`` and the queue in ``jobs``."""
    runner = QueueDatabaseRunjobs(tmp_path, SETTINGS_MODULE)
    yield runner
    runner.stop_all()


class QueueDatabaseRunjobs(Runjobs):
    def start(self, *args, env=None, **kwargs):
        jobs_name = str(connections["jobs"].settings_dict["NAME"])
        env = {"CRONQUEUE_TEST_JOBS_DB_EXACT_NAME": jobs_name, **(env or {})}
        return super().start(*args, env=env, **kwargs)
