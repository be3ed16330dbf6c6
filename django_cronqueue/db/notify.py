"""PostgreSQL LISTEN/NOTIFY: wake-ups for idle workers (sent when jobs come due) and
cancel requests for running jobs (their ids), and the listener a worker runs. A no-op
on other vendors, whose workers poll and learn of cancels by their heartbeat."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import select
import socket
import threading
from collections.abc import Callable, Iterable, Sequence

from django.db import connections

from ..conf import get_settings

logger = logging.getLogger("django_cronqueue")

RECONNECT_DELAY = 2.0
STOP_CHECK_INTERVAL = 1.0
NOTIFY_CHANNEL = "django_cronqueue"
CANCEL_CHANNEL = "django_cronqueue_cancel"
MAX_NOTIFY_PAYLOAD = 7_000  # bytes; PostgreSQL's limit is 8,000


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


def announce_cancel(using: str, job_ids: Sequence[int]) -> None:
    """Tell PostgreSQL workers that a cancel of these running jobs was requested
    (delivered when the current transaction commits)."""
    connection = connections[using]
    if connection.vendor != "postgresql" or not job_ids:
        return
    chunks: list[str] = []
    chunk = ""
    for job_id in job_ids:
        text = str(job_id)
        if chunk and len(chunk) + len(text) + 1 > MAX_NOTIFY_PAYLOAD:
            chunks.append(chunk)
            chunk = ""
        chunk = f"{chunk},{text}" if chunk else text
    chunks.append(chunk)
    with connection.cursor() as cursor:
        for payload in chunks:
            cursor.execute("SELECT pg_notify(%s, %s)", [CANCEL_CHANNEL, payload])


class SelectableEvent(threading.Event):
    """A ``threading.Event`` that a ``select()`` can wait on too (``fileno()``), so
    that a thread sleeping on a socket wakes the moment the event is set, instead of at
    its next timeout. The socket pair is made on the first ``fileno()``; ``close()``
    releases it."""

    def __init__(self) -> None:
        super().__init__()
        self._pair_lock = threading.Lock()
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def set(self) -> None:
        super().set()
        with self._pair_lock:
            if self._pair is not None:
                with contextlib.suppress(OSError):  # full: it is readable already
                    self._pair[1].send(b"\0")

    def fileno(self) -> int:
        with self._pair_lock:
            if self._pair is None:
                reader, writer = socket.socketpair()
                reader.setblocking(False)
                writer.setblocking(False)
                self._pair = (reader, writer)
                if self.is_set():
                    writer.send(b"\0")
            return self._pair[0].fileno()

    def close(self) -> None:
        with self._pair_lock:
            pair, self._pair = self._pair, None
        for sock in pair or ():
            sock.close()


def _job_ids(payload: str) -> list[int]:
    return [int(part) for part in payload.split(",") if part.strip().isdigit()]


def listen(
    alias: str,
    stopping: threading.Event,
    wake: threading.Event,
    on_cancel: Callable[[list[int]], None] | None = None,
) -> None:
    """Set ``wake`` whenever a job is enqueued, and call ``on_cancel`` with the ids of
    running jobs whose cancel was requested, until ``stopping`` is set.

    Uses its own connection (psycopg 3), so it never shares a transaction with a slot.
    Without psycopg 3 it returns at once and workers rely on polling. A
    ``SelectableEvent`` as ``stopping`` ends it the moment it is set; a plain ``Event``
    within ``STOP_CHECK_INTERVAL``.
    """
    waits: list[object] = [stopping] if isinstance(stopping, SelectableEvent) else []
    while not stopping.is_set():
        wrapper = connections.create_connection(alias)
        try:
            wrapper.ensure_connection()
            raw = wrapper.connection
            if not hasattr(raw, "notifies"):
                logger.info("LISTEN/NOTIFY needs psycopg 3; idle workers will poll instead")
                return
            raw.execute(f"LISTEN {NOTIFY_CHANNEL}")
            if on_cancel is not None:
                raw.execute(f"LISTEN {CANCEL_CHANNEL}")
            while not stopping.is_set():
                # Sleep in select() rather than in notifies(timeout=...), whose wait wakes
                # every 0.1 s: an idle worker's listener then costs one wake-up a second.
                fileno = raw.fileno()
                readable, _, _ = select.select([fileno, *waits], [], [], STOP_CHECK_INTERVAL)
                if fileno in readable:
                    for notice in raw.notifies(timeout=0.0):
                        if notice.channel == CANCEL_CHANNEL and on_cancel is not None:
                            on_cancel(_job_ids(notice.payload))
                        else:
                            wake.set()
        except Exception as exc:
            logger.warning("LISTEN connection lost (%s); reconnecting", exc)
            stopping.wait(RECONNECT_DELAY)
        finally:
            with contextlib.suppress(Exception):
                wrapper.close()
