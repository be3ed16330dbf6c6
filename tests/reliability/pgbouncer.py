"""A PgBouncer in transaction mode in front of the test's PostgreSQL server, on a free
port: Debian's ``pgbouncer`` with a configuration written here (the one the pooler how-to
in docs/howto/databases.md shows, less the names of a site's own files)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

CONFIG = """\
[databases]
* = host={host} port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/userlist.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
"""


def installed() -> bool:
    return os.access(PGBOUNCER, os.X_OK)


class PgBouncer:
    """``start()`` runs it in the foreground of a child process (stopped by ``stop()``);
    it logs to ``log``. As root it runs as the ``postgres`` user: PgBouncer refuses root."""

    def __init__(
        self,
        server_host: str,
        server_port: int,
        user: str,
        pool_size: int,
        extra: str = "",
    ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="cq-pgbouncer-"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        (self.folder / "pgbouncer.ini").write_text(
            CONFIG.format(
                host=server_host,
                server_port=server_port,
                port=self.port,
                folder=self.folder,
                pool_size=pool_size,
            )
            + extra
        )
        (self.folder / "userlist.txt").write_text(f'"{user}" ""\n')
        self.log = self.folder / "pgbouncer.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [PGBOUNCER]
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.folder, *self.folder.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            command += ["-u", "postgres"]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [*command, str(self.folder / "pgbouncer.ini")], stdout=log, stderr=log
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
