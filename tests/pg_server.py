"""A real PostgreSQL server for the team-ledger tests, started by the tests themselves.

:func:`start` runs ``initdb`` into a fresh temporary directory and starts ``postgres`` on a free
TCP port of 127.0.0.1 (its unix socket in the same directory, trust authentication, fsync off:
a throwaway server), and :meth:`PgServer.new_database` gives each test a database of its own.
The binaries are Debian's (``apt-get install postgresql``: /usr/lib/postgresql/<major>/bin,
.ci/run installs them) or any ``initdb`` on PATH. initdb refuses to run as root: as root the
server runs as the unprivileged user ``nobody`` through ``runuser``. Every reason it cannot
start (no binaries, no psycopg, root without runuser, initdb or pg_ctl failing) is a
:class:`Unavailable` with the reason, which the fixture turns into a skip.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SUPERUSER = "quantkit"
#: the user the server runs as when the tests run as root
UNPRIVILEGED = "nobody"


class Unavailable(Exception):
    """No PostgreSQL server can be started here (the message says why)."""


def find_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb, pg_ctl and postgres, else the dir of
    an ``initdb`` on PATH."""
    def major(d: str) -> int:
        try:
            return int(Path(d).parent.name.split(".")[0])
        except ValueError:
            return -1

    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True):
        if all((Path(d) / b).is_file() for b in ("initdb", "pg_ctl", "postgres")):
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    bin_dir: Path
    root: Path
    port: int
    as_user: list[str]  # the command prefix that runs the server's binaries
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        who = SUPERUSER + (f":{password}" if password else "")
        return f"postgresql://{who}@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "ledger") -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"{prefix}_{next(self._names)}_{os.getpid()}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin_dir / "pg_ctl"), "-D",
                        str(self.root / "data"), "-m", "immediate", "-w", "stop"],
                       capture_output=True, text=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def _run(cmd: list[str], what: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{what} failed: {exc}") from exc
    if r.returncode != 0:
        raise Unavailable(f"{what} failed (exit {r.returncode}): "
                          f"{(r.stderr or r.stdout).strip()[-400:]}")


def start() -> PgServer:
    """A running throwaway server (module docstring), or :class:`Unavailable`."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"the PostgreSQL driver does not import ({exc}): pip install "
                          "'psycopg[binary]>=3.2,<4' (in the dev extra)") from exc
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise Unavailable("no PostgreSQL server binaries (initdb, pg_ctl, postgres) under "
                          "/usr/lib/postgresql/*/bin or on PATH: apt-get install postgresql")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="quantkit-pg-"))
    try:
        if os.geteuid() == 0:
            # util-linux puts it in sbin, which a minimal PATH (env -i, CI) leaves out
            runuser = shutil.which("runuser", path=os.pathsep.join(
                [os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
            if runuser is None:
                raise Unavailable("running as root, initdb refuses root, and runuser (to "
                                  f"run the server as {UNPRIVILEGED}) is missing")
            as_user = [runuser, "-u", UNPRIVILEGED, "--"]
            shutil.chown(root, UNPRIVILEGED)
        _run([*as_user, str(bin_dir / "initdb"), "-D", str(root / "data"), "-U", SUPERUSER,
              "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
             "initdb" + (f" as {UNPRIVILEGED}" if as_user else ""))
        port = _free_port()
        opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
        _run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-l",
              str(root / "server.log"), "-w", "-t", "60", "-o", opts, "start"], "pg_ctl start")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return PgServer(bin_dir=bin_dir, root=root, port=port, as_user=as_user)
