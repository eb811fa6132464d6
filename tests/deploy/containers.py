"""Building and running hooksvc's image with podman, for tests/deploy/test_image_run.py.

There is no Docker engine and no registry on these machines (shared/notes/containers.md):
the image is built by scripts/build-image on localhost/python:3.11-slim, a stand-in base that
scripts/standin-python-image makes once with debootstrap; podman keeps both it and the build's
layers, so only the first build of a machine is slow. Every container runs as Kubernetes runs
hooksvc: read-only root, a tmpfs /tmp, no capabilities, no privilege gain, the image's own
user (uid 10001); `--network host` lets it reach the machine's PostgreSQL and Redis.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from tests.support import servers

IMAGE = "localhost/hooksvc:test"
BASE = "localhost/python:3.11-slim"
SCRIPTS = servers.ROOT / "scripts"
#: What k8s/base sets for every hooksvc container, as podman flags.
RESTRICTED = (
    "--read-only",
    "--tmpfs",
    "/tmp",  # noqa: S108 (the container's own, in memory, as k8s/base's emptyDir)
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--network",
    "host",
)


def env() -> dict[str, str]:
    """The environment of podman commands: this repository's containers.conf (runc)."""
    values = dict(os.environ)
    if shutil.which("runc"):
        values.setdefault("CONTAINERS_CONF", str(SCRIPTS / "containers.conf"))
    return values


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", *args],
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def unavailable() -> str:
    """Why podman cannot build and run the image here, or "" when it can."""
    if shutil.which("podman") is None:
        return (
            "podman is not installed: `make test` installs it when run as root on Debian"
            " (apt-get install podman buildah runc debootstrap uidmap slirp4netns"
            " fuse-overlayfs)"
        )
    info = podman("info", timeout=60, check=False)
    if info.returncode != 0:
        return f"podman does not run here: {info.stderr.strip()[-500:]}"
    return ""


def make_base() -> str:
    """Make the stand-in base image if it is missing; why it cannot be, or ""."""
    if podman("image", "exists", BASE, check=False).returncode == 0:
        return ""
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        return f"{BASE} is missing and only root with debootstrap can make it"
    done = subprocess.run(
        [str(SCRIPTS / "standin-python-image"), BASE],
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        return f"could not make {BASE}: {done.stderr.strip()[-1000:]}"
    return ""


def build() -> float:
    """Build IMAGE with scripts/build-image (podman, the stand-in base); seconds it took."""
    started = time.monotonic()
    done = subprocess.run(
        [str(SCRIPTS / "build-image"), IMAGE],
        env={**env(), "CONTAINER_ENGINE": "podman", "PYTHON_IMAGE": BASE},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, f"the image does not build:\n{done.stdout[-4000:]}{done.stderr}"
    return time.monotonic() - started


@dataclasses.dataclass
class Container:
    name: str

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def state(self) -> tuple[str, int]:
        out = podman(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name
        ).stdout.split()
        return out[0], int(out[1])

    def running(self) -> bool:
        return self.state()[0] == "running"

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.running():
                raise AssertionError(f"{self.name} ended before {what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not within {timeout} s:\n{self.logs()}")
            time.sleep(0.3)

    def wait_for_line(self, text: str, timeout: float = 90) -> None:
        self.wait_for(repr(text), lambda: text in self.logs(), timeout)

    def wait_exit(self, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        while True:
            status, code = self.state()
            if status in ("exited", "stopped"):
                return code
            assert time.monotonic() < deadline, f"{self.name} still {status}:\n{self.logs()}"
            time.sleep(0.2)

    def sigterm(self, within: float) -> tuple[int, float]:
        """SIGTERM the container's PID 1, as `podman stop` and Kubernetes do first; its exit
        code and how long it took. Fails if it is still running after `within` seconds."""
        # `podman wait` blocks until the container exits: no polling beside the stop.
        waiting = subprocess.Popen(
            ["podman", "wait", self.name], env=env(), stdout=subprocess.PIPE, text=True
        )
        sent = time.monotonic()
        podman("kill", "--signal", "TERM", self.name)
        try:
            out, _ = waiting.communicate(timeout=within)
        except subprocess.TimeoutExpired:
            waiting.kill()
            waiting.wait()
            raise AssertionError(
                f"{self.name} still running {within} s after SIGTERM:\n{self.logs()}"
            ) from None
        return int(out.strip()), time.monotonic() - sent


@contextlib.contextmanager
def run(
    process: str,
    *args: str,
    environment: Mapping[str, str],
    volumes: Sequence[str] = (),
) -> Iterator[Container]:
    """`podman run -d` of IMAGE's entrypoint with `process`, restricted as in Kubernetes."""
    name = f"hooksvc-test-{process}-{uuid.uuid4().hex[:8]}"
    command = ["run", "--detach", "--name", name, *RESTRICTED]
    for key, value in environment.items():
        command += ["--env", f"{key}={value}"]
    for volume in volumes:
        command += ["--volume", volume]
    podman(*command, IMAGE, process, *args)
    container = Container(name)
    try:
        yield container
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def for_uid_10001(path: Path) -> Path:
    """Let the image's user read (and, for a directory, write) `path`, mounted into it."""
    os.chown(path, 10001, 10001)
    return path
