"""The process pool's forker: a process forked when the worker starts, before it opens
a database connection or starts a thread, that forks the pool's children on request.

A child forked from the worker itself would inherit its threads' open database
connections (the heartbeat's, the slots'): when the child's copies of them are freed,
the driver may say goodbye to the server on the parent's socket (MySQL's COM_QUIT) and
break the parent's session. Children forked from the forker start clean, with Django
set up and every job module imported (their memory shared copy-on-write).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

PR_SET_PDEATHSIG = 1
PARENT_POLL = 0.5  # seconds between a child's checks that its parent is alive


def die_with_parent(parent_pid: int) -> None:
    """End this process when its parent dies: at once on Linux (``PR_SET_PDEATHSIG``:
    SIGKILL, even in C code), and on every platform within ``PARENT_POLL`` (a thread that
    watches ``os.getppid()``)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # it died before the prctl
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="cronqueue-parent-watch", daemon=True).start()


class Forker:
    """Forks children that run ``child_main(connection, parent_pid)``. ``fork()`` and
    ``status()`` may be called from any thread."""

    def __init__(self, child_main: Callable[[Connection, int], None]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        worker_pid = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                ours.close()
                _serve(theirs, worker_pid, child_main)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self.pid = pid
        self._socket = ours
        self._lock = threading.Lock()

    def fork(self) -> tuple[int, Connection]:
        """A new child: its pid and the parent's end of its connection."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                socket.send_fds(self._socket, [b"F\0\0\0\0"], [theirs.fileno()])
                reply = self._socket.recv(16)
        finally:
            theirs.close()
        if len(reply) != 4:
            ours.close()
            raise OSError("the process pool's forker is gone")
        return struct.unpack("!i", reply)[0], Connection(ours.detach())

    def status(self, pid: int) -> int:
        """Wait for child ``pid`` to end; its wait status (``os.waitstatus_to_exitcode``)."""
        with self._lock:
            self._socket.send(b"W" + struct.pack("!i", pid))
            reply = self._socket.recv(16)
        if len(reply) != 4:
            raise OSError("the process pool's forker is gone")
        return int(struct.unpack("!i", reply)[0])

    def close(self) -> None:
        """End the forker: it kills the children still alive, and exits."""
        self._socket.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _serve(
    requests: socket.socket, worker_pid: int, child_main: Callable[[Connection, int], None]
) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)  # the worker decides when children end
    for signum in (signal.SIGUSR1, signal.SIGALRM):
        signal.signal(signum, signal.SIG_IGN)  # until a child installs its handlers
    die_with_parent(worker_pid)
    forker_pid = os.getpid()
    children: set[int] = set()
    try:
        while True:
            message, fds, _flags, _address = socket.recv_fds(requests, 16, 1)
            if not message:
                return  # the worker closed its end
            if message[:1] == b"F" and fds:
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        requests.close()
                        for other in fds[1:]:
                            os.close(other)
                        child_main(Connection(fds[0]), forker_pid)
                    except BaseException:
                        code = 1
                    finally:
                        os._exit(code)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                requests.send(struct.pack("!i", pid))
            elif message[:1] == b"W":
                for fd in fds:
                    os.close(fd)
                (pid,) = struct.unpack("!i", message[1:5])
                status = -1
                if pid in children:
                    children.discard(pid)
                    _, status = os.waitpid(pid, 0)
                requests.send(struct.pack("!i", status))
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
