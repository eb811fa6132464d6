"""The shape of the deployment: web behind the Service, disruption budgets, single beat,
graceful shutdown that fits the grace period, certificates and the ExtensionConfig wiring.
"""

from __future__ import annotations

from typing import Any

from hooksvc.serving import drain, gunicorn_conf
from tests.deploy import manifests

WEB_LABELS = {"app.kubernetes.io/name": "hooksvc", "app.kubernetes.io/component": "web"}
SERVICE_DNS = {
    "hooksvc-webhook-service.hooksvc-system.svc",
    "hooksvc-webhook-service.hooksvc-system.svc.cluster.local",
}


def _container(workload: manifests.Obj, name: str) -> manifests.Obj:
    found: list[manifests.Obj] = [
        c for c in manifests.pod_spec(workload)["containers"] if c["name"] == name
    ]
    assert len(found) == 1, name
    return found[0]


def _ports(container: manifests.Obj) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def prestop_seconds(container: manifests.Obj) -> int:
    """The seconds of an exec `sleep N` preStop hook (0 without one)."""
    hook = container.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0
    command = hook["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return int(command[1])


def test_the_service_sends_443_to_the_web_pods_https_port(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        service = manifests.find(objects, "Service", "hooksvc-webhook-service")
        assert service["metadata"]["namespace"] == "hooksvc-system"
        assert service["spec"]["selector"] == WEB_LABELS, name
        assert service["spec"]["ports"] == [
            {"name": "https", "port": 443, "targetPort": 9443, "protocol": "TCP"}
        ], name
        web = manifests.find(objects, "Deployment", "hooksvc-web")
        assert _ports(_container(web, "web"))["https"] == 9443, name


def test_web_probes_healthz_and_readyz_over_https_on_the_admin_port(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    """The admin port: the hook port requires a client certificate (mutual TLS), which the
    kubelet's probes do not present."""
    for name, objects in rendered.items():
        web = _container(manifests.find(objects, "Deployment", "hooksvc-web"), "web")
        port = _ports(web)
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = web[probe]["httpGet"]
            assert (get["path"], get["scheme"], port[get["port"]]) == (path, "HTTPS", 8443), name


def test_web_runs_two_replicas_spread_over_nodes_and_zones_with_a_budget(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    assert manifests.find(rendered["base"], "Deployment", "hooksvc-web")["spec"]["replicas"] == 2
    for name, objects in rendered.items():
        web = manifests.find(objects, "Deployment", "hooksvc-web")
        replicas = web["spec"]["replicas"]
        assert replicas >= 2, name
        assert web["spec"]["template"]["metadata"]["labels"] == WEB_LABELS
        # A rollout adds a ready pod before it takes one away.
        assert web["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
        spread = manifests.pod_spec(web)["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in spread] == [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        ], name
        for constraint in spread:
            assert constraint["labelSelector"] == {"matchLabels": WEB_LABELS}, name
            assert constraint["maxSkew"] == 1, name
            # A single-node cluster still runs every replica.
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", name
            # Each ReplicaSet spreads on its own: a rollout's new pods too.
            assert constraint["matchLabelKeys"] == ["pod-template-hash"], name
        assert "affinity" not in manifests.pod_spec(web), "one way to spread, not two"
        pdb = manifests.find(objects, "PodDisruptionBudget", "hooksvc-web")
        assert pdb["spec"]["selector"] == {"matchLabels": WEB_LABELS}, name
        # At least one server stays, and a node drain can still evict one.
        assert 1 <= pdb["spec"]["minAvailable"] < replicas, name


def test_prod_runs_more_replicas_than_dev(rendered: dict[str, list[manifests.Obj]]) -> None:
    for deployment in ("hooksvc-web", "hooksvc-worker"):
        replicas = {
            t: manifests.find(rendered[t], "Deployment", deployment)["spec"]["replicas"]
            for t in ("dev", "prod")
        }
        assert replicas["prod"] > replicas["dev"], deployment


def test_beat_is_a_single_replica_replaced_by_recreate(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        beat = manifests.find(objects, "Deployment", "hooksvc-beat")
        assert beat["spec"]["replicas"] == 1, name
        assert beat["spec"]["strategy"] == {"type": "Recreate"}, name


def test_the_cluster_watcher_is_a_single_replica_running_watch_clusters(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        watcher = manifests.find(objects, "Deployment", "hooksvc-watcher")
        assert watcher["spec"]["replicas"] == 1, name
        assert watcher["spec"]["strategy"] == {"type": "Recreate"}, name
        assert _container(watcher, "watcher")["args"] == ["watch-clusters"], name
    script = (manifests.ROOT / "docker-entrypoint.sh").read_text()
    assert 'exec python manage.py watch_clusters "$@"' in script


def test_the_grace_period_covers_prestop_the_drain_and_the_calls_in_flight(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    """preStop, then SIGTERM: the drain (HOOKSVC_WEB_DRAIN_SECONDS, not set in the
    manifests: its default), then gunicorn's graceful_timeout for the calls in flight, which
    counts from SIGTERM and includes the drain (hooksvc/serving/gunicorn_conf.py)."""
    assert gunicorn_conf.graceful_timeout >= drain.SECONDS + 20
    for name, objects in rendered.items():
        web = manifests.find(objects, "Deployment", "hooksvc-web")
        container = _container(web, "web")
        env = {e["name"] for e in container["env"]}
        assert "HOOKSVC_WEB_DRAIN_SECONDS" not in env, "the grace period assumes the default"
        prestop = prestop_seconds(container)
        assert prestop >= 5, "web needs a preStop sleep so endpoints drain before SIGTERM"
        grace = manifests.pod_spec(web)["terminationGracePeriodSeconds"]
        assert grace >= prestop + gunicorn_conf.graceful_timeout + 5, name


def test_the_worker_has_time_for_a_warm_shutdown(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        worker = manifests.find(objects, "Deployment", "hooksvc-worker")
        assert manifests.pod_spec(worker)["terminationGracePeriodSeconds"] >= 30, name
        # Celery's concurrency defaults to the node's CPU count: set it explicitly.
        assert "--concurrency" in _container(worker, "worker")["args"], name


def test_the_certificate_names_the_service_and_web_mounts_its_secret(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        cert = manifests.find(objects, "Certificate", "hooksvc-webhook")
        assert set(cert["spec"]["dnsNames"]) == SERVICE_DNS, name
        issuer = manifests.find(objects, "Issuer", cert["spec"]["issuerRef"]["name"])
        assert issuer["metadata"]["namespace"] == cert["metadata"]["namespace"]
        web = manifests.find(objects, "Deployment", "hooksvc-web")
        volumes = {v["name"]: v for v in manifests.pod_spec(web)["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in _container(web, "web")["volumeMounts"]}
        tls_dir = _env(_container(web, "web"))["HOOKSVC_TLS_DIR"]
        assert volumes[mounts[tls_dir]]["secret"]["secretName"] == cert["spec"]["secretName"]


def _env(container: manifests.Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_extensionconfig_points_at_the_service_and_its_ca(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        config = manifests.find(objects, "ExtensionConfig", "hooksvc")
        cert = manifests.find(objects, "Certificate", "hooksvc-webhook")
        annotation = config["metadata"]["annotations"][
            "runtime.cluster.x-k8s.io/inject-ca-from-secret"
        ]
        assert annotation == f"{cert['metadata']['namespace']}/{cert['spec']['secretName']}", name
        assert config["spec"]["clientConfig"] == {
            "service": {
                "name": "hooksvc-webhook-service",
                "namespace": "hooksvc-system",
                "port": 443,
            }
        }, name
        expressions = config["spec"]["namespaceSelector"]["matchExpressions"]
        assert [e["key"] for e in expressions] == ["hooksvc.io/managed"], name
        assert config["spec"]["settings"], name


def test_the_network_policy_admits_capi_on_9443_and_chosen_namespaces_on_admin(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        policy = manifests.find(objects, "NetworkPolicy", "hooksvc-web")
        assert policy["spec"]["podSelector"] == {"matchLabels": WEB_LABELS}
        admitted = {
            port["port"]: [peer["namespaceSelector"]["matchLabels"] for peer in rule["from"]]
            for rule in policy["spec"]["ingress"]
            for port in rule["ports"]
        }
        assert admitted == {
            9443: [{"kubernetes.io/metadata.name": "capi-system"}],
            8443: [{"hooksvc.io/admin-access": "true"}],
        }, name
        web = _container(manifests.find(objects, "Deployment", "hooksvc-web"), "web")
        assert _ports(web) == {"https": 9443, "admin": 8443}, name
        deny = manifests.find(objects, "NetworkPolicy", "hooksvc-default-deny-ingress")
        assert deny["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "hooksvc"}}
        assert "ingress" not in deny["spec"], name


def test_the_watcher_is_probed_and_scraped_on_the_port_it_serves(
    rendered: dict[str, list[manifests.Obj]],
) -> None:
    for name, objects in rendered.items():
        watcher = _container(manifests.find(objects, "Deployment", "hooksvc-watcher"), "watcher")
        env = {e["name"]: e.get("value") for e in watcher["env"]}
        port = _ports(watcher)
        assert port == {"metrics": int(env["HOOKSVC_WATCHER_PORT"])}, name
        get = watcher["livenessProbe"]["httpGet"]
        assert (get["path"], port[get["port"]]) == ("/healthz", 9809), name
        policy = manifests.find(objects, "NetworkPolicy", "hooksvc-watcher-metrics")
        assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
            "watcher"
        )
        [rule] = policy["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [9809], name
