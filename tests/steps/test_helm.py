"""Helm charts in `addon_install` and `addon_remove`: the real helm 3.17 against the emulator.

The chart is tests/steps/charts/hello (a ConfigMap, a Service and a Deployment whose replica
count, image and greeting come from values, with a values schema). Install: the emulator
holds the objects with the values applied, the inventory lists the release and exactly its
objects, the step waits until the Deployment is rolled out (the test plays its controller),
and a second start of the same step does not upgrade the release again. Remove: helm
uninstalls the release, the step waits until each object is gone. Failures (no chart, values
the schema refuses, a repository or registry that cannot be reached, no helm) give fixed
messages that never carry helm's output; what helm printed goes to the log only.
"""

from __future__ import annotations

import base64
import functools
import gzip
import http.server
import json
import logging
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.steps.conftest import CLUSTER, Context, run
from tests.steps.conftest import NS as FLEET
from tests.support.kube import KubeEmulator
from workflows import errors
from workflows.steps import helm, registry

CHART = str(Path(__file__).parent / "charts" / "hello")
NS = "web"
DEPLOYMENTS = ("apps", "v1", "deployments")
VALUES = {"replicaCount": 3, "greeting": "bonjour", "image": "registry.example.com/hello:2.0"}
INVENTORY: list[dict[str, Any]] = [
    {"helmRelease": "demo", "namespace": NS},
    {"apiVersion": "v1", "kind": "ConfigMap", "namespace": NS, "name": "demo-hello"},
    {"apiVersion": "v1", "kind": "Service", "namespace": NS, "name": "demo-hello"},
    {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": "demo-hello"},
]
INVENTORY[1:] = [{**entry, "helmRelease": "demo"} for entry in INVENTORY[1:]]


def chart(**fields: Any) -> dict[str, Any]:
    return {"release": "demo", "chart": CHART, "namespace": NS, "values": VALUES, **fields}


def install(context: Context, *charts: dict[str, Any], run_id: int = 7) -> registry.StepContext:
    params = {"charts": list(charts) or [chart()], "pollSeconds": 2}
    return context("addon_install", params, step_name="addons", run_id=run_id)


def roll_out(kube: KubeEmulator, replicas: int = 3) -> None:
    status = {"replicas": replicas, "updatedReplicas": replicas, "availableReplicas": replicas}
    kube.set_status(*DEPLOYMENTS, NS, "demo-hello", {"observedGeneration": 1, **status})


def releases(kube: KubeEmulator, namespace: str = NS) -> list[dict[str, Any]]:
    """helm's release records (Secrets), decoded: name, revision, status, description."""
    found = []
    for secret in kube.list_objects("", "v1", "secrets", namespace):
        if (secret["metadata"].get("labels") or {}).get("owner") != "helm":
            continue
        # helm stores base64(gzip(JSON)) in the Secret's data, itself base64 on the wire.
        raw = base64.b64decode(base64.b64decode(secret["data"]["release"]))
        record = json.loads(gzip.decompress(raw))
        info = record["info"]
        found.append(
            {
                "secret": secret["metadata"]["name"],
                "version": record["version"],
                "status": info["status"],
                "description": info["description"],
            }
        )
    return found


def writes(kube: KubeEmulator) -> list[str]:
    return [f"{m} {p.split('?')[0]}" for m, p in kube.requests if m in ("POST", "PUT", "PATCH")]


def test_install_applies_the_chart_with_its_values_and_waits_for_the_rollout(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = install(context)
    first = run(ctx)
    assert first == registry.Poll(
        after=2,
        message=f"waiting for 1 of 1 to roll out: Deployment {NS}/demo-hello",
        output={"inventory": INVENTORY},
    )
    # --create-namespace made the namespace; the objects carry the values.
    assert kube.get_object("", "v1", "namespaces", None, NS) is not None
    deployment = kube.get_object(*DEPLOYMENTS, NS, "demo-hello")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 3
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/hello:2.0"
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert deployment["metadata"]["annotations"]["meta.helm.sh/release-name"] == "demo"
    config = kube.get_object("", "v1", "configmaps", NS, "demo-hello")
    assert config is not None and config["data"] == {"greeting": "bonjour"}
    service = kube.get_object("", "v1", "services", NS, "demo-hello")
    assert service is not None and service["spec"]["ports"] == [{"port": 80, "targetPort": 8080}]
    assert releases(kube) == [
        {
            "secret": "sh.helm.release.v1.demo.v1",
            "version": 1,
            "status": "deployed",
            "description": "hooksvc run 7 step addons",
        }
    ]
    # Two of three replicas available: still rolling out.
    kube.set_status(
        *DEPLOYMENTS,
        NS,
        "demo-hello",
        {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 2},
    )
    assert isinstance(run(ctx), registry.Poll)
    roll_out(kube)
    assert run(ctx) == registry.Done({"inventory": INVENTORY})


def test_starting_the_step_again_does_not_install_again(
    kube: KubeEmulator, context: Context
) -> None:
    run(install(context))
    kube.requests.clear()
    # The same run and step, started afresh (its memo lost): the release is found, not redone.
    again = run(install(context))
    assert isinstance(again, registry.Poll) and again.output == {"inventory": INVENTORY}
    assert writes(kube) == []
    assert [r["version"] for r in releases(kube)] == [1]
    # Another run's step upgrades the release: a new revision, the objects updated in place.
    roll_out(kube)
    other = install(context, chart(values={**VALUES, "replicaCount": 2}), run_id=8)
    assert isinstance(run(other), registry.Poll)
    assert [(r["version"], r["status"]) for r in releases(kube)] == [
        (1, "superseded"),
        (2, "deployed"),
    ]
    assert len(kube.list_objects(*DEPLOYMENTS, NS)) == 1
    deployment = kube.get_object(*DEPLOYMENTS, NS, "demo-hello")
    assert deployment is not None and deployment["spec"]["replicas"] == 2


@pytest.mark.django_db
def test_remove_uninstalls_the_release_and_waits_until_its_objects_are_gone(
    kube: KubeEmulator, context: Context
) -> None:
    run(install(context))
    kube.put_object(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": NS}}
    )
    # A finalizer holds the Deployment after its deletion, as a controller's might.
    deployment = kube.get_object(*DEPLOYMENTS, NS, "demo-hello")
    assert deployment is not None
    deployment["metadata"]["finalizers"] = ["example.com/drain"]
    kube.put_object(deployment)
    ctx = context("addon_remove", {"inventory": INVENTORY}, step_name="remove")
    kube.requests.clear()
    held = f"Deployment {NS}/demo-hello (finalizers: example.com/drain)"
    assert run(ctx) == registry.Poll(
        after=5,
        message=f"removing objects: waiting for 1 to be gone: {held}",
        output={"removing": "objects", "remaining": [held]},
    )
    deletes = sorted(p.split("?")[0] for m, p in kube.requests if m == "DELETE")
    assert deletes == [
        f"/api/v1/namespaces/{NS}/configmaps/demo-hello",
        f"/api/v1/namespaces/{NS}/secrets/sh.helm.release.v1.demo.v1",
        f"/api/v1/namespaces/{NS}/services/demo-hello",
        f"/apis/apps/v1/namespaces/{NS}/deployments/demo-hello",
    ]
    assert releases(kube) == []
    kube.delete_object(*DEPLOYMENTS, NS, "demo-hello")  # the finalizer's controller is done
    assert run(ctx) == registry.Done({"removed": INVENTORY})
    assert kube.get_object("", "v1", "configmaps", NS, "keep") is not None
    assert kube.get_object("", "v1", "namespaces", None, NS) is not None, "not the release's"
    # Started again: the release is gone already, and that is no failure.
    again = context("addon_remove", {"inventory": INVENTORY}, step_name="remove")
    assert run(again) == registry.Done({"removed": INVENTORY})


@pytest.mark.parametrize(
    "case",
    [
        (
            {"chart": "/nonexistent/charts/hello"},
            errors.PermanentError,
            "chart not found",
        ),
        (
            {"values": {"replicaCount": "three"}},
            errors.PermanentError,
            "values do not match the chart's schema",
        ),
        (
            {"chart": "hello"},
            errors.PermanentError,
            "chart must be a path, a URL, an oci:// reference, or a name with repo",
        ),
        (
            {"chart": "oci://127.0.0.1:9/charts/hello", "version": "1.2.3"},
            errors.TemporaryError,
            "the chart's repository or registry cannot be reached",
        ),
        (
            {"chart": "hello", "repo": "http://127.0.0.1:9/charts", "version": "1.2.3"},
            errors.TemporaryError,
            "the chart's repository or registry cannot be reached",
        ),
    ],
    ids=["no such chart", "values of the wrong type", "bare name", "oci", "repository"],
)
def test_a_failing_chart_gives_a_fixed_message_and_logs_what_helm_said(
    kube: KubeEmulator,
    context: Context,
    caplog: pytest.LogCaptureFixture,
    case: tuple[dict[str, Any], type[errors.StepError], str],
) -> None:
    fields, error, message = case
    with (
        caplog.at_level(logging.WARNING, logger="workflows.steps.helm"),
        pytest.raises(errors.StepError) as exc,
    ):
        run(install(context, chart(**fields)))
    assert type(exc.value) is error
    assert exc.value.message == f"Helm release {NS}/demo: {message}"
    assert kube.list_objects(*DEPLOYMENTS, NS) == []
    [record] = [r for r in caplog.records if getattr(r, "action", "") == "helm_failed"]
    stderr: str = record.stderr  # type: ignore[attr-defined]
    assert stderr.startswith("Error:")
    assert stderr not in exc.value.message


def test_oci_and_repository_references_reach_helm_with_their_version(
    context: Context, caplog: pytest.LogCaptureFixture
) -> None:
    """What helm tried to fetch (only in the log) shows the reference and version passed."""
    oci = chart(chart="oci://127.0.0.1:9/charts/hello", version="1.2.3")
    repo = chart(chart="hello", repo="http://127.0.0.1:9/charts", version="1.2.3")
    tried = []
    for given in (oci, repo):
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="workflows.steps.helm"),
            pytest.raises(errors.TemporaryError),
        ):
            run(install(context, given))
        [record] = [r for r in caplog.records if getattr(r, "action", "") == "helm_failed"]
        tried.append(record.stderr)  # type: ignore[attr-defined]
    assert "127.0.0.1:9/v2/charts/hello/manifests/1.2.3" in tried[0]
    assert "http://127.0.0.1:9/charts/index.yaml" in tried[1]


def test_cluster_scoped_objects_have_no_namespace_and_kept_ones_are_not_waited_for(
    kube: KubeEmulator, context: Context
) -> None:
    ctx = install(context, chart(values={**VALUES, "clusterReader": True}))
    assert isinstance(run(ctx), registry.Poll)
    roll_out(kube)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    inventory = done.output["inventory"]
    kinds = {entry.get("kind"): entry for entry in inventory[1:]}
    assert kinds["ClusterRole"] == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "namespace": None,
        "name": "demo-hello-reader",
        "helmRelease": "demo",
    }
    kept = [e for e in inventory if e.get("keep")]
    assert [e["name"] for e in kept] == ["demo-hello-kept"]
    remove = context("addon_remove", {"inventory": inventory}, step_name="remove")
    assert run(remove) == registry.Done({"removed": inventory})
    role = ("rbac.authorization.k8s.io", "v1", "clusterroles", None, "demo-hello-reader")
    assert kube.get_object(*role) is None
    assert kube.get_object("", "v1", "configmaps", NS, "demo-hello-kept") is not None


@pytest.mark.parametrize("policy", ["Keep ", "retain"])
def test_any_resource_policy_leaves_the_object_on_uninstall_and_removal_does_not_wait_for_it(
    kube: KubeEmulator, context: Context, policy: str
) -> None:
    """helm v3.17.3 and v4.1.4 pkg/action/resource_policy.go `filterManifestsToKeep`: the
    annotation's value is trimmed and lowercased before it is compared with "keep", and a
    manifest with any other value lands in neither list, so uninstall.go `deleteRelease`
    deletes it neither. Removal read only an exact "keep" and waited for such an object
    forever."""
    values = {**VALUES, "clusterReader": True, "keepPolicy": policy}
    ctx = install(context, chart(values=values))
    assert isinstance(run(ctx), registry.Poll)
    roll_out(kube)
    done = run(ctx)
    assert isinstance(done, registry.Done)
    inventory = done.output["inventory"]
    assert [e["name"] for e in inventory if e.get("keep")] == ["demo-hello-kept"]
    remove = context("addon_remove", {"inventory": inventory}, step_name="remove")
    assert run(remove) == registry.Done({"removed": inventory})
    assert kube.get_object("", "v1", "configmaps", NS, "demo-hello-kept") is not None
    assert kube.get_object("", "v1", "configmaps", NS, "demo-hello") is None


def test_helm_keeps_no_cache_outside_its_private_directory(
    kube: KubeEmulator, context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helm v3.17.3 pkg/cli/environment.go gives client-go's ConfigFlags no cache directory,
    so k8s.io/cli-runtime v0.32 genericclioptions config_flags.go `toDiscoveryClient` keeps
    discovery and HTTP caches, by API server address and for hours, in $KUBECACHEDIR or
    else ~/.kube/cache: shared by every helm call of the worker and every cluster that
    reuses an address (a stale list of kinds). Each call gets its own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert isinstance(run(install(context)), registry.Poll)
    assert list(home.iterdir()) == []


@pytest.fixture
def chart_repository(tmp_path: Path) -> Iterator[str]:
    """A Helm chart repository over HTTP holding hello 0.1.0, as `helm repo index` makes it."""
    root = tmp_path / "repo"
    root.mkdir()
    binary = helm.binary()
    subprocess.run([binary, "package", CHART, "-d", str(root)], check=True, capture_output=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    url = f"http://127.0.0.1:{server.server_address[1]}/charts"
    (root / "charts").mkdir()
    (root / "hello-0.1.0.tgz").rename(root / "charts" / "hello-0.1.0.tgz")
    index = [binary, "repo", "index", str(root / "charts"), "--url", url]
    subprocess.run(index, check=True, capture_output=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url
    server.shutdown()
    server.server_close()


def test_a_chart_from_a_repository_installs_the_version_asked_for(
    kube: KubeEmulator, context: Context, chart_repository: str
) -> None:
    with pytest.raises(errors.PermanentError) as exc:
        run(install(context, chart(chart="hello", repo=chart_repository, version="9.9.9")))
    assert exc.value.message == f"Helm release {NS}/demo: chart not found"
    found = chart(chart="hello", repo=chart_repository, version="0.1.0")
    assert isinstance(run(install(context, found, run_id=8)), registry.Poll)
    deployment = kube.get_object(*DEPLOYMENTS, NS, "demo-hello")
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == "hello-0.1.0"


def test_an_unreachable_workload_cluster_is_retried(kube: KubeEmulator, context: Context) -> None:
    config = kube.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    value = base64.b64encode(json.dumps(config).encode()).decode()
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{CLUSTER}-kubeconfig", "namespace": FLEET},
            "data": {"value": value},
        }
    )
    with pytest.raises(errors.TemporaryError) as exc:
        run(install(context))
    assert exc.value.message == f"Helm release {NS}/demo: the workload cluster cannot be reached"


def test_a_chart_without_the_helm_cli_fails_saying_so(context: Context) -> None:
    with (
        override_settings(HELM_BINARY="/nonexistent/bin/helm"),
        pytest.raises(errors.PermanentError) as exc,
    ):
        run(install(context))
    assert exc.value.message == "helm CLI not found"


@pytest.mark.parametrize(
    ("stderr", "message"),
    [
        # The API server went away part way through an install.
        (
            'Error: INSTALLATION FAILED: failed to create resource: Post "https://10.0.0.1:6443'
            '/api/v1/namespaces/demo/services": dial tcp 10.0.0.1:6443: connect: '
            "connection refused",
            "the workload cluster cannot be reached",
        ),
        (
            'Error: INSTALLATION FAILED: Get "https://10.0.0.1:6443/apis/apps/v1/namespaces/demo'
            '/deployments/web": dial tcp: lookup api.example: no such host',
            "the workload cluster cannot be reached",
        ),
        (
            'Error: looks like "https://charts.example/" is not a valid chart repository or cannot'
            ' be reached: Get "https://charts.example/index.yaml": dial tcp: connection refused',
            "the chart's repository or registry cannot be reached",
        ),
    ],
)
def test_a_connection_error_names_the_cluster_or_the_chart_source_by_the_url(
    stderr: str, message: str
) -> None:
    error = helm._failure("Helm release demo/web", 1, stderr)
    assert isinstance(error, errors.TemporaryError)
    assert error.message == f"Helm release demo/web: {message}"
