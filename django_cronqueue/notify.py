"""PostgreSQL LISTEN/NOTIFY wake-ups for idle workers."""

from __future__ import annotations

import contextlib
import logging
import select
import threading

from django.db import connections

from .enqueue import NOTIFY_CHANNEL

logger = logging.getLogger("django_cronqueue")

RECONNECT_DELAY = 2.0
STOP_CHECK_INTERVAL = 1.0


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
