"""Settings for the test suite. CRONQUEUE_TEST_DB picks the database:
``sqlite`` (default), ``postgres`` or ``mariadb``; the servers' addresses can be
changed with the usual PG*/MYSQL_* style variables below."""

import faulthandler
import importlib.util
import json
import os
import signal
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_cronqueue",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DB = os.environ.get("CRONQUEUE_TEST_DB", "sqlite")
DB_NAME = os.environ.get("CRONQUEUE_TEST_DB_NAME", "cronqueue")

if DB == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DB_NAME,
            "USER": os.environ.get("PGUSER", "postgres"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
            "TEST": {"NAME": f"test_{DB_NAME}"},
        }
    }
elif DB == "mariadb":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": DB_NAME,
            "USER": os.environ.get("MYSQL_USER", "root"),
            "PASSWORD": os.environ.get("MYSQL_PASSWORD", ""),
            "HOST": os.environ.get("MYSQL_HOST", "127.0.0.1"),
            "PORT": os.environ.get("MYSQL_PORT", "3306"),
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"NAME": f"test_{DB_NAME}", "CHARSET": "utf8mb4"},
        }
    }
elif DB == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            # A file, not :memory:, so that end-to-end tests' runjobs processes share it.
            "NAME": str(BASE_DIR / f"{DB_NAME}.sqlite3"),
            # WAL lets readers and one writer work at once; IMMEDIATE transactions take
            # the write lock up front instead of failing on upgrade ("database is locked").
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL;",
                "transaction_mode": "IMMEDIATE",
            },
            "TEST": {"NAME": str(BASE_DIR / f"test_{DB_NAME}.sqlite3")},
        }
    }
else:
    raise RuntimeError(f"CRONQUEUE_TEST_DB must be sqlite, postgres or mariadb, not {DB!r}")

CRONQUEUE = {"POLL_INTERVAL": 0.2}
# End-to-end tests start runjobs processes on the test database with extra settings.
CRONQUEUE.update(json.loads(os.environ.get("CRONQUEUE_TEST_SETTINGS", "{}")))
if os.environ.get("CRONQUEUE_TEST_DB_EXACT_NAME"):
    DATABASES["default"]["NAME"] = os.environ["CRONQUEUE_TEST_DB_EXACT_NAME"]
    # A test's runjobs process: SIGUSR2 writes every thread's stack to its log, so a test
    # can show where a worker that does not stop is stuck (Runjobs.dump_stacks()).
    faulthandler.register(signal.SIGUSR2, all_threads=True)


def _skew_clock(seconds: float) -> None:
    """This process's clock (``django.utils.timezone.now``) runs ``seconds`` ahead of the
    real one and the database's: a worker on a host whose clock is wrong. Patched here,
    before any app module binds it."""
    import datetime as dt

    from django.utils import timezone

    real_now = timezone.now
    timezone.now = lambda: real_now() + dt.timedelta(seconds=seconds)


# End-to-end tests of clock skew start a runjobs process with a wrong clock.
if os.environ.get("CRONQUEUE_TEST_CLOCK_SKEW"):
    _skew_clock(float(os.environ["CRONQUEUE_TEST_CLOCK_SKEW"]))

# Django's Tasks framework: built in from Django 6.0; on 5.2 the django-tasks backport
# (the [tasks] extra), an app of its own there.
HAS_TASKS = django.VERSION >= (6, 0) or importlib.util.find_spec("django_tasks") is not None
if django.VERSION < (6, 0) and HAS_TASKS:
    INSTALLED_APPS.append("django_tasks")

if HAS_TASKS:
    # @task functions of tests/testapp/tasks.py enqueue as jobs.
    TASKS = {
        "default": {
            "BACKEND": "django_cronqueue.backend.CronQueueBackend",
            "QUEUES": ["default", "tasks"],
        },
        "no_retries": {
            "BACKEND": "django_cronqueue.backend.CronQueueBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"RETRIES": 0, "TIMEOUT": 30},
        },
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_cronqueue": {"handlers": ["console"], "level": "INFO"}},
}
