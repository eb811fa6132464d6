"""The one module that talks to Kubernetes: clients, error mapping, Clusters and Events.

Steps get API clients here (`management_api`, `workload_api`) and make every call through
`call` (or inside `translated`), which adds `REQUEST_TIMEOUT` and turns the client's
exceptions into the `K8sError` family below, so that an unreachable API server is a
`TemporaryError` the engine retries. Clients are built from explicit `Configuration`
objects: the `kubernetes` package reads $KUBECONFIG once at import, which a worker must not
depend on. Messages are deterministic and never carry a response body, a token or a
kubeconfig: they end up in CAPI's conditions.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar, cast

import kubernetes
import urllib3
import yaml
from django.conf import settings
from kubernetes.client import ApiException

from workflows import errors

T = TypeVar("T")
#: Other modules type clients as `k8s.ApiClient` without importing kubernetes.
ApiClient = kubernetes.client.ApiClient

#: (connect, read) seconds for every call. Steps pass it too, through `call`/`options()`.
REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)
CLUSTER_GROUP = "cluster.x-k8s.io"
#: Newest first: CAPI serves v1beta2 since 1.11; older management clusters only v1beta1.
CLUSTER_VERSIONS = ("v1beta2", "v1beta1")


class K8sError(errors.StepError):
    """The Kubernetes API call failed.

    NotFound, Conflict and Gone are neither temporary nor permanent: what they mean depends
    on the call (an object already deleted, a kind not served yet, a concurrent writer), so
    each call site decides, and one that does not lets the engine fail the step.
    """

    #: The HTTP status, when the API server answered.
    status: int | None = None
    #: The answer's Status `reason` (NotFound, AlreadyExists, Conflict, Forbidden, ...).
    reason: str = ""
    #: The Status `details.causes[].reason`s (e.g. NamespaceTerminating); never in messages.
    causes: tuple[str, ...] = ()


class NotFound(K8sError):
    """The object does not exist."""


class NotServed(NotFound):
    """The API server does not serve this kind (yet: a CRD not established, discovery lag)."""


class Conflict(K8sError):
    """The object exists already, or changed since it was read."""


class TryAgain(K8sError, errors.TemporaryError):
    """The API server refused for now; the same call can succeed later."""


class Forbidden(K8sError, errors.PermanentError):
    """hooksvc is not allowed to do this."""


class Invalid(K8sError, errors.PermanentError):
    """The API server rejected the request as invalid."""


class Unreachable(K8sError, errors.TemporaryError):
    """The API server did not answer, or answered that it cannot now."""


class KubeconfigUnavailable(K8sError, errors.TemporaryError):
    """No usable kubeconfig for the cluster (yet)."""


class Gone(K8sError):
    """The watch's resourceVersion is too old (410 Gone): list again."""

    status = 410


def options() -> dict[str, Any]:
    """Keyword arguments every client call takes: `api.read_x(..., **k8s.options())`."""
    return {"_request_timeout": REQUEST_TIMEOUT}


def _error_for(status: int) -> type[K8sError]:
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status in (401, 403):
        return Forbidden
    if status in (400, 422):
        return Invalid
    if status == 429 or status >= 500:
        return Unreachable
    return K8sError


@contextlib.contextmanager
def translated(what: str = "") -> Iterator[None]:
    """Turn the client's exceptions into `K8sError`s, prefixed with `what` when given."""
    prefix = f"{what}: " if what else ""
    try:
        yield
    except ApiException as exc:
        status = int(exc.status or 0)
        error = _error_for(status)(
            f"{prefix}API server answered {status} {exc.reason or ''}".strip()
        )
        error.status = status
        error.reason, error.causes = _status_reasons(exc.body)
        raise error from exc
    except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as exc:
        cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
        # NewConnectionError subclasses ConnectTimeoutError in urllib3, though nothing timed out.
        timed_out = isinstance(
            cause, (urllib3.exceptions.TimeoutError, TimeoutError)
        ) and not isinstance(cause, urllib3.exceptions.NewConnectionError)
        raise Unreachable(
            f"{prefix}API server {'timed out' if timed_out else 'unreachable'}"
        ) from exc


def _status_reasons(body: Any) -> tuple[str, tuple[str, ...]]:
    """The reason and the causes' reasons of a Status body (empty when it is not one)."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        return "", ()
    if not isinstance(status, dict):
        return "", ()
    causes = (status.get("details") or {}).get("causes") or []
    found = tuple(str(c.get("reason")) for c in causes if isinstance(c, dict) and c.get("reason"))
    return str(status.get("reason") or ""), found


def call(fn: Callable[..., T], /, *args: Any, what: str = "", **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` with the default timeout and translated errors."""
    with translated(what):
        return fn(*args, **{**options(), **kwargs})


# --- clients ---------------------------------------------------------------------------


def _api_client(configuration: kubernetes.client.Configuration) -> ApiClient:
    # urllib3 would retry connection failures and wait out a 429's Retry-After inside the
    # worker; the engine retries with its own backoff instead.
    configuration.retries = urllib3.Retry(0, respect_retry_after_header=False)
    return ApiClient(configuration)


_lock = threading.Lock()
# One management cluster: the client for its current source, rebuilt when the source changes.
_management: tuple[tuple[Any, ...], ApiClient] | None = None
_workload: dict[tuple[str, str], tuple[str, ApiClient]] = {}


def _load(source: tuple[Any, ...], configuration: kubernetes.client.Configuration) -> None:
    load: Any = kubernetes.config
    try:
        if source[0] == "in-cluster":
            load.load_incluster_config(client_configuration=configuration)
        else:
            load.load_kube_config(
                config_file=source[1], client_configuration=configuration, persist_config=False
            )
    except Exception:
        # Dropped: the loader's message may quote the file (YAML errors show the line).
        where = "the in-cluster ServiceAccount" if source[0] == "in-cluster" else source[1]
        raise KubeconfigUnavailable(f"kubeconfig {where} is not usable") from None


def management_configured() -> bool:
    """True in a Pod, or when the configured kubeconfig file exists."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or os.path.exists(
        settings.KUBECONFIG_PATH
    )


def management_api() -> ApiClient:
    """The management cluster: the Pod's ServiceAccount, else settings.KUBECONFIG_PATH."""
    global _management
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        source: tuple[Any, ...] = ("in-cluster",)
    else:
        path = str(settings.KUBECONFIG_PATH)
        try:
            stat = os.stat(path)
        except OSError:
            raise KubeconfigUnavailable(f"kubeconfig {path} not found") from None
        source = ("file", path, stat.st_mtime_ns, stat.st_size)
    with _lock:
        if _management is None or _management[0] != source:
            configuration = kubernetes.client.Configuration()
            _load(source, configuration)
            old, _management = _management, (source, _api_client(configuration))
            if old is not None:
                old[1].close()  # type: ignore[no-untyped-call]
        return _management[1]


def forget_clients() -> None:
    """Close and drop every cached client (tests; a process that forked)."""
    global _management
    with _lock:
        clients = [api for _, api in _workload.values()]
        clients += [_management[1]] if _management else []
        _management = None
        _workload.clear()
    for api in clients:
        api.close()  # type: ignore[no-untyped-call]


def _secret_config(namespace: str, secret: str, data: Mapping[str, Any] | None) -> Any:
    try:
        config = yaml.safe_load(base64.b64decode((data or {})["value"], validate=True))
    except KeyError:
        raise KubeconfigUnavailable(
            f"kubeconfig Secret {namespace}/{secret} has no key value"
        ) from None
    except (binascii.Error, yaml.YAMLError, UnicodeDecodeError):
        config = None  # the cause is dropped below: it quotes the Secret's content
    return config


def workload_kubeconfig(namespace: str, cluster_name: str) -> bytes:
    """The raw kubeconfig of CAPI's `<cluster>-kubeconfig` Secret, for CLIs such as helm."""
    secret = f"{cluster_name}-kubeconfig"
    try:
        found = call(core(management_api()).read_namespaced_secret, secret, namespace)
    except NotFound:
        raise KubeconfigUnavailable(f"kubeconfig Secret {namespace}/{secret} not found") from None
    if not isinstance(_secret_config(namespace, secret, found.data), dict):
        message = f"kubeconfig Secret {namespace}/{secret} is not a usable kubeconfig"
        raise KubeconfigUnavailable(message)
    return base64.b64decode((found.data or {})["value"])


def workload_api(namespace: str, cluster_name: str) -> ApiClient:
    """The workload cluster, from CAPI's `<cluster>-kubeconfig` Secret (key `value`).

    The Secret is read on every call; a client is kept per cluster until the Secret's
    resourceVersion changes (CAPI rotates it).
    """
    secret = f"{cluster_name}-kubeconfig"
    try:
        found = call(core(management_api()).read_namespaced_secret, secret, namespace)
    except NotFound:
        raise KubeconfigUnavailable(f"kubeconfig Secret {namespace}/{secret} not found") from None
    version = str(found.metadata.resource_version if found.metadata else "")
    with _lock:
        cached = _workload.get((namespace, cluster_name))
        if cached is not None and cached[0] == version:
            return cached[1]
    config = _secret_config(namespace, secret, found.data)
    configuration = kubernetes.client.Configuration()
    try:
        if not isinstance(config, dict):
            raise TypeError("not a mapping")
        load: Any = kubernetes.config
        load.load_kube_config_from_dict(
            config, client_configuration=configuration, persist_config=False
        )
    except Exception:
        message = f"kubeconfig Secret {namespace}/{secret} is not a usable kubeconfig"
        raise KubeconfigUnavailable(message) from None
    api = _api_client(configuration)
    with _lock:
        old = _workload.get((namespace, cluster_name))
        _workload[(namespace, cluster_name)] = (version, api)
    if old is not None:
        old[1].close()  # type: ignore[no-untyped-call]
    return api


def core(api: ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api)


def custom_objects(api: ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api)


def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    what: str,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> Any:
    """A REST call on any path, for what the typed APIs lack; JSON answer as dicts."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    with translated(what):
        response = api.call_api(*serialized, _request_timeout=REQUEST_TIMEOUT)
        response.read()  # type: ignore[no-untyped-call]
        return api.response_deserialize(response, {"2XX": "object"}).data


# --- watches ---------------------------------------------------------------------------


def watch(
    api: ApiClient,
    path: str,
    *,
    resource_version: str,
    timeout_seconds: int,
    what: str,
) -> Iterator[dict[str, Any]]:
    """The events of one watch of the collection `path` from `resource_version`.

    Ends when the server ends the watch (after `timeout_seconds`); raises `Gone` when the
    resourceVersion was compacted away (the caller lists again) and `Unreachable` when the
    connection fails (the caller resumes from the last resourceVersion it saw).
    """
    query = [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("timeoutSeconds", str(timeout_seconds)),
        ("allowWatchBookmarks", "true"),
    ]
    serialized = api.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    # The read timeout outlasts the server's own end of the watch.
    timeout = (REQUEST_TIMEOUT[0], timeout_seconds + REQUEST_TIMEOUT[1])
    with translated(what):
        response = api.call_api(*serialized, _request_timeout=timeout)
        raw = response.response
        try:
            if response.status >= 300:
                _raise_watch_error(int(response.status), what)
            buffer = b""
            for chunk in raw.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event: dict[str, Any] = json.loads(line)
                    if event.get("type") == "ERROR":
                        code = (event.get("object") or {}).get("code")
                        _raise_watch_error(int(code or 500), what)
                    yield event
        finally:
            raw.release_conn()


def _raise_watch_error(status: int, what: str) -> None:
    error_type = Gone if status == 410 else _error_for(status)
    error = error_type(f"{what}: API server answered {status}")
    error.status = status
    raise error


def list_clusters(api: ApiClient) -> tuple[str, dict[str, Any]]:
    """Every CAPI Cluster, at the newest version served: (collection path, the List)."""
    for version in CLUSTER_VERSIONS:
        path = f"/apis/{CLUSTER_GROUP}/{version}/clusters"
        try:
            found: dict[str, Any] = request(api, "GET", path, what="Clusters")
            return path, found
        except NotFound:
            if version == CLUSTER_VERSIONS[-1]:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --- Clusters and Events ---------------------------------------------------------------


def get_cluster(namespace: str, name: str) -> dict[str, Any]:
    """The CAPI Cluster with its status, at the newest version the server serves."""
    api, what = custom_objects(management_api()), f"Cluster {namespace}/{name}"
    for version in CLUSTER_VERSIONS:
        try:
            get = api.get_namespaced_custom_object
            found = call(get, CLUSTER_GROUP, version, namespace, "clusters", name, what=what)
            return cast("dict[str, Any]", found)
        except NotFound:
            # Either this version is not served or the Cluster does not exist: the last
            # version tells.
            if version == CLUSTER_VERSIONS[-1]:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def event_name(cluster_name: str, reason: str, message: str) -> str:
    """The same story gives the same Event, so repeating it bumps a count."""
    digest = hashlib.sha256(f"{reason}\n{message}".encode()).hexdigest()[:12]
    return f"{cluster_name}.hooksvc.{reason.lower()}.{digest}"


def emit_event(
    *,
    namespace: str,
    cluster_name: str,
    cluster_uid: str,
    reason: str,
    message: str,
    type: Literal["Normal", "Warning"] = "Normal",
) -> None:
    """Record a core/v1 Event on the Cluster, or bump the count of the same one."""
    api = core(management_api())
    name = event_name(cluster_name, reason, message)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    what = f"Event {namespace}/{name}"
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{CLUSTER_GROUP}/{CLUSTER_VERSIONS[0]}",
            "kind": "Cluster",
            "name": cluster_name,
            "namespace": namespace,
            "uid": cluster_uid,
        },
        "reason": reason,
        "message": message,
        "type": type,
        "source": {"component": "hooksvc"},
        "reportingComponent": "hooksvc",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        call(api.create_namespaced_event, namespace, body, what=what)
        return
    except Conflict:
        pass
    for _ in range(3):
        found = call(api.read_namespaced_event, name, namespace, what=what)
        patch = {
            # The resourceVersion makes a concurrent bump a 409, retried from a fresh read.
            "metadata": {
                "resourceVersion": found.metadata.resource_version if found.metadata else None
            },
            "count": (found.count or 1) + 1,
            "lastTimestamp": now,
        }
        merge = "application/merge-patch+json"
        try:
            call(api.patch_namespaced_event, name, namespace, patch, _content_type=merge, what=what)
            return
        except Conflict:
            continue
    raise Conflict(f"{what}: changed concurrently three times")
