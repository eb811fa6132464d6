"""Every command hooksvc suggests runs exactly as printed once its placeholders are filled.

The commands are collected from real messages: the hook's answer for a run in each state
that prints a hint (a failed step, a cancelled run, a run waiting for a failed workflow),
`workflows why` for a cluster held in each way, its error for an unknown cluster, the
admin's template form, break glass (the CLI and the fleet's banner) and `make run`'s
admin hint (typed in a terminal). Each is run as a subprocess from the checkout, as printed (only
`<why>` and `<file>` replaced), against the test database, Redis and the real worker; the
test then checks it did what it said (the run moved on, CAPI's hook proceeds).

CAPI's side of the `ok-to-delete` hint (kubernetes-sigs/cluster-api, read at ae7ff04):
`runtime.cluster.x-k8s.io/ok-to-delete` is `OkToDeleteAnnotation` in
api/runtime/v1beta2/extensionconfig_types.go ("used to indicate if a cluster is ready to be
fully deleted"); the topology controller's reconcileDelete
(core/reconcilers/topology/cluster/cluster_controller.go) calls BeforeClusterDelete only
while `hooks.IsOkToDelete(cluster)` is false, a check of the key's presence whatever its
value (internal/hooks/tracking.go), and the Cluster controller's reconcileDelete
(core/reconcilers/cluster/cluster_controller.go) deletes a Cluster with a topology only once
it is set. The test runs the printed `kubectl annotate` against the API emulator and checks
the annotation CAPI looks for is there.
"""

from __future__ import annotations

import datetime
import functools
import html
import io
import os
import pty
import re
import select
import shlex
import shutil
import subprocess  # nosec B404: the commands under test
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from hooksvc.serving import devserver
from tests.support import capi, servers
from tests.support import workflows as wf
from tests.support.kube import KubeEmulator
from tests.support.worker import Worker
from tests.workflows.conftest import Receiver
from tests.workflows.runs import make_run
from tests.workflows.test_worker import call_hook, poll_until, proceeds
from workflows.definitions import spec
from workflows.engine import messages
from workflows.hookpath import answers
from workflows.models import Bypass, Run, RunEvent, WorkflowTemplate
from workflows.operators import actions, bypasses
from workflows.operators.cli import why

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: The placeholders a suggested command may hold, and what the tests put there.
FILLS = {"<why>": "ticket OPS-7: checked by hand"}
#: A command quoted in a message, or one on a line of its own in `workflows why`.
_QUOTED = re.compile(r"`([^`]+)`")
_PREFIXES = (settings.MANAGE_PY, "kubectl ")


def suggested(text: str) -> list[str]:
    """The commands `text` suggests: quoted in backticks, or a line of `workflows why`."""
    found = [c for c in _QUOTED.findall(text) if c.startswith(_PREFIXES)]
    for line in text.splitlines():
        command = line.split(":  ", 1)[-1].strip()
        if command.startswith(_PREFIXES) and command not in found:
            found.append(command)
    return found


def _environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A shell's environment, with the test database and broker where hooksvc looks."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "hooksvc.settings",
        "DATABASE_URL": servers.test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "HOOKSVC_DATA_DIR": str(settings.DATA_DIR),
        "HOOKSVC_STEP_MODULES": ",".join(settings.STEP_MODULES),
        **(extra or {}),
    }


def _filled(command: str, fills: dict[str, str] | None = None) -> list[str]:
    """`command` split as a shell does, each placeholder replaced."""
    for placeholder, value in {**FILLS, **(fills or {})}.items():
        command = command.replace(placeholder, value)
    assert not re.search(r"<[a-z]+>", command), f"an unnamed placeholder is left: {command}"
    return shlex.split(command)


def run_as_printed(
    command: str, fills: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> str:
    """`command` run from the checkout as a shell would, placeholders filled; its stdout."""
    done = subprocess.run(  # nosec B603: the command under test
        _filled(command, fills),
        cwd=servers.ROOT,
        env=_environment(env),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr}"
    return done.stdout


def why_of(cluster: str = "fleet/c1") -> str:
    out = io.StringIO()
    call_command("workflows", "why", cluster, stdout=out)
    return out.getvalue()


def action(name: str) -> RunEvent:
    return RunEvent.objects.get(kind=RunEvent.Kind.ACTION, name=name)


def test_a_failed_steps_retry_hint_runs_and_the_hook_proceeds(
    hook_server: servers.HookServer, worker: Worker, receiver: Receiver
) -> None:
    receiver.status = 503
    wf.template(
        "notify",
        retryAfterSeconds=1,
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {"url": receiver.url},
                "retries": 0,
                "retryForSeconds": 0,
            }
        ],
    )
    answer = poll_until(hook_server, lambda a: "failed at step call" in a.get("message", ""))[-1]
    run = Run.objects.get()
    [retry] = suggested(answer["message"])
    assert retry == (f'{settings.MANAGE_PY} workflows retry {run.pk} --step call --reason "<why>"')
    receiver.status = 200
    out = run_as_printed(retry)
    assert out.strip() == f"run {run.pk} step call: retry recorded (run is running)"
    poll_until(hook_server, proceeds, timeout=20)
    event = action("retry")
    assert (event.reason, event.step_name) == (FILLS["<why>"], "call")
    assert event.actor.startswith("cli:")


def test_a_cancelled_runs_hints_retry_it_and_release_it(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template("gate", retryAfterSeconds=1, steps=[{"name": "approve", "type": "approval"}])
    poll_until(hook_server, lambda a: "waiting for approval" in a.get("message", ""))
    run = Run.objects.get()
    actions.run_cancel(run_id=run.pk, actor="ops:ann", reason="wrong window")
    retry, release = suggested(call_hook(hook_server)["message"])
    assert retry == f'{settings.MANAGE_PY} workflows retry {run.pk} --reason "<why>"'
    assert release == f'{settings.MANAGE_PY} workflows release {run.pk} --reason "<why>"'

    run_as_printed(retry)
    poll_until(hook_server, lambda a: "waiting for approval" in a.get("message", ""))
    assert action("retry").reason == FILLS["<why>"]

    actions.run_cancel(run_id=run.pk, actor="ops:ann", reason="wrong window again")
    assert call_hook(hook_server)["retryAfterSeconds"] == 1
    run_as_printed(release)
    assert proceeds(call_hook(hook_server))
    run.refresh_from_db()
    assert (run.state, run.released) == (Run.State.CANCELLED, True)


def test_a_hint_pasted_with_its_placeholder_is_refused_and_records_nothing() -> None:
    """Run as printed without replacing `<why>`: exit 1, the message says the placeholder is
    not a reason (workflows.operators.reasons), and the run is as it was."""
    run = make_run(state=Run.State.FAILED, steps=(("call", "http", "failed"),))
    message = messages.run_failed_at_step(run.pk, run.template_name, "call", "HTTP 503")
    (retry,) = suggested(message)
    done = subprocess.run(  # nosec B603: the command under test
        shlex.split(retry),
        cwd=servers.ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "the reason '<why>' is a hint's placeholder, not a reason" in done.stderr
    assert not RunEvent.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert run.state == Run.State.FAILED


def test_waiting_for_a_failed_workflow_names_its_run_and_release_lets_both_go(
    hook_server: servers.HookServer, worker: Worker, receiver: Receiver
) -> None:
    receiver.status = 500
    wf.template(
        "first",
        retryAfterSeconds=1,
        steps=[
            {
                "name": "call",
                "type": "http",
                "with": {"url": receiver.url},
                "retries": 0,
                "retryForSeconds": 0,
            }
        ],
    )
    wf.template("second", retryAfterSeconds=1, waitFor=["first"])
    poll_until(hook_server, lambda a: "failed at step call" in a.get("message", ""))
    first = Run.objects.get(template_name="first")
    second = Run.objects.get(template_name="second")
    assert first.state == Run.State.FAILED

    def waiting() -> bool:
        # Not "to finish" (written while the first ran): the engine has seen it fail.
        second.refresh_from_db()
        return "is waiting for workflow first (run" in second.message

    poll_until(hook_server, lambda _: waiting())
    assert second.message.startswith(
        f"workflow second is waiting for workflow first (run {first.pk}), which failed; "
    )
    retry, release = suggested(second.message)
    assert retry == f'{settings.MANAGE_PY} workflows retry {first.pk} --reason "<why>"'
    run_as_printed(release)
    poll_until(hook_server, proceeds, timeout=20)
    second.refresh_from_db()
    assert second.state == Run.State.SUCCEEDED


def test_why_suggests_approve_and_release_and_each_runs(
    hook_server: servers.HookServer, worker: Worker
) -> None:
    wf.template(
        "gate",
        retryAfterSeconds=1,
        steps=[
            {"name": "approve", "type": "approval", "with": {"message": "CAB-4711 approved?"}},
            {"name": "after", "type": "noop", "dependsOn": ["approve"]},
        ],
    )
    wf.template("other-gate", retryAfterSeconds=1, steps=[{"name": "ok", "type": "approval"}])
    poll_until(hook_server, lambda a: "waiting for approval" in a.get("message", ""))
    gate = Run.objects.get(template_name="gate")
    other = Run.objects.get(template_name="other-gate")
    text = why_of()
    assert "CAB-4711 approved?" in text
    commands = suggested(text)
    approve = f'{settings.MANAGE_PY} workflows approve {gate.pk} --step approve --reason "<why>"'
    release = f'{settings.MANAGE_PY} workflows release {other.pk} --reason "<why>"'
    assert approve in commands
    assert release in commands
    run_as_printed(approve)
    run_as_printed(release)
    poll_until(hook_server, proceeds, timeout=20)
    gate.refresh_from_db()
    assert gate.state == Run.State.SUCCEEDED
    assert gate.steps.get(name="approve").output["reason"] == FILLS["<why>"]


def test_why_for_a_held_deletion_suggests_ok_to_delete_and_it_sets_capis_annotation(
    kube: KubeEmulator, kubeconfig_path: Path
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (docs/deploy.md)")
    wf.template(
        "pre-delete", hook="BeforeClusterDelete", steps=[{"name": "ok", "type": "approval"}]
    )
    cluster = capi.cluster_v1beta2(name="c1", uid="uid-c1")
    answer = answers.answer(wf.call("BeforeClusterDelete", cluster=cluster), handler_name="test")
    assert answer.retry_after > 0
    kube.put_object(
        {
            "apiVersion": cluster["apiVersion"],
            "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "fleet"},
            "spec": cluster["spec"],
        }
    )
    text = why_of()
    assert "BeforeClusterDelete: 1 run; CAPI waits" in text
    commands = [c for c in suggested(text) if c.startswith("kubectl ")]
    assert commands == [
        f"kubectl annotate clusters.cluster.x-k8s.io c1 --namespace fleet {why.OK_TO_DELETE}="
    ]
    run_as_printed(commands[0], env={"KUBECONFIG": str(kubeconfig_path)})
    found = kube.get_object("cluster.x-k8s.io", "v1beta2", "clusters", "fleet", "c1")
    assert found is not None
    assert found["metadata"]["annotations"] == {"runtime.cluster.x-k8s.io/ok-to-delete": ""}


def test_why_names_the_bypass_that_answers_for_the_cluster_and_its_end_hint_runs() -> None:
    """`workflows why` says when break glass answers a held hook for the cluster (the hook
    path's rule: hook, namespace, label selector), and not for a bypass that does not
    cover it; its end hint runs as printed, after which `why` no longer names it."""
    wf.template(
        "pre-delete", hook="BeforeClusterDelete", steps=[{"name": "ok", "type": "approval"}]
    )
    call = wf.call(
        "BeforeClusterDelete", cluster=capi.cluster_v1beta2(name="c1", labels={"env": "prod"})
    )
    assert answers.answer(call, handler_name="test").retry_after > 0
    bypass_open = functools.partial(
        bypasses.bypass_open,
        hook="BeforeClusterDelete",
        duration=datetime.timedelta(hours=1),
        actor="ops",
    )
    bypass_open(selector="env=dev", reason="dev clusters only")
    bypass_open(namespace="elsewhere", reason="another namespace")
    covering = bypass_open(selector="env=prod", reason="restore drill")
    # The hook path answers from the same bypass.
    answered = answers.answer(call, handler_name="test")
    assert answered.retry_after == 0
    assert answered.message.startswith(f"hooksvc bypass {covering.pk} by ops "), answered
    text = why_of()
    assert f"bypass {covering.pk} by ops until" in text
    assert "dev clusters only" not in text and "another namespace" not in text
    [end] = [c for c in suggested(text) if "bypass --end" in c]
    assert end == f'{settings.MANAGE_PY} workflows bypass --end {covering.pk} --reason "<why>"'
    run_as_printed(end)
    assert f"bypass {covering.pk}" not in why_of()
    assert "BeforeClusterDelete: 1 run; CAPI waits" in why_of()


def test_the_unknown_cluster_error_suggests_a_list_that_runs() -> None:
    with pytest.raises(CommandError) as caught:
        why_of("fleet/nowhere")
    [command] = suggested(str(caught.value))
    assert command == f"{settings.MANAGE_PY} workflows list"
    assert run_as_printed(command).strip() == "no runs"


def test_the_template_forms_hint_applies_several_documents(
    admin_client: Client, tmp_path: Path
) -> None:
    two = "\n---\n".join(
        f"apiVersion: {spec.API_VERSION}\nkind: WorkflowTemplate\nmetadata: {{name: {n}}}\n"
        "spec:\n  hook: BeforeClusterUpgrade\n  steps: [{name: only, type: noop}]\n"
        for n in ("one", "two")
    )
    url = reverse("admin:workflows_workflowtemplate_add")
    page = html.unescape(admin_client.post(url, {"document": two}).content.decode())
    [command] = suggested(page)
    assert command == messages.command("apply_workflows -f <file>")
    path = tmp_path / "templates.yaml"
    path.write_text(two)
    run_as_printed(command, fills={"<file>": str(path)})
    assert sorted(WorkflowTemplate.objects.values_list("name", flat=True)) == ["one", "two"]


def test_a_long_failure_reason_gives_way_to_the_hint() -> None:
    message = messages.run_failed_at_step(7, "notify", "call", "x" * 900)
    assert len(message) <= messages.MAX_LENGTH
    assert message.endswith(
        f'...; retry it with `{settings.MANAGE_PY} workflows retry 7 --step call --reason "<why>"`'
    )


def test_break_glass_end_hints_in_the_cli_and_on_the_fleet_end_it(admin_client: Client) -> None:
    out = io.StringIO()
    call_command(
        "workflows", "bypass", "--hook", "BeforeClusterDelete", "--for", "1h",
        "--reason", "restore drill", stdout=out,
    )  # fmt: skip
    bypass = Bypass.objects.get()
    [from_cli] = suggested(out.getvalue())
    page = html.unescape(admin_client.get(reverse("admin:index")).content.decode())
    from_banner = re.search(r"end it early: <code>(.+?)</code>", page)
    assert from_banner is not None, page
    assert (
        from_banner.group(1)
        == from_cli
        == (f'{settings.MANAGE_PY} workflows bypass --end {bypass.pk} --reason "<why>"')
    )
    run_as_printed(from_cli)
    bypass.refresh_from_db()
    assert bypass.ended_at is not None
    assert bypass.end_reason == FILLS["<why>"]


def run_in_a_terminal(command: str, answers: list[tuple[str, str]]) -> str:
    """`command` run as printed in a terminal of its own (a pseudo-terminal that is its
    controlling one, as in a shell), typing each answer once its prompt shows; what it
    printed. A prompt that never shows fails the test rather than hang it."""
    argv = _filled(command)
    pid, terminal = pty.fork()
    if pid == 0:  # the child: exec, or leave without running the parent's code
        try:
            os.chdir(servers.ROOT)
            os.execve(argv[0], argv, _environment())  # noqa: S606  # nosec B606
        finally:
            os._exit(127)
    printed, answered = "", 0
    try:
        while True:
            ready, _, _ = select.select([terminal], [], [], 60)
            assert ready, f"no prompt {answers[0][0]!r} after: {printed}"
            try:
                chunk = os.read(terminal, 4096).decode(errors="replace")
            except OSError:  # EIO: the command ended and closed its terminal
                break
            if not chunk:
                break
            printed += chunk
            while answers and answers[0][0] in printed[answered:]:
                prompt, typed = answers.pop(0)
                answered = printed.index(prompt, answered) + len(prompt)
                os.write(terminal, typed.encode() + b"\n")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, f"{command!r} failed: {printed}"
    assert not answers, f"never asked {answers}: {printed}"
    return printed


def test_make_runs_admin_hint_creates_a_superuser_in_a_terminal() -> None:
    """`make run` without an admin says how to make one; that command, typed in a terminal,
    makes one (it asks for the password on the terminal itself, as getpass does)."""
    [command, *_] = suggested(devserver.ensure_admin({}))
    assert command == ".venv/bin/python manage.py createsuperuser"
    password = "correct horse battery staple 42"
    printed = run_in_a_terminal(
        command,
        [
            ("Username", "ops-admin"),
            ("Email address:", "ops@example.com"),
            ("Password:", password),
            ("Password (again):", password),
        ],
    )
    assert "Superuser created successfully." in printed
    user = get_user_model().objects.get(username="ops-admin")
    assert user.is_superuser
    # manage.py hashes as hooksvc does; the tests' settings keep only a fast hasher.
    assert PBKDF2PasswordHasher().verify(password, user.password)
