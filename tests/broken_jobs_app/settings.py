"""Settings that install the broken app; never the test suite's own settings."""

SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
INSTALLED_APPS = ["django_cronqueue", "tests.broken_jobs_app"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
