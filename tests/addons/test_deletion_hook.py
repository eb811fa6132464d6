"""BeforeClusterDelete through the engine in-process (no worker): who holds, who does not.

Covers: LeavePolicies starts nothing, RemovePolicies answers Success at once though its
run exists, EnforceRemovePolicies holds, and a mix of the three on one cluster; only
profiles installed on the cluster remove anything; a failed enforced removal holds with a
deterministic message naming the profile and the object, until retried or released; a
waitFor cycle among the templates at deletion time answers a Failure naming it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hooksvc.contract import catalog
from tests.addons.profiles import NAMESPACE, apply, profile
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from workflows.engine import scheduling
from workflows.hookpath import answers
from workflows.models import Run, WorkflowTemplate
from workflows.operators import actions

pytestmark = pytest.mark.django_db
CONFIG_MAPS = ("", "v1", "configmaps")


def answer(hook: str) -> answers.Answer:
    return answers.answer(wf.call(hook), handler_name="test")


def settle(hook: str) -> None:
    """Advance this hook's runs in-process until none moves (the worker's job, inline)."""
    for _ in range(10):
        for run in Run.objects.filter(hook=hook, state__in=Run.ACTIVE).order_by("pk"):
            scheduling.advance(run.pk)
    assert not Run.objects.filter(hook=hook, state="running").exists()


def install() -> None:
    assert answer("AfterControlPlaneInitialized") == answers.PROCEED
    settle("AfterControlPlaneInitialized")
    assert set(
        Run.objects.filter(hook="AfterControlPlaneInitialized").values_list("state", flat=True)
    ) == {"succeeded"}


def present(kube: KubeEmulator) -> list[str]:
    return [o["metadata"]["name"] for o in kube.list_objects(*CONFIG_MAPS, NAMESPACE)]


def removal_runs() -> dict[str, str]:
    return dict(
        Run.objects.filter(hook="BeforeClusterDelete").values_list("template_name", "state")
    )


def test_leave_policies_starts_no_removal(tmp_path: Path) -> None:
    apply(tmp_path, profile("kept", behaviour="LeavePolicies"))
    assert answer("BeforeClusterDelete") == answers.PROCEED
    assert removal_runs() == {}


def test_remove_policies_answers_success_at_once_yet_starts_its_removal(tmp_path: Path) -> None:
    apply(tmp_path, profile("best-effort"))
    assert answer("BeforeClusterDelete").retry_after == 0
    assert removal_runs() == {"addon-remove-best-effort": "pending"}


def test_enforce_remove_policies_holds_the_deletion(tmp_path: Path) -> None:
    apply(tmp_path, profile("strict", behaviour="EnforceRemovePolicies"))
    assert answer("BeforeClusterDelete") == answers.Answer(
        catalog.Status.SUCCESS, "workflow addon-remove-strict is starting", 1
    )


def test_a_mix_on_one_cluster_removes_in_order_and_holds_only_for_the_enforced(
    tmp_path: Path, clusters: KubeEmulator
) -> None:
    # enforce depends on remove, which depends on leave.
    apply(
        tmp_path,
        profile("leave", behaviour="LeavePolicies"),
        profile("remove", depends_on=["leave"]),
        profile("enforce", behaviour="EnforceRemovePolicies", depends_on=["remove"]),
    )
    install()
    assert present(clusters) == ["enforce", "leave", "remove"]
    held = answer("BeforeClusterDelete")
    assert (held.status, held.retry_after) == (catalog.Status.SUCCESS, 1)
    assert removal_runs() == {"addon-remove-enforce": "pending", "addon-remove-remove": "pending"}
    # The removal of `remove` waits for `enforce`, which depends on it.
    scheduling.advance(Run.objects.get(template_name="addon-remove-remove").pk)
    assert Run.objects.get(template_name="addon-remove-remove").message == (
        "workflow addon-remove-remove is waiting for workflow addon-remove-enforce to finish"
    )
    settle("BeforeClusterDelete")
    assert removal_runs() == {
        "addon-remove-enforce": "succeeded",
        "addon-remove-remove": "succeeded",
    }
    assert present(clusters) == ["leave"]
    assert answer("BeforeClusterDelete") == answers.PROCEED


def test_a_profile_never_installed_on_the_cluster_removes_nothing(
    tmp_path: Path, clusters: KubeEmulator
) -> None:
    apply(tmp_path, profile("late", behaviour="EnforceRemovePolicies"))
    clusters.put_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "late", "namespace": NAMESPACE},
        }
    )
    answer("BeforeClusterDelete")
    settle("BeforeClusterDelete")
    run = Run.objects.get(template_name="addon-remove-late")
    assert run.state == "succeeded"
    assert run.steps.get().output == {"removed": [], "result": "nothing installed"}
    assert present(clusters) == ["late"]


def test_a_failed_enforced_removal_holds_naming_profile_and_object_until_retried(
    tmp_path: Path, clusters: KubeEmulator
) -> None:
    apply(tmp_path, profile("strict", behaviour="EnforceRemovePolicies"))
    install()
    answer("BeforeClusterDelete")
    clusters.fail_next("DELETE", r"/configmaps/strict$", 403)
    settle("BeforeClusterDelete")
    run = Run.objects.get(template_name="addon-remove-strict")
    message = (
        "workflow addon-remove-strict failed at step remove: ConfigMap addons/strict: "
        "API server answered 403 Forbidden; retry it with "
        f'`.venv/bin/python manage.py workflows retry {run.pk} --step remove --reason "<why>"`'
    )
    assert answer("BeforeClusterDelete") == answers.Answer(catalog.Status.SUCCESS, message, 1)
    assert answer("BeforeClusterDelete") == answers.Answer(catalog.Status.SUCCESS, message, 1)
    assert present(clusters) == ["strict"]
    actions.run_retry(run_id=run.pk, actor="cli:ops", reason="RBAC fixed")
    settle("BeforeClusterDelete")
    assert present(clusters) == []
    assert answer("BeforeClusterDelete") == answers.PROCEED


def test_a_failed_enforced_removal_can_be_released(tmp_path: Path, clusters: KubeEmulator) -> None:
    apply(tmp_path, profile("strict", behaviour="EnforceRemovePolicies"))
    install()
    answer("BeforeClusterDelete")
    clusters.fail_next("DELETE", r"/configmaps/strict$", 403)
    settle("BeforeClusterDelete")
    run = Run.objects.get(template_name="addon-remove-strict")
    assert run.state == "failed"
    actions.run_release(run_id=run.pk, actor="admin:ops", reason="left for later")
    assert answer("BeforeClusterDelete") == answers.PROCEED
    assert run.events.filter(kind="action", name="release", actor="admin:ops").exists()


def test_a_wait_cycle_at_deletion_time_answers_a_failure_naming_it(tmp_path: Path) -> None:
    apply(
        tmp_path,
        profile("a", behaviour="EnforceRemovePolicies", depends_on=["b"]),
        profile("b", behaviour="EnforceRemovePolicies"),
    )
    # Someone edits the generated rows by hand: b's removal now also waits for a's.
    template = WorkflowTemplate.objects.get(name="addon-remove-a")
    template.spec = {**template.spec, "waitFor": ["addon-remove-b"]}
    template.save()
    expected = answers.Answer(
        catalog.Status.FAILURE,
        "workflows wait for each other in a cycle: addon-remove-a -> addon-remove-b -> "
        "addon-remove-a; fix their waitFor",
    )
    assert answer("BeforeClusterDelete") == expected
    assert answer("BeforeClusterDelete") == expected
    assert removal_runs() == {}


def test_an_enforced_removal_waits_past_its_dependents_failure_until_it_is_retried(
    tmp_path: Path, clusters: KubeEmulator
) -> None:
    apply(
        tmp_path,
        profile("base", behaviour="EnforceRemovePolicies"),
        profile("app", behaviour="EnforceRemovePolicies", depends_on=["base"]),
    )
    install()
    answer("BeforeClusterDelete")
    clusters.fail_next("DELETE", r"/configmaps/app$", 403)
    settle("BeforeClusterDelete")
    assert removal_runs() == {"addon-remove-app": "failed", "addon-remove-base": "pending"}
    failed = Run.objects.get(template_name="addon-remove-app")
    assert Run.objects.get(template_name="addon-remove-base").message == (
        f"workflow addon-remove-base is waiting for workflow addon-remove-app (run {failed.pk}),"
        " which failed; retry it with "
        f'`.venv/bin/python manage.py workflows retry {failed.pk} --reason "<why>"` or '
        f"release it with `.venv/bin/python manage.py workflows release {failed.pk} "
        '--reason "<why>"`'
    )
    assert present(clusters) == ["app", "base"], "base stays while app, which uses it, stays"
    actions.run_retry(run_id=failed.pk, actor="cli:ops", reason="RBAC fixed")
    settle("BeforeClusterDelete")
    assert removal_runs() == {"addon-remove-app": "succeeded", "addon-remove-base": "succeeded"}
    assert present(clusters) == []


def test_a_best_effort_removal_goes_on_past_its_dependents_failure(
    tmp_path: Path, clusters: KubeEmulator
) -> None:
    apply(tmp_path, profile("base"), profile("app", depends_on=["base"]))
    install()
    assert answer("BeforeClusterDelete") == answers.PROCEED
    clusters.fail_next("DELETE", r"/configmaps/app$", 403)
    settle("BeforeClusterDelete")
    assert removal_runs() == {"addon-remove-app": "failed", "addon-remove-base": "succeeded"}
    assert present(clusters) == ["app"]
