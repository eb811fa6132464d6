"""k8s/ carries the sign-in settings: the provider from a ConfigMap, the client secret from a
Secret (never a value), the role rules from a ConfigMap the web pods mount; an overlay sets
them without touching the base, and the settings the web pods then get work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests
from workflows.operators import roles

OIDC = (
    "HOOKSVC_OIDC_ISSUER",
    "HOOKSVC_OIDC_CLIENT_ID",
    "HOOKSVC_OIDC_SCOPES",
    "HOOKSVC_OIDC_GROUPS_CLAIM",
    "HOOKSVC_LOCAL_LOGIN",
)


def _web(objects: list[manifests.Obj]) -> tuple[dict[str, Any], manifests.Obj]:
    web = manifests.find(objects, "Deployment", "hooksvc-web")
    container = next(c for c in manifests.pod_spec(web)["containers"] if c["name"] == "web")
    return {e["name"]: e for e in container["env"]}, web


def _config_map(objects: list[manifests.Obj], prefix: str, name: str) -> manifests.Obj:
    found = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    assert len(found) == 1 and name.startswith(prefix), name
    return found[0]


def test_the_web_pods_take_sign_in_from_a_config_map_and_the_secret_from_a_secret(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for target, objects in rendered.items():
        env, web = _web(objects)
        sign_in = env["HOOKSVC_OIDC_ISSUER"]["valueFrom"]["configMapKeyRef"]["name"]
        config = _config_map(objects, "hooksvc-sign-in-", sign_in)
        for name in OIDC:
            assert env[name]["valueFrom"]["configMapKeyRef"] == {"name": sign_in, "key": name}
        # Unset in the base: local accounts only, until an overlay names a provider.
        assert config["data"]["HOOKSVC_OIDC_ISSUER"] == "", target
        assert config["data"]["HOOKSVC_LOCAL_LOGIN"] == "1", target
        assert env["HOOKSVC_OIDC_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
            "name": "hooksvc-oidc",
            "key": "client-secret",
            "optional": True,
        }
        assert "value" not in env["HOOKSVC_OIDC_CLIENT_SECRET"]
        rules_path = Path(env["HOOKSVC_ROLES_FILE"]["value"])
        mounts = {m["name"]: m for m in manifests.pod_spec(web)["containers"][0]["volumeMounts"]}
        assert mounts["roles"]["mountPath"] == str(rules_path.parent)
        volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
        roles_map = _config_map(objects, "hooksvc-roles-", volumes["roles"]["configMap"]["name"])
        # The shipped rules are valid for hooksvc's own parser (and grant nothing).
        assert roles.parse(roles_map["data"][rules_path.name]) == ()


def test_an_overlay_names_the_provider_and_the_rules_and_the_web_pods_then_start(
    tmp_path: Path,
) -> None:
    rel = os.path.relpath(manifests.K8S / "overlays" / "prod", tmp_path)
    (tmp_path / "roles.yaml").write_text(
        "rules:\n  - group: team-payments\n    roles: [operator]\n    namespaces: [payments]\n"
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel],
                "configMapGenerator": [
                    {
                        "name": "hooksvc-sign-in",
                        "namespace": "hooksvc-system",
                        "behavior": "merge",
                        "literals": [
                            "HOOKSVC_OIDC_ISSUER=https://dex.example.com",
                            "HOOKSVC_OIDC_CLIENT_ID=hooksvc",
                            "HOOKSVC_OIDC_SCOPES=openid email profile groups",
                        ],
                    },
                    {
                        "name": "hooksvc-roles",
                        "namespace": "hooksvc-system",
                        "behavior": "replace",
                        "files": ["roles.yaml"],
                    },
                ],
            }
        )
    )
    objects = manifests.render(tmp_path, unrestricted=True)
    env, web = _web(objects)
    sign_in = _config_map(
        objects,
        "hooksvc-sign-in-",
        env["HOOKSVC_OIDC_ISSUER"]["valueFrom"]["configMapKeyRef"]["name"],
    )
    assert sign_in["data"]["HOOKSVC_OIDC_ISSUER"] == "https://dex.example.com"
    assert sign_in["data"]["HOOKSVC_OIDC_GROUPS_CLAIM"] == "groups"  # the base's, merged
    volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
    rules = _config_map(objects, "hooksvc-roles-", volumes["roles"]["configMap"]["name"])
    (tmp_path / "mounted").mkdir()
    (tmp_path / "mounted" / "roles.yaml").write_text(rules["data"]["roles.yaml"])
    # What the web pod's settings would read, in a process of its own.
    resolved = {
        name: sign_in["data"][entry["valueFrom"]["configMapKeyRef"]["key"]]
        for name, entry in env.items()
        if "configMapKeyRef" in entry.get("valueFrom", {})
    }
    started = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=manifests.ROOT,
        env={
            **os.environ,
            **resolved,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "HOOKSVC_ROLES_FILE": str(tmp_path / "mounted" / "roles.yaml"),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
