"""Django's Tasks framework (Django 6) with the database backend of django-tasks-db."""

from projects.common import *  # noqa: F403
from projects.common import BASE_APPS, database

INSTALLED_APPS = [*BASE_APPS, "django_tasks_db", "projects.tasksdb.benchtasks"]
DATABASES = {"default": database()}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
