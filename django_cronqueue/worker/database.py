"""What a worker does when the database fails: wait, back off and reconnect; and its
long-lived connections (``WORKER_CONN_MAX_AGE``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from ..conf import database_alias, get_settings

logger = logging.getLogger("django_cronqueue")

MAX_DB_BACKOFF = 30.0


class DatabaseRetry:
    """Mixed into ``Worker``: needs ``id`` and the ``stopping`` event."""

    id: str
    stopping: threading.Event

    def _wait_for_database(self) -> bool:
        failures = 0
        while not self.stopping.is_set():
            try:
                connections[database_alias()].ensure_connection()
                if failures:
                    logger.warning("Worker %s: database is reachable again", self.id)
                return True
            except (DatabaseError, InterfaceError) as exc:
                failures += 1
                self._database_backoff(exc, failures)
        return False

    def _with_database_retry(self, action: Callable[[], None], attempts: int = 3) -> bool:
        for failure in range(1, attempts + 1):
            try:
                action()
                return True
            except (DatabaseError, InterfaceError) as exc:
                self._database_backoff(exc, failure)
        return False

    def _database_backoff(self, exc: BaseException, failures: int) -> None:
        delay = min(MAX_DB_BACKOFF, 0.5 * 2 ** (failures - 1))
        # A lost or refused connection is an outage; any other error is the database
        # answering (a statement it refused), not being unavailable.
        unavailable = isinstance(exc, (OperationalError, InterfaceError))
        logger.error(
            "Worker %s: database %s (%s: %s); retrying in %.1fs",
            self.id,
            "unavailable" if unavailable else "error",
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            delay,
        )
        connections.close_all()
        self.stopping.wait(delay)

    def _use_persistent_connections(self) -> dict[str, dict[str, Any]]:
        """A worker is long-lived: keep this thread's connections open between jobs
        instead of reconnecting per job, unless CONN_MAX_AGE says otherwise. Each thread
        has its own connection wrappers, so the setting is changed on this thread's copy
        only; a broken connection is closed by close_old_connections() and reopened.
        Returns the settings it replaced, by alias."""
        max_age = get_settings().WORKER_CONN_MAX_AGE
        replaced: dict[str, dict[str, Any]] = {}
        if max_age is None:
            return replaced
        for alias in connections:
            wrapper = connections[alias]
            if wrapper.settings_dict.get("CONN_MAX_AGE", 0) == 0:  # Django's default
                replaced[alias] = wrapper.settings_dict
                wrapper.settings_dict = {**wrapper.settings_dict, "CONN_MAX_AGE": max_age}
        return replaced
