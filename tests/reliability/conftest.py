"""Fixtures of the reliability suite: real ``runjobs`` processes, a TCP proxy that
can play a database outage, and helpers to read what the handlers recorded."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import tests.reliability.jobs  # noqa: F401  (registers the suite's jobs in this process)
from tests.processes import Runjobs, wait_until  # noqa: F401  (wait_until: for the tests)
from tests.testapp.models import SideEffect

WORKER_SETTINGS = "tests.reliability.worker_settings"


def vendor() -> str:
    return connection.vendor


needs_server = pytest.mark.skipif(
    os.environ.get("CRONQUEUE_TEST_DB", "sqlite") == "sqlite",
    reason="needs a database server (PostgreSQL or MariaDB)",
)
postgres_only = pytest.mark.skipif(
    os.environ.get("CRONQUEUE_TEST_DB", "sqlite") != "postgres", reason="needs PostgreSQL"
)


@pytest.fixture
def runjobs(tmp_path):
    runner = Runjobs(tmp_path, WORKER_SETTINGS)
    yield runner
    runner.stop_all()


def log_records(text: str) -> list[tuple[str, str]]:
    """(level, text) of each record of a worker_settings log; continuation lines (a
    traceback) belong to the record above them, other lines (stdout) to none."""
    records: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = re.match(r"@@ (\w+) (.*)", line)
        if match:
            records.append((match.group(1), match.group(2)))
        elif records and records[-1][0] != "STDOUT" and line.startswith((" ", "Traceback")):
            records[-1] = (records[-1][0], records[-1][1] + "\n" + line)
        else:
            records.append(("STDOUT", line))
    return records


# --- what the handlers recorded -----------------------------------------------------


def marks(kind: str) -> list[tuple[str, int, Any]]:
    """(key, pid, created_at) of every ``<kind>:<key>`` mark, oldest first."""
    prefix = f"{kind}:"
    return [
        (key[len(prefix) :], pid, created_at)
        for key, pid, created_at in SideEffect.objects.filter(key__startswith=prefix)
        .order_by("id")
        .values_list("key", "pid", "created_at")
    ]


def max_overlap(intervals: Iterable[tuple[Any, Any]]) -> int:
    """The largest number of [start, end] intervals that overlap at one instant."""
    events = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    events.sort(key=lambda event: (event[0], event[1]))  # an end before a start at a tie
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def rss_kb(pid: int) -> int:
    """Resident set size of a process, in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --- a TCP proxy in front of the database -------------------------------------------


class Proxy:
    """Forwards a local port to the database server. ``stop()`` closes every connection
    and refuses new ones, as a database that went down does; ``start()`` brings it back.
    Only the processes pointed at the proxy see the outage."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        with socket.socket() as probe:
            probe.bind((host, 0))
            self.port = probe.getsockname()[1]
        self._server: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0

    def start(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._server is not server:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
                self.accepted += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def server_port() -> int:
    return int(connection.settings_dict["PORT"])


def port_env(port: int) -> dict[str, str]:
    """Environment that points a worker's tests.settings at ``port``."""
    return {"PGPORT": str(port), "MYSQL_PORT": str(port)}


@pytest.fixture
def proxy():
    instance = Proxy(server_port())
    yield instance
    instance.stop()


def free_port() -> int:
    """A port nothing listens on (closed again at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
