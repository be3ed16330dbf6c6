"""The README's settings on Django's defaults. Environment variables a test sets:
FIRSTHOUR_DB (the SQLite file; FIRSTHOUR_PG or FIRSTHOUR_MARIADB: a database instead),
FIRSTHOUR_APPS_FIRST (apps listed above ours, comma separated), FIRSTHOUR_CRONQUEUE (JSON
merged onto the README's CRONQUEUE), FIRSTHOUR_LOGGING (JSON: a LOGGING dict)."""

import json
import os

SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes"]
INSTALLED_APPS += [app for app in os.environ.get("FIRSTHOUR_APPS_FIRST", "").split(",") if app]
INSTALLED_APPS += ["django_cronqueue", "tests.firsthour.shop"]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["FIRSTHOUR_DB"]}
}
if os.environ.get("FIRSTHOUR_PG"):  # a PostgreSQL database instead
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["FIRSTHOUR_PG"],
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
    }
if os.environ.get("FIRSTHOUR_MARIADB"):  # a MariaDB database instead
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ["FIRSTHOUR_MARIADB"],
        "USER": os.environ.get("MYSQL_USER", "root"),
        "HOST": os.environ.get("MYSQL_HOST", "127.0.0.1"),
        "PORT": os.environ.get("MYSQL_PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
CRONQUEUE = {"CONCURRENCY": 4, **json.loads(os.environ.get("FIRSTHOUR_CRONQUEUE", "{}"))}
if os.environ.get("FIRSTHOUR_LOGGING"):
    LOGGING = json.loads(os.environ["FIRSTHOUR_LOGGING"])
