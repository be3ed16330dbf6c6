"""``CronQueueRouter``: the queue's tables live in ``CRONQUEUE["DATABASE"]``, and only there.

    DATABASE_ROUTERS = ["django_cronqueue.routers.CronQueueRouter"]

The package's own code names that database on every query; the router is for what Django
does on its own: ``migrate`` (the tables are created in that database only), the admin's
transactions, forms and deletions, and related objects read through a row. With the queue
in a database of its own, that database holds the queue's tables and nothing else.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model

from .conf import database_alias

APP_LABEL = "django_cronqueue"


def _is_queue_model(model: type[Model]) -> bool:
    return model._meta.app_label == APP_LABEL


class CronQueueRouter:
    """Sends django_cronqueue's models to ``CRONQUEUE["DATABASE"]``; other apps' models are
    left to the next router (or to ``default``)."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return database_alias() if _is_queue_model(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return database_alias() if _is_queue_model(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        if _is_queue_model(type(obj1)) and _is_queue_model(type(obj2)):
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        queue_database = database_alias()
        if app_label == APP_LABEL:
            return db == queue_database
        if db == queue_database and db != DEFAULT_DB_ALIAS:
            return False  # no other app's tables in the queue's own database
        return None
