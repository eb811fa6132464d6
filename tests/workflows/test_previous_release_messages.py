"""Messages two releases understand: what the previous release sends, this worker takes.

During a rollout the previous release's web, workers and beat send messages that this
release's workers receive, and the other way round (docs/deploy.md, "During a rollout").
A Celery worker rejects a message whose task name it has not registered (celery 5.7,
celery/worker/consumer/consumer.py `on_unknown_task`: "Received unregistered task", the
message rejected, so gone), and a task called with arguments its function does not take
raises TypeError when the worker calls it (celery/app/trace.py calls `fun(*args,
**kwargs)`); acknowledged late but failed, the message is gone too. Either way only the
reconciler would find the work again.

The previous release (tests/deploy/releases.py previous) is read from git as it was: its task
definitions (`@shared_task` in workflows/tasks.py, names resolved from its
workflows/engine/dispatch.py), every call each one takes (its engine sends positional
arguments only: dispatch's `send_task(name, args=...)`, the tasks' own retries with the
same arguments), and its beat schedule (hooksvc/settings.py). This release's names are the
ones a running worker reports (`inspect().registered()`), which loads its tasks the way
every worker does (celery/loaders/base.py `import_default_modules`, whose import_modules
signal runs the app's `autodiscover_tasks`); its functions are the ones that worker runs.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hooksvc.celery import app as celery_app
from tests.deploy import releases
from tests.support.worker import Worker

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

#: Tasks this release sends that the previous release's workers do not take, each with why
#: that is harmless (none yet: a new task is sent only once no previous worker runs, or its
#: loss is found by the reconciler; say which here).
NEW_TASKS: dict[str, str] = {}


def _show(commit: str, path: str) -> ast.Module:
    text = subprocess.run(
        ["git", "show", f"{commit}:{path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return ast.parse(text)


def _constants(module: ast.Module) -> dict[str, str]:
    """Module-level NAME = "string" assignments."""
    found = {}
    for node in module.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found[node.targets[0].id] = node.value.value
    return found


def _name(node: ast.expr, dispatch: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and node.attr in dispatch:
        return dispatch[node.attr]
    raise AssertionError(f"a task name the test cannot read: {ast.dump(node)}")


def previous_tasks(commit: str) -> dict[str, tuple[int, int]]:
    """Each task of the release: name -> (fewest, most) positional arguments it takes."""
    dispatch = _constants(_show(commit, "workflows/engine/dispatch.py"))
    tasks: dict[str, tuple[int, int]] = {}
    for node in _show(commit, "workflows/tasks.py").body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (
                isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "shared_task"
            ):
                continue
            options = {k.arg: k.value for k in decorator.keywords}
            bind = options.get("bind")
            bound = isinstance(bind, ast.Constant) and bind.value is True
            params = node.args.args[1:] if bound else node.args.args
            assert not node.args.kwonlyargs and node.args.vararg is None, node.name
            tasks[_name(options["name"], dispatch)] = (
                len(params) - len(node.args.defaults),
                len(params),
            )
    return tasks


def previous_beat(commit: str) -> dict[str, tuple[list[Any], dict[str, Any]]]:
    """The release's beat schedule: task name -> (args, kwargs) beat sends it with."""
    for node in _show(commit, "hooksvc/settings.py").body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "CELERY_BEAT_SCHEDULE"
        ):
            assert isinstance(node.value, ast.Dict)
            beat = {}
            for entry in node.value.values:
                assert isinstance(entry, ast.Dict)
                fields = {
                    ast.literal_eval(k): v
                    for k, v in zip(entry.keys, entry.values, strict=True)
                    if k
                }
                args = ast.literal_eval(fields["args"]) if "args" in fields else []
                kwargs = ast.literal_eval(fields["kwargs"]) if "kwargs" in fields else {}
                beat[ast.literal_eval(fields["task"])] = (list(args), dict(kwargs))
            return beat
    raise AssertionError("no CELERY_BEAT_SCHEDULE in the release's hooksvc/settings.py")


def _previous_release() -> tuple[str, str]:
    release = releases.previous()
    return release.version, release.commit


def _takes(name: str, args: list[Any], kwargs: dict[str, Any] | None = None) -> bool:
    """Whether this release's task `name` takes the call (Celery calls its run function)."""
    try:
        inspect.signature(celery_app.tasks[name].run).bind(*args, **(kwargs or {}))
    except TypeError:
        return False
    return True


@pytest.fixture
def registered(worker: Worker) -> set[str]:
    """The task names the running worker of this release reports."""
    replies = celery_app.control.inspect(timeout=10).registered() or {}
    assert replies, "the worker did not answer inspect().registered() within 10 s"
    names: set[str] = set()
    for tasks in replies.values():
        names |= {task.split(" ")[0] for task in tasks}
    # Its names are the ones this process's app holds once it loads tasks as a worker does.
    celery_app.loader.import_default_modules()
    assert names <= set(celery_app.tasks)
    return names


def test_this_worker_takes_every_message_the_previous_release_sends(registered: set[str]) -> None:
    version, commit = _previous_release()
    tasks = previous_tasks(commit)
    assert tasks, f"no task read from {version}'s workflows/tasks.py"
    for name, (fewest, most) in sorted(tasks.items()):
        assert name in registered, f"{version} sends {name}, which this worker does not register"
        for count in range(fewest, most + 1):
            args = [None] * count
            assert _takes(name, args), f"{version} sends {name} with {count} arguments"
    for name, (args, kwargs) in sorted(previous_beat(commit).items()):
        assert name in registered, f"{version}'s beat sends {name}: not registered"
        assert _takes(name, args, kwargs), f"{version}'s beat sends {name}{args, kwargs}"


def test_every_message_this_release_sends_the_previous_workers_take(registered: set[str]) -> None:
    """The other way: during the rollout this release's web, workers and beat send to the
    previous release's workers. Every task this worker registers, called any way its
    function takes, and every entry of this beat schedule, the previous release takes; a
    task it does not know is in NEW_TASKS with why that is harmless."""
    version, commit = _previous_release()
    tasks = previous_tasks(commit)
    ours = {n for n in registered if n.startswith("workflows.")}
    for name in sorted(ours - set(tasks)):
        assert name in NEW_TASKS, f"{version}'s workers do not take {name}: say why in NEW_TASKS"
    for name in sorted(ours & set(tasks)):
        parameters = inspect.signature(celery_app.tasks[name].run).parameters.values()
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters), name
        fewest = sum(p.default is p.empty for p in parameters)
        most = len(parameters)
        previous_fewest, previous_most = tasks[name]
        assert previous_fewest <= fewest and most <= previous_most, (
            f"{name} takes {fewest}..{most} arguments here, {previous_fewest}..{previous_most}"
            f" in {version}: a call this release may send fails on {version}'s workers"
        )
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        sent = str(entry["task"])
        assert sent in tasks or sent in NEW_TASKS, f"this beat sends {sent}, unknown to {version}"
