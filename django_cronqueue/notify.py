"""PostgreSQL LISTEN/NOTIFY wake-ups for idle workers: the channel, the wake-up sent
when jobs come due, and the listener a worker runs. A no-op on other vendors."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import select
import threading
from collections.abc import Iterable

from django.db import connections

from .conf import get_settings

logger = logging.getLogger("django_cronqueue")

RECONNECT_DELAY = 2.0
STOP_CHECK_INTERVAL = 1.0
NOTIFY_CHANNEL = "django_cronqueue"


def due_soon(run_at: dt.datetime, now: dt.datetime) -> bool:
    """Due before an idle worker's next poll: worth a wake-up."""
    return run_at <= now + dt.timedelta(seconds=get_settings().POLL_INTERVAL)


def wake_workers(using: str, run_ats: Iterable[dt.datetime], now: dt.datetime) -> None:
    """Wake idle PostgreSQL workers when one of ``run_ats`` is due soon (delivered when
    the current transaction commits)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    if not any(due_soon(run_at, now) for run_at in run_ats):
        return
    with connection.cursor() as cursor:
        cursor.execute(f"NOTIFY {NOTIFY_CHANNEL}")


def listen(alias: str, stopping: threading.Event, wake: threading.Event) -> None:
    """Set ``wake`` whenever a job is enqueued, until ``stopping`` is set.

    Uses its own connection (psycopg 3), so it never shares a transaction with a slot.
    Without psycopg 3 it returns at once and workers rely on polling.
    """
    while not stopping.is_set():
        wrapper = connections.create_connection(alias)
        try:
            wrapper.ensure_connection()
            raw = wrapper.connection
            if not hasattr(raw, "notifies"):
                logger.info("LISTEN/NOTIFY needs psycopg 3; idle workers will poll instead")
                return
            raw.execute(f"LISTEN {NOTIFY_CHANNEL}")
            while not stopping.is_set():
                # Sleep in select() rather than in notifies(timeout=...), whose wait wakes
                # every 0.1 s: an idle worker's listener then costs one wake-up a second.
                readable, _, _ = select.select([raw.fileno()], [], [], STOP_CHECK_INTERVAL)
                if readable:
                    for _ in raw.notifies(timeout=0.0):
                        wake.set()
        except Exception as exc:
            logger.warning("LISTEN connection lost (%s); reconnecting", exc)
            stopping.wait(RECONNECT_DELAY)
        finally:
            with contextlib.suppress(Exception):
                wrapper.close()
