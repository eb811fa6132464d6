"""The step types that rely on nothing outside hooksvc (docs/upstream.md): `wait`'s end.

`noop` and `approval` are shown by the engine's and the worker's tests that docs/upstream.md
names; `wait` relies only on the clock (workflows.clock) of the worker that first runs it, as
this shows.
"""

from __future__ import annotations

import pytest

from tests.steps.conftest import Context, at_epoch, run
from workflows.steps import registry


def test_a_wait_keeps_the_end_its_first_run_fixed(
    context: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run again with the memo its first run left (a redelivered message, another worker),
    a wait ends when the first run said, not `seconds` after the second."""
    at_epoch(monkeypatch, 1000.0)
    first = context("wait", {"seconds": 60})
    assert run(first) == registry.Poll(after=60, message="waiting 60 s", on_time=True)
    at_epoch(monkeypatch, 1045.0)
    again = context("wait", {"seconds": 60}, memo=dict(first.memo))
    outcome = run(again)
    assert isinstance(outcome, registry.Poll) and outcome.after == 15
    at_epoch(monkeypatch, 1060.0)
    assert run(again) == registry.Done({"waitedSeconds": 60})
