"""What a worker checks, writes and says when it starts: its tables exist, its row, and the
banner."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from collections.abc import Sequence

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections

from .. import __version__
from ..conf import database_alias
from ..definitions.registry import registry
from ..exceptions import NotMigrated
from ..models import Worker

logger = logging.getLogger("django_cronqueue")


def require_tables(alias: str) -> None:
    """Raise ``NotMigrated`` when the database lacks the package's tables: a worker would
    otherwise retry "no such table" forever."""
    connection = connections[alias]
    existing = set(connection.introspection.table_names())
    models = apps.get_app_config("django_cronqueue").get_models()
    missing = sorted(m._meta.db_table for m in models if m._meta.db_table not in existing)
    if missing:
        option = "" if alias == DEFAULT_DB_ALIAS else f" --database {alias}"
        raise NotMigrated(
            f"The database {describe_database(alias)} has no django-cronqueue tables "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
            f"run `python manage.py migrate{option}` first."
        )


def register_worker(
    worker_id: str,
    queues: Sequence[str] | None,
    concurrency: int,
    now: dt.datetime,
    clock_offset: float,
) -> None:
    """Write the worker's row: one INSERT (``update_or_create`` was six statements before
    the first claim). The row exists only when an earlier attempt wrote it, then failed."""
    fields = {
        "hostname": socket.gethostname()[:255],
        "pid": os.getpid(),
        "queues": list(queues or []),
        "concurrency": concurrency,
        "started_at": now,
        "last_seen": now,
        "clock_offset": clock_offset,
        "job_names": registry.names(),
    }
    rows = Worker.objects.using(database_alias())
    try:
        rows.create(id=worker_id, **fields)
    except IntegrityError:
        rows.filter(id=worker_id).update(**fields)


def describe_database(alias: str) -> str:
    """``sqlite '/srv/db.sqlite3'``, ``postgresql 'shop' on db.internal:5432``."""
    connection = connections[alias]
    settings = connection.settings_dict
    text = f"{connection.vendor} {str(settings.get('NAME'))!r}"
    if settings.get("HOST"):
        text += f" on {settings['HOST']}" + (f":{settings['PORT']}" if settings.get("PORT") else "")
    return f"{text} (alias {alias!r})"


def banner(
    worker_id: str, alias: str, queues: Sequence[str] | None, concurrency: int, mode: str
) -> str:
    """The start banner: the version, the database, what it claims and the code it runs."""
    definitions = sorted(registry, key=lambda definition: definition.name)
    schedules = [d for d in definitions if d.cron is not None]
    plain = [d for d in definitions if d.cron is None]
    lines = [
        f"django-cronqueue {__version__} worker {worker_id} starting",
        f"  database:    {describe_database(alias)}",
        f"  queues:      {', '.join(queues) if queues else 'all'}",
        f"  concurrency: {concurrency}, mode: {mode}",
        f"  jobs ({len(plain)}):" + ("" if plain else " none"),
        *(f"    {d.name} (queue {d.effective_queue})" for d in plain),
        f"  schedules ({len(schedules)}):" + ("" if schedules else " none"),
        *(f"    {d.name}: {d.cron.expression} {d.cron.tz}" for d in schedules if d.cron),
    ]
    return "\n".join(lines)


def announce(
    worker_id: str, alias: str, queues: Sequence[str] | None, concurrency: int, mode: str
) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", banner(worker_id, alias, queues, concurrency, mode))
