"""The image, built and run: every process of it as Kubernetes runs it, stopped as it stops it.

`make image`'s script builds it with podman (tests/deploy/containers.py); each container runs
read-only as uid 10001 with no capabilities. `migrate` migrates a fresh database; compose's
`certs` command writes a development certificate; `web` answers discovery over TLS with it;
`worker` connects to the broker (it answers a Celery ping and serves its metrics port, as
compose and k8s/base give it); `beat` runs its schedule; `watch-clusters` watches the
Kubernetes API emulator; `wait-for-migrations` ends once nothing is pending. Each stops within
5 s of the SIGTERM that `podman stop` and Kubernetes send to a container's PID 1 (what holds
for a PID 1 is in test_sigterm.py); a process still running then would be SIGKILLed.

The build takes minutes on a new machine (the stand-in base image, then the wheels) and
seconds afterwards: podman keeps the base image and the build's layers. Skipped, with the
reason, where podman cannot be installed or run.
"""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings

import hooksvc
from hooksvc.celery import app as celery_app
from tests.deploy import containers, processes
from tests.support import servers
from tests.support.kube import KubeEmulator

pytestmark = pytest.mark.slow
STOP_SECONDS = processes.STOP_SECONDS


@pytest.fixture(scope="module")
def image() -> str:
    reason = containers.unavailable() or containers.make_base()
    if reason:
        pytest.skip(reason)
    seconds = containers.build()
    # Shown with -s: minutes on a new machine, seconds once podman has the layers.
    print(f"image built in {seconds:.0f} s")
    return containers.IMAGE


@pytest.fixture(scope="module")
def database(image: str, django_db_setup: object) -> Iterator[str]:
    """A database of the module's own, migrated by the image's `migrate`."""
    with processes.fresh_database("image") as url:
        yield url


def _environment(database: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "HOOKSVC_SECRET_KEY": secrets.token_urlsafe(50),
        "HOOKSVC_LOG_FORMAT": "text",
        **extra,
    }


@pytest.fixture(scope="module")
def migrated(database: str) -> str:
    with containers.run("migrate", environment=_environment(database)) as migrate:
        assert migrate.wait_exit() == 0, migrate.logs()
    return database


def test_migrate_runs_read_only_as_uid_10001_and_migrates(database: str) -> None:
    env = _environment(database)
    with containers.run("id", "-u", environment=env) as who:
        assert who.wait_exit() == 0
        assert who.logs().strip() == "10001"
    with containers.run("migrate", environment=env) as migrate:
        assert migrate.wait_exit() == 0, migrate.logs()
    assert processes.applied_migrations(database) > 0
    with containers.run("touch", "/app/written", environment=env) as write:
        assert write.wait_exit() != 0
        assert "Read-only file system" in write.logs()


@pytest.fixture(scope="module")
def tls_dir(image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The development certificate, written by docker-compose.yml's `certs` command."""
    compose = yaml.safe_load((servers.ROOT / "docker-compose.yml").read_text())
    certs = compose["services"]["certs"]
    target = certs["environment"]["HOOKSVC_TLS_DIR"]
    out = containers.for_uid_10001(tmp_path_factory.mktemp("image-tls"))
    with containers.run(
        *certs["command"],
        environment=dict(certs["environment"]),
        volumes=[f"{out}:{target}"],
    ) as run:
        assert run.wait_exit() == 0, run.logs()
    assert {p.name for p in out.iterdir()} >= {"tls.crt", "tls.key", "ca.crt"}
    return out


def _discovery(port: int, ca_file: Path) -> dict[str, Any] | None:
    request = urllib.request.Request(
        f"https://localhost:{port}/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
        data=json.dumps(
            {"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:
            body: dict[str, Any] = json.loads(answer.read())
            return body
    except OSError:
        return None


def test_web_answers_discovery_over_tls_and_stops_on_sigterm(migrated: str, tls_dir: Path) -> None:
    port = servers.free_port()
    env = _environment(migrated, HOOKSVC_BIND=f"127.0.0.1:{port}", HOOKSVC_WEB_WORKERS="1")
    with containers.run("web", environment=env, volumes=[f"{tls_dir}:/etc/hooksvc/tls:ro"]) as web:
        web.wait_for("discovery", lambda: _discovery(port, tls_dir / "ca.crt") is not None)
        body = _discovery(port, tls_dir / "ca.crt")
        assert body is not None and body["status"] == "Success"
        assert len(body["handlers"]) == 9
        code, seconds = web.sigterm(within=processes.WEB_STOP_SECONDS)
        print(f"{web.name} stopped {seconds:.1f} s after SIGTERM")
        logs = web.logs()
    assert code == 0, logs


def _compose_worker_metrics_port() -> str:
    compose = yaml.safe_load((servers.ROOT / "docker-compose.yml").read_text())
    worker = compose["services"]["worker"]
    port = str(worker["environment"]["HOOKSVC_WORKER_METRICS_PORT"])
    assert port in [str(p) for p in worker.get("expose", [])], "compose exposes no metrics port"
    return port


def test_the_worker_connects_serves_its_metrics_and_stops_warmly(migrated: str) -> None:
    assert _compose_worker_metrics_port() == "9808"
    port = servers.free_port()
    queue = f"image-test-{uuid.uuid4().hex[:8]}"
    node = f"{queue}@hooksvc"
    env = _environment(migrated, HOOKSVC_WORKER_METRICS_PORT=str(port))
    # Its own queue: it takes none of the suite's tasks, yet answers on the broker.
    with containers.run("worker", "-n", node, "-Q", queue, environment=env) as worker:
        worker.wait_for_line("ready.")
        replies = celery_app.control.ping(destination=[node], timeout=5)
        assert replies == [{node: {"ok": "pong"}}], worker.logs()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.status == 200
        code, seconds = worker.sigterm(within=STOP_SECONDS)
        print(f"{worker.name} stopped {seconds:.1f} s after SIGTERM")
        logs = worker.logs()
    assert code == 0, logs
    assert "Warm shutdown" in logs


def test_beat_runs_its_schedule_in_tmp_and_stops_on_sigterm(migrated: str) -> None:
    with containers.run("beat", environment=_environment(migrated)) as beat:
        beat.wait_for(
            "the schedule file in /tmp",
            lambda: (
                containers.podman(
                    "exec", beat.name, "sh", "-c", "ls /tmp/celerybeat-schedule*", check=False
                ).returncode
                == 0
            ),
        )
        code, seconds = beat.sigterm(within=STOP_SECONDS)
        print(f"{beat.name} stopped {seconds:.1f} s after SIGTERM")
        logs = beat.logs()
    assert code == 0, logs


def test_the_cluster_watcher_watches_and_stops_on_sigterm(
    migrated: str, kube: KubeEmulator, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    kubeconfig.chmod(0o644)
    port = servers.free_port()
    env = _environment(
        migrated, HOOKSVC_KUBECONFIG="/etc/hooksvc/kubeconfig", HOOKSVC_WATCHER_PORT=str(port)
    )
    with containers.run(
        "watch-clusters", environment=env, volumes=[f"{kubeconfig}:/etc/hooksvc/kubeconfig:ro"]
    ) as watcher:
        watcher.wait_for(
            "a watch of Clusters",
            lambda: any("/clusters" in p and "watch=" in p for _, p in kube.requests),
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        code, seconds = watcher.sigterm(within=STOP_SECONDS)
        print(f"{watcher.name} stopped {seconds:.1f} s after SIGTERM")
        logs = watcher.logs()
    assert code == 0, logs


def test_waiting_for_migrations_ends_once_none_is_pending(migrated: str) -> None:
    with containers.run("wait-for-migrations", environment=_environment(migrated)) as wait:
        assert wait.wait_exit(timeout=120) == 0, wait.logs()
        assert "waiting for the migrate Job" not in wait.logs()


def test_the_image_says_its_version_and_commit(image: str) -> None:
    """The OCI labels (image-spec annotations.md: org.opencontainers.image.version and
    .revision) and the image's `version` command name this checkout's version and commit."""
    labels = json.loads(
        containers.podman("image", "inspect", "--format", "{{json .Labels}}", image).stdout
    )
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    assert labels["org.opencontainers.image.version"] == hooksvc.__version__
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head
    with containers.run("version", environment={}) as version:
        assert version.wait_exit(timeout=120) == 0, version.logs()
        commit = labels["org.opencontainers.image.revision"]
        assert version.logs() == f"hooksvc {hooksvc.__version__} (commit {commit})\n"
