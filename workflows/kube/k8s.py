"""The one module that talks to Kubernetes: clients, error mapping, Clusters and Events.

Steps get API clients here (`management_api`, `workload_api`) and make every call through
`call` (or inside `translated`), which adds `REQUEST_TIMEOUT` and turns the client's
exceptions into the `K8sError` family below, so that an unreachable API server is a
`TemporaryError` the engine retries, after the server's `Retry-After` when it gave one. A
workload cluster's client re-reads its kubeconfig Secret once when the API server answers
401 (token kubeconfigs rotate), as client-go refreshes credentials on 401. Clients are
built from explicit `Configuration` objects: the `kubernetes` package reads $KUBECONFIG
once at import, which a worker must not depend on. Messages are deterministic and never
carry a response body, a token or a kubeconfig: they end up in CAPI's conditions. Watches
are `workflows.kube.watches`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

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
#: The most a 429 or 5xx's Retry-After delays the next attempt (priority and fairness asks
#: 1-32 s: apiserver util/flowcontrol/dropped_requests_tracker.go, maxRetryAfter).
MAX_RETRY_AFTER_SECONDS = 60.0
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


class Unauthorized(K8sError, errors.TemporaryError):
    """The API server did not accept the credentials (401): expired or rotated, not refused.

    client-go refreshes credentials on a 401 and the next request carries new ones
    (transport/token_source.go ResetTokenOlderThan, plugin/pkg/client/auth/exec roundTripper);
    a workload cluster's client re-reads its kubeconfig Secret once before this is raised.
    """


class Invalid(K8sError, errors.PermanentError):
    """The API server rejected the request as invalid."""


class Unreachable(K8sError, errors.TemporaryError):
    """The API server did not answer, or answered that it cannot now."""


class KubeconfigUnavailable(K8sError, errors.TemporaryError):
    """No usable kubeconfig for the cluster (yet)."""


class NotConfigured(K8sError, errors.PermanentError):
    """No usable management cluster in hooksvc's settings: waiting heals nothing."""


SETTING_ADVICE = (
    "set HOOKSVC_KUBECONFIG to the management cluster's kubeconfig file, or run hooksvc in a "
    "Pod with a ServiceAccount"
)
POD_ADVICE = "mount the Pod's ServiceAccount token (automountServiceAccountToken)"


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
    if status == 401:
        return Unauthorized
    if status == 403:
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
        message = f"{prefix}API server answered {status} {exc.reason or ''}".strip()
        raise answered(status, exc.body, message, headers=exc.headers) from exc
    except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as exc:
        cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
        # NewConnectionError subclasses ConnectTimeoutError in urllib3, though nothing timed out.
        timed_out = isinstance(
            cause, (urllib3.exceptions.TimeoutError, TimeoutError)
        ) and not isinstance(cause, urllib3.exceptions.NewConnectionError)
        raise Unreachable(
            f"{prefix}API server {'timed out' if timed_out else 'unreachable'}"
        ) from exc


def answered(
    status: int, body: Any, message: str, *, headers: Mapping[str, str] | None = None
) -> K8sError:
    """The error for an API server's answer `status` with `body` (a Status, as JSON or a dict).

    410 is `Gone` (a watch's resourceVersion was compacted: list again); a temporary one
    waits what the answer asks (`retry_after`).
    """
    error = (Gone if status == 410 else _error_for(status))(message)
    error.status = status
    error.reason, error.causes = _status_reasons(body)
    if isinstance(error, errors.TemporaryError) and (status == 429 or status >= 500):
        error.delay = retry_after(headers, body)
    return error


def _status_reasons(body: Any) -> tuple[str, tuple[str, ...]]:
    """The reason and the causes' reasons of a Status body (empty when it is not one)."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else body
    except ValueError:
        return "", ()
    if not isinstance(status, dict):
        return "", ()
    causes = (status.get("details") or {}).get("causes") or []
    found = tuple(str(c.get("reason")) for c in causes if isinstance(c, dict) and c.get("reason"))
    return str(status.get("reason") or ""), found


def retry_after(headers: Mapping[str, str] | None, body: Any) -> float | None:
    """Seconds a 429 or 5xx asks to wait, bounded; None when it asks nothing.

    The Retry-After header as client-go reads it (rest/with_retry.go checkWait: whole
    seconds only), else the Status' details.retryAfterSeconds (apimachinery
    api/errors SuggestsClientDelay), as a watch cache that is not ready answers.
    """
    seconds: float | None = None
    raw = (headers or {}).get("Retry-After", "")
    if raw.strip().isdigit():
        seconds = float(raw)
    else:
        try:
            status = json.loads(body) if isinstance(body, str | bytes) else body
            given = (status.get("details") or {}).get("retryAfterSeconds")
            seconds = float(given) if isinstance(given, int) and given > 0 else None
        except (ValueError, AttributeError):
            seconds = None
    if seconds is None:
        return None
    return min(max(seconds, 1.0), MAX_RETRY_AFTER_SECONDS)


def call(fn: Callable[..., T], /, *args: Any, what: str = "", **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` with the default timeout and translated errors."""
    with translated(what):
        return fn(*args, **{**options(), **kwargs})


# --- clients ---------------------------------------------------------------------------


def _configured(configuration: kubernetes.client.Configuration) -> Any:
    # urllib3 would retry connection failures and wait out a 429's Retry-After inside the
    # worker; the engine retries with its own backoff (and the server's Retry-After) instead.
    configuration.retries = urllib3.Retry(0, respect_retry_after_header=False)
    return configuration


def _api_client(configuration: kubernetes.client.Configuration) -> ApiClient:
    return ApiClient(_configured(configuration))


class WorkloadClient(ApiClient):
    """A workload cluster's client, kept per cluster; its credentials follow the Secret.

    On a 401 it reads the kubeconfig Secret again and, when the Secret changed, sends the
    same request once more with the new credentials: a token kubeconfig is rewritten by
    its provider (cluster-api-provider-aws writes a 15-minute EKS token at every
    reconcile: pkg/cloud/services/eks/config.go updateCAPIKubeconfigSecret), and client-go
    refreshes credentials on 401 rather than failing for good.
    """

    def __init__(
        self, configuration: Any, *, namespace: str, cluster_name: str, version: str
    ) -> None:
        super().__init__(_configured(configuration))
        self.namespace, self.cluster_name, self.version = namespace, cluster_name, version
        self._renewing = threading.Lock()

    def adopt(self, version: str, configuration: Any) -> None:
        """Use the credentials of the Secret at `version` from now on (held API objects too)."""
        with self._renewing:
            if version == self.version:
                return
            old = self.rest_client
            configuration = _configured(configuration)
            self.rest_client = kubernetes.client.rest.RESTClientObject(configuration)
            self.configuration, self.version = configuration, version
        old.close()  # a request still on it finishes; its connection is not reused

    def call_api(
        self,
        method: str,
        url: str,
        header_params: dict[str, Any] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        used = self.configuration
        response = super().call_api(method, url, header_params, body, post_params, _request_timeout)
        if response.status != 401 or not self._renewed(used):
            return response
        response.read()  # type: ignore[no-untyped-call]
        response.response.release_conn()
        # The request was built with the old credentials and server: rebuild those parts.
        headers = {k: v for k, v in (header_params or {}).items() if k.lower() != "authorization"}
        self.update_params_for_auth(headers, [], ["BearerToken"], url, method, body)
        if url.startswith(used.host):
            url = self.configuration.host + url[len(used.host) :]
        return super().call_api(method, url, headers, body, post_params, _request_timeout)

    def _renewed(self, used: Any) -> bool:
        """After a 401: True when other credentials than `used` are now in place."""
        if self.configuration is not used:
            return True  # another thread read the Secret meanwhile
        try:
            version, data = _read_kubeconfig_secret(self.namespace, self.cluster_name)
            if version == self.version:
                return False  # the same Secret: the same credentials, the 401 stands
            self.adopt(version, _secret_configuration(self.namespace, self.cluster_name, data))
        except K8sError:
            return False
        return True


_lock = threading.Lock()
# One management cluster: the client for its current source, rebuilt when the source changes.
_management: tuple[tuple[Any, ...], ApiClient] | None = None
_workload: dict[tuple[str, str], WorkloadClient] = {}


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
        in_pod = source[0] == "in-cluster"
        where = "the in-cluster ServiceAccount" if in_pod else source[1]
        advice = POD_ADVICE if in_pod else SETTING_ADVICE
        raise NotConfigured(f"kubeconfig {where} is not usable: {advice}") from None


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
            raise NotConfigured(f"kubeconfig {path} not found: {SETTING_ADVICE}") from None
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
        clients: list[ApiClient] = list(_workload.values())
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


def _read_kubeconfig_secret(
    namespace: str, cluster_name: str
) -> tuple[str, Mapping[str, Any] | None]:
    """The resourceVersion and data of CAPI's `<cluster>-kubeconfig` Secret."""
    secret = f"{cluster_name}-kubeconfig"
    try:
        found = call(core(management_api()).read_namespaced_secret, secret, namespace)
    except NotFound:
        raise KubeconfigUnavailable(f"kubeconfig Secret {namespace}/{secret} not found") from None
    return str(found.metadata.resource_version if found.metadata else ""), found.data


def _secret_configuration(
    namespace: str, cluster_name: str, data: Mapping[str, Any] | None
) -> kubernetes.client.Configuration:
    secret = f"{cluster_name}-kubeconfig"
    config = _secret_config(namespace, secret, data)
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
    return configuration


def workload_kubeconfig(namespace: str, cluster_name: str) -> bytes:
    """The raw kubeconfig of CAPI's `<cluster>-kubeconfig` Secret, for CLIs such as helm."""
    _, data = _read_kubeconfig_secret(namespace, cluster_name)
    secret = f"{cluster_name}-kubeconfig"
    if not isinstance(_secret_config(namespace, secret, data), dict):
        message = f"kubeconfig Secret {namespace}/{secret} is not a usable kubeconfig"
        raise KubeconfigUnavailable(message)
    return base64.b64decode((data or {})["value"])


def workload_api(namespace: str, cluster_name: str) -> ApiClient:
    """The workload cluster, from CAPI's `<cluster>-kubeconfig` Secret (key `value`).

    The Secret is read on every call; one client is kept per cluster, and takes the
    Secret's credentials whenever its resourceVersion changes (CAPI rotates it), so API
    objects a step holds follow too.
    """
    version, data = _read_kubeconfig_secret(namespace, cluster_name)
    with _lock:
        api = _workload.get((namespace, cluster_name))
    if api is not None and api.version == version:
        return api
    configuration = _secret_configuration(namespace, cluster_name, data)
    if api is not None:
        api.adopt(version, configuration)
        return api
    made = WorkloadClient(
        configuration, namespace=namespace, cluster_name=cluster_name, version=version
    )
    with _lock:
        api = _workload.setdefault((namespace, cluster_name), made)
    if api is not made:  # another thread made one meanwhile
        made.close()  # type: ignore[no-untyped-call]
        api.adopt(version, configuration)
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
    timeout: tuple[float, float] | None = None,
) -> Any:
    """A REST call on any path, for what the typed APIs lack; JSON answer as dicts.

    `timeout` (connect, read) replaces REQUEST_TIMEOUT for a call with a tighter deadline.
    """
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
        response = api.call_api(*serialized, _request_timeout=timeout or REQUEST_TIMEOUT)
        response.read()  # type: ignore[no-untyped-call]
        return api.response_deserialize(response, {"2XX": "object"}).data


# --- Clusters --------------------------------------------------------------------------


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
