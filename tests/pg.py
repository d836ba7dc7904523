"""A private PostgreSQL server for the tests: Debian's server binaries, a cluster made with ``initdb`` in a
temporary folder, listening only on a unix socket in that folder (no TCP), stopped and removed at the end (or, should the test process be killed, by a watcher process within a second of its death).

PostgreSQL refuses to run as root; when the tests run as root (as CI does) the server's programs run as
the ``postgres`` system user that Debian's package creates (``runuser -u postgres --``) and the folder
is given to that user. The cluster's superuser is the role ``evalpack`` and local connections are trusted:
only the folder's owner (and root) can reach the socket.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN_DIRS = tuple(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True))
SUPERUSER = "evalpack"
PORT = 5432  # only names the socket file (.s.PGSQL.5432) in the private folder; no TCP is opened


def pg_bin(program: str) -> Path:
    """The path of a PostgreSQL server program (newest installed version), or a failure saying what to install."""
    for folder in PG_BIN_DIRS:
        if (folder / program).is_file():
            return folder / program
    raise RuntimeError(f"{program} not found under /usr/lib/postgresql/*/bin: install Debian's `postgresql` "
                       "package (apt-get install postgresql; .ci/run does it)")


def _as_server_user(command: list[str]) -> list[str]:
    """``command`` as the user the server runs as: `postgres` when we are root, else ourselves."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a private PostgreSQL cluster; yield its libpq DSN (superuser ``evalpack``, database ``postgres``)."""
    folder = Path(tempfile.mkdtemp(prefix="evalpack-pg-"))
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(folder, user.pw_uid, user.pw_gid)
        data, log = folder / "data", folder / "server.log"
        subprocess.run(_as_server_user([str(pg_bin("initdb")), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                                        "-E", "UTF8", "--no-locale", "--no-sync"]),
                       check=True, capture_output=True, text=True, timeout=300)
        options = (f"-c listen_addresses='' -c unix_socket_directories='{folder}' -p {PORT} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB -c max_connections=40")
        started = subprocess.run(_as_server_user([str(pg_bin("pg_ctl")), "-D", str(data), "-l", str(log), "-w",
                                                  "-t", "120", "-o", options, "start"]),
                                 capture_output=True, text=True, timeout=300)
        if started.returncode != 0:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{text}")
        stop = _as_server_user([str(pg_bin("pg_ctl")), "-D", str(data), "-m", "fast", "-w", "stop"])
        # should this process die without cleaning up (kill -9), a watcher stops the server and removes the folder
        watcher = subprocess.Popen(["sh", "-c", f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
                                    f"{shlex.join(stop)} >/dev/null 2>&1; rm -rf {shlex.quote(str(folder))}"],
                                   start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            yield f"host={folder} port={PORT} user={SUPERUSER} dbname=postgres"
        finally:
            subprocess.run(stop, capture_output=True, text=True, timeout=300)
            watcher.kill()
            watcher.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a private PostgreSQL server for the session (:func:`postgres_server`)."""
    with postgres_server() as dsn:
        yield dsn
