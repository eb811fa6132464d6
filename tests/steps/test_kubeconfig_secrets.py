"""A workload kubeconfig's credentials never leave: not in logs, messages, outputs or the admin.

The run uses a `<cluster>-kubeconfig` Secret that carries a bearer token (the emulator
accepts any token), once usable and once broken; then every place an operator or CAPI can
read is scanned for the token.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from tests.steps.conftest import CLUSTER, CLUSTER_UID, NS
from tests.support import capi
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from workflows.engine import scheduling
from workflows.hookpath import runs as hook_runs
from workflows.models import Run, RunEvent, StepRun

pytestmark = pytest.mark.django_db

TOKEN = "kube-token-7f3c9a1e-do-not-leak"


def put_secret(kube: KubeEmulator, value: bytes) -> None:
    kube.put_object(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{CLUSTER}-kubeconfig", "namespace": NS},
            "data": {"value": base64.b64encode(value).decode()},
        }
    )


def run_job(kube: KubeEmulator) -> Run:
    template = wf.template(
        "job",
        steps=[
            {
                "name": "job",
                "type": "k8s_job",
                "with": {"image": "busybox:1.36", "namespace": NS},
                "retries": 0,
            }
        ],
    )
    cluster = capi.cluster_v1beta2(name=CLUSTER, namespace=NS, uid=CLUSTER_UID)
    [run] = hook_runs.runs_ensure(templates=[template], call=wf.call(cluster=cluster))
    scheduling.advance(run.pk)
    run.refresh_from_db()
    return run


def scan(run: Run, admin_client: Client, caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    places: dict[str, Any] = {
        "logs": caplog.text,
        "run": [run.message, run.context, run.spec],
        "steps": list(StepRun.objects.filter(run=run).values("message", "output", "memo")),
        "events": list(RunEvent.objects.filter(run=run).values("message", "reason")),
        "admin": admin_client.get(
            reverse("admin:workflows_run_change", args=[run.pk])
        ).content.decode(),
    }
    for where, content in places.items():
        text = str(content)
        for secret in secrets:
            assert secret not in text, f"a credential leaked into {where}"


@pytest.mark.parametrize("usable", [True, False], ids=["usable", "broken"])
def test_a_kubeconfigs_token_appears_nowhere(
    kube: KubeEmulator, admin_client: Client, caplog: pytest.LogCaptureFixture, usable: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    config = kube.kubeconfig()
    config["users"][0]["user"] = {"token": TOKEN}
    text = yaml.safe_dump(config)
    put_secret(kube, text.encode() if usable else (text + "\n  : [unclosed").encode())
    run = run_job(kube)
    step = StepRun.objects.get(run=run)
    if usable:
        assert step.state == "waiting", "the step reached the workload cluster with the token"
    else:
        assert (
            step.message
            == f"kubeconfig Secret {NS}/{CLUSTER}-kubeconfig is not a usable kubeconfig"
        )
    scan(run, admin_client, caplog, TOKEN)
