"""System checks of where the queue lives (ids E040-E042, W040, in docs/settings.md).

With ``CRONQUEUE["DATABASE"]`` naming another alias than ``default``, Django itself must
send the app's models there too: ``migrate`` creates tables where the routers allow it,
and the admin opens its transactions and reads related rows where they say. These checks
ask the configured routers (``django_cronqueue.routers.CronQueueRouter`` or the site's
own) what they would do, and say what would go wrong. ``READ_DATABASE`` must be an alias.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, router

from ..conf import user_settings
from ..routers import CronQueueRouter

CHECK_ID = "django_cronqueue.{}"
APP_LABEL = "django_cronqueue"
ROUTER_PATH = "django_cronqueue.routers.CronQueueRouter"


def _router_hint() -> str:
    listed = any(
        entry == ROUTER_PATH or isinstance(entry, CronQueueRouter)
        for entry in settings.DATABASE_ROUTERS
    )
    if not listed:
        return f'Add "{ROUTER_PATH}" to DATABASE_ROUTERS in your settings.'
    return (
        f'A router listed above "{ROUTER_PATH}" in DATABASE_ROUTERS decides first: list '
        "CronQueueRouter first, or make that router return None for django_cronqueue."
    )


def _queue_database() -> str | None:
    """``CRONQUEUE["DATABASE"]`` when it names an alias other than ``default`` (E010
    reports one that is not an alias)."""
    alias = user_settings().get("DATABASE", DEFAULT_DB_ALIAS)
    if not isinstance(alias, str) or alias == DEFAULT_DB_ALIAS or alias not in settings.DATABASES:
        return None
    return alias


@register(Tags.compatibility)
def check_routing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    alias = _queue_database()
    if alias is None:
        return []
    messages: list[CheckMessage] = []
    messages.extend(_check_model_routing(alias))
    messages.extend(_check_migration_routing(alias))
    return messages


def _check_model_routing(alias: str) -> list[CheckMessage]:
    job = apps.get_model(APP_LABEL, "Job")
    reads, writes = router.db_for_read(job), router.db_for_write(job)
    if reads == alias and writes == alias:
        return []
    return [
        Error(
            f"CRONQUEUE['DATABASE'] is {alias!r}, but DATABASE_ROUTERS send django_cronqueue's "
            f"models to {_destinations(reads, writes)}: the admin would open its transactions "
            "and read related rows in the wrong database.",
            hint=_router_hint(),
            id=CHECK_ID.format("E040"),
        )
    ]


def _destinations(reads: str | None, writes: str | None) -> str:
    return repr(reads) if reads == writes else f"{reads!r} (reads) and {writes!r} (writes)"


def _check_migration_routing(alias: str) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if not router.allow_migrate(alias, APP_LABEL):
        messages.append(
            Error(
                f"CRONQUEUE['DATABASE'] is {alias!r}, but DATABASE_ROUTERS do not allow "
                f"django_cronqueue's migrations there: migrate --database {alias} would not "
                "create the queue's tables.",
                hint=_router_hint(),
                id=CHECK_ID.format("E041"),
            )
        )
    elsewhere = [
        other
        for other in settings.DATABASES
        if other != alias and router.allow_migrate(other, APP_LABEL)
    ]
    if elsewhere:
        messages.append(
            Warning(
                f"CRONQUEUE['DATABASE'] is {alias!r}, but DATABASE_ROUTERS allow "
                f"django_cronqueue's migrations in {', '.join(map(repr, elsewhere))} too: "
                "migrate would create empty copies of the queue's tables there.",
                hint=_router_hint(),
                id=CHECK_ID.format("W040"),
            )
        )
    return messages


@register(Tags.compatibility)
def check_read_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = user_settings()
    value = raw.get("READ_DATABASE")
    if value is None or (isinstance(value, str) and value in settings.DATABASES):
        return []
    return [
        Error(
            f"CRONQUEUE['READ_DATABASE'] is {value!r}, which is not an alias in DATABASES.",
            hint=f"Use one of: {', '.join(settings.DATABASES)}; or None to read "
            "CRONQUEUE['DATABASE'].",
            id=CHECK_ID.format("E042"),
        )
    ]
