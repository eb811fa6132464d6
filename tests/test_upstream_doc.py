"""docs/upstream.md stays true: a contract table for every step type and controller, and
every test a row names exists.

The built-in step types are those `workflows.steps.builtin` registers (what the registry
holds with `HOOKSVC_STEP_MODULES` empty); the controllers are the Kubernetes API client,
the Cluster watcher, the leader lock and the resource controller. Each section has one
table with the columns Behaviour, Upstream, hooksvc, Emulator and Test, at least one row,
and in each row's Test cell at least one `tests/...py::test_name` that pytest would collect.
"""

from __future__ import annotations

import ast
import functools
import re

from tests.support.servers import ROOT
from workflows.steps import builtin, registry

DOC = ROOT / "docs" / "upstream.md"
COLUMNS = ["Behaviour", "Upstream", "hooksvc", "Emulator", "Test"]
CONTROLLERS = (
    "The Kubernetes API client",
    "The Cluster watcher",
    "The leader lock",
    "The resource controller",
)
TEST_REF = re.compile(r"(tests/[\w/]+\.py)::([\w:]+)(?:\[[^\]]*\])?")
#: Paths in this repository (its top-level folders); upstream projects' paths are not checked.
TOPS = "hooksvc|workflows|tests|docs|k8s|bench|scripts"
REPO_PATH = re.compile(rf"`((?:{TOPS})/[\w./-]*)(?:::[^`]*)?`")


def sections() -> dict[str, str]:
    """The document's `## ` sections by heading."""
    parts = DOC.read_text().split("\n## ")[1:]
    return {part.partition("\n")[0].strip(): part.partition("\n")[2] for part in parts}


def builtin_step_types() -> list[str]:
    modules = {f"{builtin.__name__.rpartition('.')[0]}.{name}" for name in builtin.__all__}
    return sorted(n for n in registry.names() if registry.get(n).run.__module__ in modules)


def cells(line: str) -> list[str]:
    """A Markdown table row's cells (a `\\|` inside a cell is not a separator)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table(body: str) -> list[list[str]]:
    """The section's table: its header, then its rows (the separator line dropped)."""
    lines = [line for line in body.splitlines() if line.startswith("|")]
    return [cells(line) for index, line in enumerate(lines) if index != 1]


@functools.cache
def collected(path: str) -> frozenset[str]:
    """What pytest collects in a test module: test functions, and `Class::test` methods."""
    tree = ast.parse((ROOT / path).read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name.startswith("test")
            }
    return frozenset(found)


def test_every_builtin_step_type_and_controller_has_its_section() -> None:
    headings = sections()
    steps = builtin_step_types()
    assert "backup_pvs" in steps and "noop" in steps, "the built-in step types were not found"
    missing = [f"Step type `{name}`" for name in steps if f"Step type `{name}`" not in headings]
    missing += [c for c in CONTROLLERS if not any(h.startswith(c) for h in headings)]
    assert not missing, f"add these sections to docs/upstream.md: {missing}"
    for heading in headings:
        for path in re.findall(r"`([\w/]+\.py)`", heading):
            assert (ROOT / path).exists(), f"docs/upstream.md: {heading!r} names a missing module"


def test_every_section_has_a_filled_table_of_the_five_columns() -> None:
    problems = []
    for heading, body in sections().items():
        if "(to be written)" in body:
            problems.append(f"{heading}: still to be written")
            continue
        rows = table(body)
        if not rows or rows[0] != COLUMNS:
            problems.append(f"{heading}: no table with the columns {' | '.join(COLUMNS)}")
            continue
        if len(rows) < 2:
            problems.append(f"{heading}: the table has no row")
        problems += [
            f"{heading}: a row has {len(row)} cells, not {len(COLUMNS)}: {row[0][:60]!r}"
            for row in rows[1:]
            if len(row) != len(COLUMNS)
        ]
        problems += [
            f"{heading}: row {row[0][:60]!r} names no test (tests/...py::test_name)"
            for row in rows[1:]
            if len(row) == len(COLUMNS) and not TEST_REF.search(row[-1])
        ]
    assert not problems, "docs/upstream.md:\n" + "\n".join(problems)


def test_every_test_a_row_names_exists() -> None:
    missing = []
    for heading, body in sections().items():
        for row in table(body)[1:]:
            for path, name in TEST_REF.findall(row[-1]):
                if not (ROOT / path).exists() or name not in collected(path):
                    missing.append(f"{heading}: {path}::{name}")
    assert not missing, f"docs/upstream.md names tests that do not exist: {missing}"


def test_every_repository_path_the_page_names_exists() -> None:
    text = DOC.read_text()
    missing = sorted({p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()})
    assert not missing, f"docs/upstream.md names paths that moved or are gone: {missing}"


def test_the_checks_find_what_they_look_for() -> None:
    """The parsers see a missing test and a row without one (the checks can fail)."""
    assert cells(r"| a \| b | c |") == [r"a \| b", "c"]
    body = "| Behaviour | Upstream | hooksvc | Emulator | Test |\n|---|---|---|---|---|\n"
    body += "| x | y | z | w | `tests/test_upstream_doc.py::test_no_such_test` |\n"
    [header, row] = table(body)
    assert header == COLUMNS
    [(path, name)] = TEST_REF.findall(row[-1])
    assert name not in collected(path)
    assert "test_every_test_a_row_names_exists" in collected(path)
    assert not TEST_REF.search("| - |")
