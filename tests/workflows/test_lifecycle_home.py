"""A step's life has one home (issue 30, ARCHITECTURE invariant 11), and the docs name it.

Covers, by reading the code: the files that decide or write a step's state are exactly those
docs/architecture.md lists ("What decides a step's next state": a Write is made only in
workflows/engine/lifecycle.py; a step's row is written only by workflows/engine/stepstate.py,
through the ORM or the statements of queries.sql that write it; the rules PostgreSQL judges
are functions of the migrations that define them); the step types' flags are read only by
lifecycle; the hook's answer is made only in the files the same page lists ("What decides a hook's
answer"), each of which takes part in it; lifecycle reaches no database code; every claim
statement writes exactly lifecycle.CLAIM_COLUMNS (and started_at), a repeated poll exactly
lifecycle.REPEAT_COLUMNS, the chain's, the run's end's and the first poll's statements
exactly the columns of lifecycle's Write for their outcome: each fast path is a rendering of
the one Write; and the states the models check are the states the rules use.
"""

from __future__ import annotations

import ast
import datetime
import re
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

from workflows import states
from workflows.engine import lifecycle, sql, writes
from workflows.models import Run, StepRun
from workflows.steps import registry

ROOT = Path(__file__).resolve().parents[2]
CODE = [ROOT / "workflows", ROOT / "hooksvc"]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _modules() -> Iterator[tuple[str, ast.Module, str]]:
    for top in CODE:
        for path in sorted(top.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            text = path.read_text()
            yield str(path.relative_to(ROOT)), ast.parse(text), text


def _listed(marker: str) -> set[str]:
    text = ARCHITECTURE.read_text()
    block = text.split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    return set(re.findall(r"^- `([^`]+)`", block, re.MULTILINE))


def _chain_root(node: ast.expr) -> tuple[str, list[str]]:
    """The name an attribute/call chain starts from, and the attributes along it."""
    attrs: list[str] = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id, attrs
        else:
            return "", attrs


ORM_WRITES = {"update", "create", "bulk_create", "bulk_update", "delete", "update_or_create"}


def _writes_step_rows(tree: ast.Module) -> bool:
    """A StepRun write through the ORM: StepRun.objects...update(...), run.steps...update()."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in ORM_WRITES:
                continue
            root, attrs = _chain_root(node.func.value)
            if (root == "StepRun" and "objects" in attrs) or "steps" in attrs:
                return True
    return False


def _makes(tree: ast.Module, name: str) -> bool:
    """A call of `name(...)` or `module.name(...)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == name) or (
                isinstance(func, ast.Attribute) and func.attr == name
            ):
                return True
    return False


#: The statements of queries.sql that write a step's row.
STEP_WRITES = {
    name
    for name, text in sql.QUERIES.items()
    if re.search(r"\bUPDATE workflows_steprun\b|\bINSERT INTO workflows_steprun\b", text)
}


def _runs_step_writes(text: str) -> bool:
    names = re.findall(r"""(?:named|count)\(\s*["'](\w+)["']""", text)
    names += re.findall(r"""QUERIES\[["'](\w+)["']\]""", text)
    return bool(STEP_WRITES & set(names))


def _rule_migrations() -> set[str]:
    found = set()
    for path in sorted((ROOT / "workflows" / "migrations").glob("*.py")):
        text = path.read_text()
        if re.search(r"CREATE FUNCTION workflows_step_(claimable|deps_done|last)\(", text):
            found.add(str(path.relative_to(ROOT)))
    return found


def test_the_files_that_decide_a_steps_state_are_the_ones_the_architecture_page_lists() -> None:
    writes = set()
    for name, tree, text in _modules():
        if _makes(tree, "Write") and not name.endswith("engine/lifecycle.py"):
            pytest.fail(f"{name} makes a writes.Write: only lifecycle decides")
        if _writes_step_rows(tree) or _runs_step_writes(text):
            writes.add(name)
        if re.search(r"(UPDATE|INSERT INTO) workflows_steprun", text):
            writes.add(name)
    found = {"workflows/engine/lifecycle.py", "workflows/engine/queries.sql"}
    found |= writes | _rule_migrations()
    listed = _listed("decides-step")
    assert found == listed, (
        f"found {sorted(found)}, docs/architecture.md lists {sorted(listed)}: a step's state"
        " is decided in lifecycle.py and written by stepstate.py alone"
    )
    assert len(listed) <= 5


#: The step types' flags (registry.StepType) and registry's functions that read them.
FLAGS = {"inline", "says_own_wait", "waiting_message"}
FLAG_FUNCTIONS = {"waits_for_person", "waiting_message", "says_own_wait", "inline_names"}
FLAG_FUNCTIONS |= {"person_types", "least_seconds"}


def _reads_flags(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.id if isinstance(node.value, ast.Name) else ""
        if owner == "registry" and node.attr in FLAG_FUNCTIONS:
            return True
        if node.attr in FLAGS and owner not in ("lifecycle", "registry"):
            return True
    return False


def test_only_lifecycle_reads_the_step_types_flags() -> None:
    readers = {
        name
        for name, tree, _ in _modules()
        if _reads_flags(tree) and not name.endswith(("steps/registry.py", "engine/lifecycle.py"))
    }
    assert readers == set(), f"{sorted(readers)} read step types' flags: ask lifecycle"


def test_the_files_that_decide_a_hooks_answer_are_the_ones_the_architecture_page_lists() -> None:
    listed = _listed("decides-answer")
    assert len(listed) <= 5
    for name, tree, _ in _modules():
        if _makes(tree, "Answer"):
            assert name in listed, f"{name} makes an Answer: only the listed files decide one"
    # Each listed file takes part in an answer: the answers module reaches it.
    graph = grimp.build_graph("workflows", "hooksvc", exclude_type_checking_imports=True)
    reached = graph.find_upstream_modules("workflows.hookpath.answers") | {
        "workflows.hookpath.answers"
    }
    for path in listed:
        module = path.removesuffix(".py").replace("/", ".")
        assert module in reached, f"{path} is listed but takes no part in a hook's answer"


def test_the_rules_of_a_steps_life_reach_no_database_code() -> None:
    """lifecycle imports no module that imports django.db or psycopg (import-linter cannot
    name a part of an external package, so its contract names the project's modules)."""
    graph = grimp.build_graph("workflows", "hooksvc", exclude_type_checking_imports=True)
    reached = graph.find_upstream_modules("workflows.engine.lifecycle")
    for module in sorted(reached | {"workflows.engine.lifecycle"}):
        path = ROOT / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / module.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("django.db", "psycopg")), (module, node.module)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith(("django.db", "psycopg")), module


def _set_columns(statement: str) -> list[set[str]]:
    """The columns each UPDATE ... SET of `statement` writes."""
    found = []
    for match in re.finditer(r"\bSET\b(.*?)(?:\bFROM\b|\bWHERE\b|\bRETURNING\b)", statement, re.S):
        clause = match.group(1)
        # Split at top-level commas: CASE ... END and function calls hold commas of their own.
        depth, parts, current = 0, [], ""
        for char in clause:
            depth += char == "("
            depth -= char == ")"
            if char == "," and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += char
        parts.append(current)
        found.append({part.split("=")[0].strip() for part in parts if "=" in part})
    return found


CLAIMS = {"claim_steps", "claim_promoted", "claim_due_waiting"}


def test_every_claim_writes_what_lifecycle_says_a_claim_writes() -> None:
    expected = {*lifecycle.CLAIM_COLUMNS, lifecycle.CLAIM_STARTS}
    promote = {"state", *lifecycle.promote(datetime.datetime.now(datetime.UTC)).columns}
    assert {name for name in sql.QUERIES if name.startswith("claim_")} == CLAIMS
    for name in CLAIMS:
        [columns] = _set_columns(sql.QUERIES[name])
        extra = promote if name == "claim_promoted" else set()
        assert columns == expected | extra, name
    # The chain's statement: its third UPDATE promotes and claims.
    _, _, promoted = _set_columns(sql.QUERIES["succeed_and_claim_next"])
    assert promoted == expected | promote


def _result(outcome: registry.Outcome, state: str) -> writes.Result:
    step = StepRun(name="s", type="wait", state=state, memo={}, output={}, message="")
    now = datetime.datetime.now(datetime.UTC)
    return writes.Result(step=step, run_name="t", outcome=outcome, memo={}, at=now, started=now)


def test_each_fast_path_writes_the_columns_of_the_one_write() -> None:
    done = lifecycle.after(_result(registry.Done({"x": 1}), states.Step.READY))
    [recorded, ran, _] = _set_columns(sql.QUERIES["succeed_and_claim_next"])
    assert recorded == {"state", *done.columns}
    # A step run ahead of its claim is written as a success by its lease would be.
    ahead = lifecycle.ahead(_result(registry.Done({"x": 1}), states.Step.PENDING))
    assert ahead is not None and ahead.allowed_from == (states.Step.PENDING,)
    assert ran == {"state", *ahead.columns} == recorded
    [ends, _run] = _set_columns(sql.QUERIES["succeed_and_finish_run"])
    assert ends == {"state", *done.columns}
    poll = registry.Poll(after=3, output={"y": 2})
    first = lifecycle.after(_result(poll, states.Step.READY))
    [alone] = _set_columns(sql.QUERIES["record_first_poll"])
    assert alone == {"state", *first.columns}
    [repeats] = _set_columns(sql.QUERIES["record_repeats"])
    assert repeats == set(lifecycle.REPEAT_COLUMNS)
    again = lifecycle.after(
        _result(registry.Poll(after=3, message="m", output={"y": 3}), states.Step.WAITING)
    )
    assert set(again.columns) <= set(lifecycle.REPEAT_COLUMNS)


def test_the_lease_statements_change_no_state() -> None:
    for name in ("extend_leases", "free_leases", "free_leases_of"):
        for columns in _set_columns(sql.QUERIES[name]):
            assert "state" not in columns and columns <= {
                "lease_owner",
                "lease_expires_at",
                "unrecorded",
                "lost_by",
            }, name


def test_the_states_the_models_check_are_the_states_the_rules_use() -> None:
    assert list(StepRun.State.values) == [s.value for s in states.Step]
    assert list(Run.State.values) == [s.value for s in states.Run]
    for model, rules in [
        (StepRun.FINISHED, states.STEP_FINISHED),
        (StepRun.DONE, states.STEP_DONE),
        (StepRun.DUE, states.STEP_DUE),
        (Run.FINISHED, states.RUN_FINISHED),
    ]:
        assert {str(s) for s in model} == {str(s) for s in rules}
