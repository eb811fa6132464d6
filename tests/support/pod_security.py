"""The Pod Security Standards' `restricted` profile, as a check of a Pod spec.

The controls and allowed values are those of
https://kubernetes.io/docs/concepts/security/pod-security-standards/ (Baseline, then
Restricted on top), as PodSecurity admission implements them (kubernetes
staging/src/k8s.io/pod-security-admission/policy/check_*.go): each check returns the
fields that break it, so a test can assert an empty list and read what is wrong when not.
Only what a Pod spec of ours can hold is checked (no Windows, no user namespaces, no
AppArmor annotations).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

JSON = dict[str, Any]

#: Baseline: capabilities that may be added (the container runtime's default set).
_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
#: Restricted: the only volume types allowed.
_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def _containers(spec: JSON) -> Iterator[tuple[str, JSON]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(spec.get(kind) or []):
            yield f"spec.{kind}[{index}]", container


def violations(pod: JSON) -> list[str]:
    """The fields of `pod` that the `restricted` profile refuses, with why."""
    spec = pod.get("spec") or {}
    found = _pod_level(spec)
    for path, container in _containers(spec):
        found += _baseline_container(path, container)
        found += _restricted_container(path, container, spec.get("securityContext") or {})
    return found


def _pod_level(spec: JSON) -> list[str]:
    context = spec.get("securityContext") or {}
    found = [
        f"spec.{f} must be false" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)
    ]
    found += [
        f"spec.securityContext.sysctls: {s.get('name')} is not safe"
        for s in context.get("sysctls") or []
        if s.get("name") not in _SAFE_SYSCTLS
    ]
    for index, volume in enumerate(spec.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if not kinds <= _VOLUME_TYPES:
            found.append(f"spec.volumes[{index}] has a restricted type {sorted(kinds)}")
    if context.get("runAsNonRoot") is False:
        found.append("spec.securityContext.runAsNonRoot must not be false")
    if context.get("runAsUser") == 0:
        found.append("spec.securityContext.runAsUser must not be 0")
    if (context.get("seccompProfile") or {}).get("type") not in (
        None,
        "RuntimeDefault",
        "Localhost",
    ):
        found.append("spec.securityContext.seccompProfile.type must be RuntimeDefault or Localhost")
    return found


def _baseline_container(path: str, container: JSON) -> list[str]:
    context = container.get("securityContext") or {}
    found = []
    if context.get("privileged"):
        found.append(f"{path}.securityContext.privileged must be false")
    if any(port.get("hostPort") for port in container.get("ports") or []):
        found.append(f"{path}.ports: hostPort must be 0")
    if context.get("procMount") not in (None, "Default"):
        found.append(f"{path}.securityContext.procMount must be Default")
    if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
        found.append(f"{path}.securityContext.appArmorProfile must not be Unconfined")
    added = set((context.get("capabilities") or {}).get("add") or [])
    if added - _BASELINE_CAPABILITIES:
        found.append(f"{path}.securityContext.capabilities.add: {sorted(added)} beyond baseline")
    return found


def _restricted_container(path: str, container: JSON, pod_context: JSON) -> list[str]:
    context = container.get("securityContext") or {}
    capabilities = context.get("capabilities") or {}
    found = []
    if context.get("allowPrivilegeEscalation") is not False:
        found.append(f"{path}.securityContext.allowPrivilegeEscalation must be false")
    if "ALL" not in (capabilities.get("drop") or []):
        found.append(f"{path}.securityContext.capabilities.drop must include ALL")
    if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
        found.append(f"{path}.securityContext.capabilities.add may hold only NET_BIND_SERVICE")
    non_root = context.get("runAsNonRoot")
    if non_root is False or (non_root is None and pod_context.get("runAsNonRoot") is not True):
        found.append(f"{path}.securityContext.runAsNonRoot must be true (or the Pod's)")
    if context.get("runAsUser") == 0:
        found.append(f"{path}.securityContext.runAsUser must not be 0")
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp is None and (pod_context.get("seccompProfile") or {}).get("type") is None:
        found.append(f"{path}.securityContext.seccompProfile.type must be set (or the Pod's)")
    elif seccomp not in (None, "RuntimeDefault", "Localhost"):
        found.append(f"{path}.securityContext.seccompProfile.type must be RuntimeDefault")
    return found
