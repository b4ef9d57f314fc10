"""A PostgreSQL server for the tests, from Debian's ``postgresql`` package: ``initdb`` and
``pg_ctl`` into a temporary directory, reached through a unix socket there, trust
authentication, one fresh database per test.

PostgreSQL refuses to run as root: as root, the server runs as the unprivileged ``nobody``
(through ``runuser``), in a directory it owns. Without the binaries, :func:`find_bin` says why,
and the PostgreSQL cases skip with that reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ulid import ULID

#: Where Debian puts each installed major version's binaries.
DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"
#: The unprivileged user the server runs as when the tests run as root.
UNPRIVILEGED = "nobody"
#: The role the tests connect as (the cluster's superuser).
USER = "lmsp"


def find_bin() -> Path | str:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest installed version), or why there
    is none."""
    found = sorted(
        (Path(path) for path in glob.glob(DEBIAN_BINARIES) if Path(path, "initdb").exists()),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).parent
    return (
        "PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on PATH): "
        "apt-get install postgresql (scripts/test does, as root)"
    )


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, listening on a unix socket only."""

    def __init__(self, bin_dir: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="lmsp-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_root = os.geteuid() == 0
        if self._as_root:  # the server's own user must reach and own its directory
            self.root.chmod(0o755)
            shutil.chown(self.root, UNPRIVILEGED)
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                  "--no-sync")  # fmt: skip

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self._as_root:
            command = ["runuser", "-u", UNPRIVILEGED, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.root)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-k {self.root} -p {self.port} -c listen_addresses=''"
            " -c fsync=off -c max_connections=400"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                  "start")  # fmt: skip

    def stop(self) -> None:
        """Stop the server at once (its clients' connections break)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of ``database`` through the socket."""
        return f"postgresql://{USER}@/{database}?host={self.root}&port={self.port}"

    def new_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t_{str(ULID()).lower()}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
