"""`rollout.status`: the rollout of one object, read as `kubectl rollout status` reads it.

kubernetes staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go, with the
API server's defaults (pkg/apis/apps/v1/defaults.go). The statuses here are inputs of a
pure function; test_addons.py has the emulator's controllers write them.
"""

from __future__ import annotations

from typing import Any

import pytest

from workflows.steps import rollout


def workload(kind: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"generation": 2}, "spec": spec, "status": status}


SEEN = {"observedGeneration": 2}


@pytest.mark.parametrize(
    ("kind", "spec", "status", "expected"),
    [
        ("Deployment", {}, {"observedGeneration": 1}, rollout.Rollout(
            False, "waiting for the spec update to be observed")),
        ("Deployment", {}, {**SEEN, "updatedReplicas": 1, "replicas": 1,
                            "availableReplicas": 1}, rollout.Rollout(True)),
        ("Deployment", {"replicas": 3}, {**SEEN, "updatedReplicas": 3, "replicas": 4},
         rollout.Rollout(False, "1 old replicas are pending termination")),
        ("Deployment", {"replicas": 3}, {**SEEN, "updatedReplicas": 3, "replicas": 3,
                                         "availableReplicas": 2},
         rollout.Rollout(False, "2 of 3 updated replicas are available")),
        ("Deployment", {}, {**SEEN, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]},
         rollout.Rollout(False, failed="ProgressDeadlineExceeded")),
        ("StatefulSet", {"replicas": 3}, {"readyReplicas": 3},
         rollout.Rollout(False, "waiting for the spec update to be observed")),
        ("StatefulSet", {"replicas": 3}, {**SEEN, "readyReplicas": 2},
         rollout.Rollout(False, "1 pod is not ready")),
        ("StatefulSet", {"replicas": 3, "updateStrategy": {
            "type": "RollingUpdate", "rollingUpdate": {"partition": 1}}},
         {**SEEN, "readyReplicas": 3, "updatedReplicas": 2}, rollout.Rollout(True)),
        ("StatefulSet", {"replicas": 3}, {**SEEN, "readyReplicas": 3, "updatedReplicas": 2},
         rollout.Rollout(False, "2 out of 3 new pods have been updated")),
        ("StatefulSet", {"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}},
         {**SEEN, "readyReplicas": 3, "updateRevision": "b", "currentRevision": "a"},
         rollout.Rollout(False, "waiting for the rolling update to reach every pod")),
        ("StatefulSet", {"updateStrategy": {"type": "OnDelete"}}, {},
         rollout.Rollout(True, skipped="updateStrategy OnDelete")),
        ("DaemonSet", {}, {**SEEN, "desiredNumberScheduled": 2, "updatedNumberScheduled": 1},
         rollout.Rollout(False, "1 out of 2 new pods have been updated")),
        ("DaemonSet", {}, {**SEEN, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
                           "numberAvailable": 2}, rollout.Rollout(True)),
        ("DaemonSet", {"updateStrategy": {"type": "OnDelete"}}, {},
         rollout.Rollout(True, skipped="updateStrategy OnDelete")),
    ],
)  # fmt: skip
def test_rollout_status_reads_spec_and_status_as_kubectl_does(
    kind: str, spec: dict[str, Any], status: dict[str, Any], expected: rollout.Rollout
) -> None:
    assert rollout.status(workload(kind, spec, status)) == expected
