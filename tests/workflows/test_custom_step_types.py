"""Custom step types: a module named in HOOKSVC_STEP_MODULES registers one with a decorator.

apply_workflows then accepts it, fills its parameter defaults, rejects a bad parameter
with the usual message, and the engine runs it like a built-in. A thread that asks for a step
type while another thread loads the modules waits for them.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from tests.workflows import documents, steps_gate
from workflows import errors
from workflows.engine import attempts
from workflows.models import WorkflowTemplate
from workflows.steps import registry

pytestmark = pytest.mark.django_db
MODULE = "tests.workflows.custom_steps"
SLOW_MODULE = "tests.workflows.slow_steps"


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as a new process sees it: nothing loaded, the custom module not imported."""
    # The built-ins first, so that the registry restored afterwards still holds them (their
    # modules are imported once per process and would not register again).
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry._REGISTRY.pop("chat_notify", None)
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.delitem(sys.modules, MODULE, raising=False)


def apply(tmp_path: Path, step: Mapping[str, object]) -> list[str]:
    path = tmp_path / "workflows.yaml"
    path.write_text(documents.dump(documents.template("notify", steps=[step])))
    out = io.StringIO()
    call_command("apply_workflows", "-f", str(path), stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.usefixtures("fresh_registry")
@override_settings(STEP_MODULES=[MODULE])
def test_a_custom_step_type_is_accepted_with_its_defaults(tmp_path: Path) -> None:
    step = {"name": "tell", "type": "chat_notify", "with": {"channel": "#ops"}}
    assert apply(tmp_path, step) == ["workflowtemplate/notify created"]
    stored = WorkflowTemplate.objects.get(name="notify").spec["steps"][0]
    assert stored["with"] == {"channel": "#ops", "mentions": 0}
    assert "chat_notify" in registry.names()


@pytest.mark.usefixtures("fresh_registry")
@override_settings(STEP_MODULES=[MODULE])
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "spec.steps[0].with.channel: is required"),
        ({"channel": "ops"}, "spec.steps[0].with.channel: must start with '#'"),
        ({"channel": "#ops", "mentions": "all"}, "spec.steps[0].with.mentions: must be an integer"),
        ({"channel": "#ops", "mention": 1}, "spec.steps[0].with.mention: unknown parameter"),
    ],
)
def test_a_bad_parameter_of_a_custom_step_type_is_rejected(
    tmp_path: Path, params: dict[str, object], message: str
) -> None:
    with pytest.raises(CommandError) as caught:
        apply(tmp_path, {"name": "tell", "type": "chat_notify", "with": params})
    assert str(caught.value).endswith(f"document 1 (notify): {message}")
    assert not WorkflowTemplate.objects.exists()


@pytest.mark.usefixtures("fresh_registry")
def test_without_the_setting_the_custom_type_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(
        CommandError, match=r"spec.steps\[0\].type: unknown step type 'chat_notify'"
    ):
        apply(tmp_path, {"name": "tell", "type": "chat_notify", "with": {"channel": "#ops"}})


@pytest.mark.usefixtures("fresh_registry")
@override_settings(STEP_MODULES=[MODULE])
def test_the_engine_runs_a_custom_step_type_like_a_built_in() -> None:
    def context(channel: str, memo: dict[str, object]) -> registry.StepContext:
        return registry.StepContext(
            run_id=7,
            step_name="tell",
            step_type="chat_notify",
            params={"channel": channel, "mentions": 0},
            run_context={"cluster": {"name": "c1"}},
            memo=memo,
            attempt=1,
        )

    memo: dict[str, object] = {}
    outcome = attempts.execute_once(context("#ops", memo), {})
    assert outcome == registry.Done({"posted": "#ops: c1 hooksvc-7-tell"})
    assert attempts.execute_once(context("#ops", memo), {}) == outcome
    failed = attempts.execute_once(context("#down", {}), {})
    assert isinstance(failed, errors.TemporaryError)
    assert failed.message == "chat is unavailable"


@pytest.mark.usefixtures("fresh_registry")
@override_settings(STEP_MODULES=[SLOW_MODULE])
def test_a_thread_asking_while_another_loads_the_step_types_waits_for_all_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`make run`'s worker runs tasks in threads: after a start, two tasks asked the registry
    at once, and the second, finding it half-filled, failed its run with "unknown step type
    'wait'" (seen when the worker came back after its broker was killed)."""
    monkeypatch.delitem(sys.modules, SLOW_MODULE, raising=False)
    steps_gate.importing.clear()
    steps_gate.release.clear()
    loader = threading.Thread(target=registry.load_builtins)
    loader.start()
    try:
        assert steps_gate.importing.wait(30), "the loader did not begin importing"
        found: list[registry.StepType | None] = []
        asker = threading.Thread(target=lambda: found.append(registry.find("slow_loaded")))
        asker.start()
        # Long enough for an asker that does not wait to have answered (None) by now.
        asker.join(timeout=1)
    finally:
        steps_gate.release.set()
        loader.join(30)
    asker.join(30)
    assert found and found[0] is not None, "the asker got a half-filled registry"
    assert found[0].name == "slow_loaded"


@pytest.mark.parametrize("seconds", [0, -5])
def test_a_custom_step_type_without_a_positive_call_bound_is_refused_at_registration(
    seconds: int,
) -> None:
    """Every call of a type that is not inline is bounded: a bound of 0 would abandon each call
    at once (workflows.engine.calls waits at most that long), so the module fails to load with
    a message naming the type, instead of every step of it failing later."""
    with pytest.raises(ValueError) as refused:
        registry.step_type("zero_bound", call_timeout_seconds=seconds)
    assert str(refused.value) == (
        "step type 'zero_bound': call_timeout_seconds must be a positive number of seconds,"
        f" got {seconds}"
    )
    assert registry.find("zero_bound") is None
