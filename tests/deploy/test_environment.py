"""docker-compose.yml and k8s/ give hooksvc only variables it reads, and all it needs.

What the code reads is `ENVIRONMENT` in hooksvc/settings.py. Secrets come from `.env`
(compose) or a Secret the operator creates (k8s), never from a value in the repository.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from django.conf import settings

from tests.deploy import manifests

#: What every hooksvc process needs in production.
REQUIRED = {"DATABASE_URL", "CELERY_BROKER_URL", "HOOKSVC_SECRET_KEY", "HOOKSVC_TLS_DIR"}
#: Variables whose values are secret (or carry one).
SECRET = {"DATABASE_URL", "HOOKSVC_SECRET_KEY"}
PROCESSES = ("web", "worker", "beat", "migrate")
#: Processes only Kubernetes runs: compose has no management cluster to watch.
K8S_ONLY = ("watch-clusters",)


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((manifests.ROOT / "docker-compose.yml").read_text())
    return data


def _hooksvc_services(compose: dict[str, Any]) -> dict[str, Any]:
    """The services that run the hooksvc image (not PostgreSQL or Redis)."""
    return {n: s for n, s in compose["services"].items() if "build" in s}


def entrypoint_commands() -> set[str]:
    """The process names docker-entrypoint.sh knows (its `case` labels)."""
    script = (manifests.ROOT / "docker-entrypoint.sh").read_text()
    return set(re.findall(r"^([a-z][a-z-]*)\)$", script, flags=re.MULTILINE))


def test_the_known_environment_lists_the_required_variables() -> None:
    assert set(settings.ENVIRONMENT) >= REQUIRED | {"HOOKSVC_ENV"}


def test_compose_gives_hooksvc_only_variables_the_code_reads() -> None:
    services = _hooksvc_services(_compose())
    assert set(services) == {"certs", *PROCESSES}
    for name, service in services.items():
        unknown = set(service["environment"]) - set(settings.ENVIRONMENT)
        assert not unknown, f"{name}: {unknown} are not in hooksvc.settings.ENVIRONMENT"


def test_compose_sets_the_required_variables_for_every_process() -> None:
    services = _hooksvc_services(_compose())
    for name in PROCESSES:
        env = services[name]["environment"]
        assert set(env) >= REQUIRED, name
        assert env["HOOKSVC_ENV"] == "production", name
        assert services[name]["command"] == [name], name
        assert name in entrypoint_commands()


def test_compose_takes_every_password_from_the_environment_without_default() -> None:
    compose = _compose()
    web = compose["services"]["web"]["environment"]
    postgres = compose["services"]["postgres"]["environment"]
    required = re.compile(r"\$\{[A-Z_]+:\?[^}]+\}")
    for value in (web["HOOKSVC_SECRET_KEY"], web["DATABASE_URL"], postgres["POSTGRES_PASSWORD"]):
        assert required.search(value), f"{value!r} must be ${{VAR:?message}}, with no default"
    assert ":-" not in (manifests.ROOT / "docker-compose.yml").read_text()


def test_compose_serves_https_with_the_certs_volume_on_the_tls_dir() -> None:
    services = _compose()["services"]
    web, certs = services["web"], services["certs"]
    assert web["ports"] == ["9443:9443"]
    tls_dir = web["environment"]["HOOKSVC_TLS_DIR"]
    assert f"tls:{tls_dir}:ro" in web["volumes"]
    assert f"tls:{tls_dir}" in certs["volumes"]
    assert certs["command"][:2] == ["python", "-c"]
    assert "devcerts.ensure" in certs["command"][2]
    assert web["depends_on"]["certs"] == {"condition": "service_completed_successfully"}
    assert web["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    for name in ("postgres", "redis"):
        assert "healthcheck" in services[name], name


def test_kubernetes_gives_hooksvc_only_variables_the_code_reads_and_all_it_needs(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for target, workload in manifests.every_workload(rendered):
        if not manifests.is_hooksvc(workload):
            continue
        for container in manifests.containers(workload):
            at = f"{target}: {manifests.id_of(workload)} container {container['name']}"
            env = {e["name"]: e for e in container["env"]}
            unknown = set(env) - set(settings.ENVIRONMENT)
            assert not unknown, f"{at}: {unknown} are not in hooksvc.settings.ENVIRONMENT"
            assert set(env) >= REQUIRED, at
            assert env["HOOKSVC_ENV"]["value"] == "production", at
            for name in SECRET | {"CELERY_BROKER_URL"}:
                ref = env[name]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": "hooksvc-env", "key": name}, at


def test_every_hooksvc_container_runs_a_command_the_entrypoint_knows(
    every_rendering: dict[str, list[manifests.Obj]],
) -> None:
    known = entrypoint_commands()
    assert known >= {*PROCESSES, *K8S_ONLY, "wait-for-migrations"}
    for target, objects in every_rendering.items():
        seen = set()
        for workload in filter(manifests.is_hooksvc, manifests.workloads(objects)):
            for container in manifests.containers(workload):
                assert "command" not in container, "the image's entrypoint picks the process"
                assert container["args"][0] in known, container["args"]
                seen.add(container["args"][0])
        assert seen == {*PROCESSES, *K8S_ONLY, "wait-for-migrations"}, target
