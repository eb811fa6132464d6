"""`manage.py workflows why NAMESPACE/NAME`: what holds each hook of a cluster, and the ways out.

Covers: a run waiting for approval (the approval's own text, approve and release), a
failed and a cancelled run (the step's error, retry and release), a running and a pending
run (release), runs grouped by hook and moment, CAPI's last call, a deletion held by
BeforeClusterDelete (CAPI's `ok-to-delete` annotation, only there), runs that hold nothing
listed apart with why, a step that keeps retrying (its last error and attempt count), a run
waiting behind a failed workflow (that run's retry and release), a cluster nothing holds,
an unknown cluster and a malformed name (exit 1). That each suggested command runs
as printed is tests/workflows/test_hints.py's; CAPI's side of the annotation is cited there.
"""

from __future__ import annotations

import datetime
import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.workflows.runs import make_run
from workflows.models import HookCall, KnownCluster, Run, StepRun

pytestmark = pytest.mark.django_db

S = StepRun.State
CLI = settings.MANAGE_PY
OK_TO_DELETE = "runtime.cluster.x-k8s.io/ok-to-delete"


def why(cluster: str = "prod/c1") -> str:
    out = io.StringIO()
    call_command("workflows", "why", cluster, stdout=out)
    return out.getvalue()


def test_a_run_waiting_for_approval_shows_its_question_and_approve_and_release() -> None:
    run = make_run(steps=(("backup", "noop", S.SUCCEEDED), ("approve", "approval", S.WAITING)))
    run.steps.filter(name="approve").update(params={"message": "Is CAB-4711 approved?"})
    Run.objects.filter(pk=run.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=12, seconds=20)
    )
    run.refresh_from_db()
    text = why()
    assert text.splitlines()[0] == "cluster prod/c1: held by 1 run"
    assert (
        "BeforeClusterUpgrade v1.33.0: 1 run; CAPI waits until every run below succeeds or is "
        "released" in text
    )
    assert (
        f"run {run.pk} (backup-before-upgrade): waiting for approval, held for 12 min, since "
        f"{run.created_at.strftime('%Y-%m-%d %H:%M:%S')} UTC" in text
    )
    assert "at step approve (approval, waiting)" in text
    assert "why: Is CAB-4711 approved?" in text
    assert "message: workflow backup-before-upgrade is running" in text
    assert f'approve it:  {CLI} workflows approve {run.pk} --step approve --reason "<why>"' in text
    assert f'release it:  {CLI} workflows release {run.pk} --reason "<why>"' in text
    assert "retry it" not in text
    assert OK_TO_DELETE not in text


@pytest.mark.parametrize("state", [Run.State.FAILED, Run.State.CANCELLED])
def test_a_failed_or_cancelled_run_shows_the_error_and_retry_and_release(state: str) -> None:
    step_state = S.FAILED if state == Run.State.FAILED else S.CANCELLED
    run = make_run(state=state, steps=(("snapshot", "backup_pvs", step_state),))
    run.steps.update(message="VolumeSnapshot fleet/data: not ready after 600 s")
    text = why()
    assert f"run {run.pk} (backup-before-upgrade): {state}, held for 0 s, since" in text
    assert f"at step snapshot (backup_pvs, {step_state})" in text
    if state == Run.State.FAILED:
        assert "why: VolumeSnapshot fleet/data: not ready after 600 s" in text
    assert f'retry it:    {CLI} workflows retry {run.pk} --reason "<why>"' in text
    assert f'release it:  {CLI} workflows release {run.pk} --reason "<why>"' in text
    assert "approve it" not in text


@pytest.mark.parametrize("state", [Run.State.RUNNING, Run.State.PENDING])
def test_a_running_or_pending_run_can_be_released(state: str) -> None:
    run = make_run(state=state, steps=(("snapshot", "wait", S.WAITING),))
    text = why()
    assert f"run {run.pk} (backup-before-upgrade): {state}, held for 0 s, since" in text
    ways = text[text.index("ways out:") :].splitlines()[1:]
    assert [w.strip() for w in ways] == [
        f'release it:  {CLI} workflows release {run.pk} --reason "<why>"'
    ]


def test_runs_are_grouped_by_hook_and_moment_with_capis_last_call() -> None:
    make_run(template="a", moment="v1.33.0")
    make_run(template="b", moment="v1.33.0", state=Run.State.FAILED)
    make_run(template="c", hook="BeforeClusterCreate", moment="")
    call = HookCall.objects.create(
        hook="BeforeClusterUpgrade",
        handler="before-cluster-upgrade",
        cluster_key="uid-prod-c1",
        cluster_namespace="prod",
        cluster_name="c1",
        moment="v1.33.0",
        status="Success",
        retry_after=30,
        message="workflow a is running",
        latency_ms=3.0,
    )
    text = why()
    assert text.splitlines()[0] == "cluster prod/c1: held by 3 runs"
    upgrade = text.index("BeforeClusterUpgrade v1.33.0: 2 runs;")
    create = text.index("BeforeClusterCreate: 1 run;")
    assert upgrade < create, "groups in the order their first run was made"
    assert (
        f"CAPI last asked at {call.at.isoformat(timespec='seconds')}: answered Success, "
        "retry after 30 s" in text[upgrade:create]
    )
    assert "(a)" in text[upgrade:create]
    assert "(b)" in text[upgrade:create]
    assert "(c)" in text[create:]


def test_a_deletion_held_by_before_cluster_delete_offers_capis_ok_to_delete() -> None:
    make_run(template="pre-delete", hook="BeforeClusterDelete", moment="", state="failed")
    text = why()
    assert "BeforeClusterDelete: 1 run; CAPI waits" in text
    assert f"kubectl annotate clusters.cluster.x-k8s.io c1 --namespace prod {OK_TO_DELETE}=" in (
        text
    )
    assert "CAPI calls BeforeClusterDelete no more and deletes it" in text


def test_runs_that_hold_nothing_are_listed_apart_with_why_not() -> None:
    """A hook CAPI does not wait for, `holdsLifecycle: false`, a deadline passed under
    `onDeadline: Proceed`: the same rule as the hook's answer (workflows.operators.holding)."""
    held = make_run(template="gate")
    notify = make_run(
        template="notify", hook="AfterControlPlaneInitialized", moment="", state="failed"
    )
    quiet = make_run(template="quiet", moment="v1.34.0")
    Run.objects.filter(pk=quiet.pk).update(spec={**quiet.spec, "holdsLifecycle": False})
    late = make_run(template="late", moment="v1.35.0")
    Run.objects.filter(pk=late.pk).update(
        spec={**late.spec, "onDeadline": "Proceed"},
        deadline_at=timezone.now() - datetime.timedelta(minutes=1),
    )
    text = why()
    assert text.splitlines()[0] == "cluster prod/c1: held by 1 run"
    assert f"run {held.pk} (gate): running, held for" in text
    apart = text[text.index("3 runs of the cluster that hold nothing:") :].splitlines()[1:]
    assert apart == [
        f"  run {notify.pk} (notify, AfterControlPlaneInitialized): failed; CAPI does not wait "
        "for AfterControlPlaneInitialized",
        f"  run {quiet.pk} (quiet, BeforeClusterUpgrade v1.34.0): running; holdsLifecycle: false "
        "(it runs in the background)",
        f"  run {late.pk} (late, BeforeClusterUpgrade v1.35.0): running; proceeded past its "
        "deadline",
    ]


def test_a_step_that_keeps_retrying_says_its_last_error_and_attempt_count() -> None:
    run = make_run(steps=(("addons", "addon_install", S.READY),))
    due = timezone.now() + datetime.timedelta(seconds=40)
    run.steps.update(failures=2, retries=5, message="helm: context deadline exceeded", due_at=due)
    Run.objects.filter(pk=run.pk).update(
        message="workflow backup-before-upgrade is running step addons"
    )
    text = why()
    assert (
        "why: retrying step addons: attempt 2 of 6 failed: helm: context deadline exceeded; "
        f"next attempt at {due.strftime('%Y-%m-%d %H:%M:%S')} UTC" in text
    )
    assert "message: workflow backup-before-upgrade is running step addons" in text


def test_a_run_behind_a_failed_workflow_names_it_and_the_ways_to_move_it() -> None:
    first = make_run(template="install-cni", state=Run.State.FAILED)
    second = make_run(template="install-addons", state=Run.State.PENDING)
    Run.objects.filter(pk=second.pk).update(
        spec={**second.spec, "waitFor": ["install-cni"]},
        message=f"workflow install-addons is waiting for workflow install-cni (run {first.pk}), "
        "which failed",
    )
    text = why()
    block = text[text.index(f"run {second.pk} (install-addons)") :]
    ways = [w.strip() for w in block[block.index("ways out:") :].splitlines()[1:4]]
    assert ways == [
        f'retry what it waits for:    {CLI} workflows retry {first.pk} --reason "<why>"',
        f'release what it waits for:  {CLI} workflows release {first.pk} --reason "<why>"',
        f'release it:  {CLI} workflows release {second.pk} --reason "<why>"',
    ]


def test_released_and_succeeded_runs_hold_nothing() -> None:
    make_run(template="a", state=Run.State.SUCCEEDED)
    released = make_run(template="b", state=Run.State.FAILED)
    Run.objects.filter(pk=released.pk).update(released=True)
    assert why().strip() == "nothing holds cluster prod/c1: none of its 2 runs holds a hook"


def test_a_cluster_the_watcher_knows_without_runs_is_held_by_nothing() -> None:
    KnownCluster.objects.create(key="uid-1", namespace="prod", name="c9", cluster={})
    assert why("prod/c9").strip() == "nothing holds cluster prod/c9: it has no runs"


def test_an_unknown_cluster_is_an_error() -> None:
    make_run(cluster="prod/c1")
    with pytest.raises(CommandError) as caught:
        why("prod/c2")
    assert caught.value.returncode == 1
    assert str(caught.value) == (
        "hooksvc knows no cluster prod/c2: no run, hook call or watcher record names it "
        f"(`{CLI} workflows list` shows the clusters with runs)"
    )


@pytest.mark.parametrize("written", ["c1", "prod/", "/c1", "prod/c1/x"])
def test_a_cluster_not_written_as_namespace_slash_name_is_an_error(written: str) -> None:
    with pytest.raises(CommandError, match="write it as NAMESPACE/NAME"):
        why(written)
