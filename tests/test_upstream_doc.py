"""docs/upstream.md stays true: a contract table for every step type and controller, and
every test a row names exists; every constant that copies an upstream value is recorded with
the file and tag or commit it was read at, and equals the record; every built-in step type
has a fresh reading (issue 33).

The built-in step types are those `workflows.steps.builtin` registers (what the registry
holds with `HOOKSVC_STEP_MODULES` empty); the controllers are the Kubernetes API client,
the Cluster watcher, the leader lock and the resource controller. Each section has one
table with the columns Behaviour, Upstream, hooksvc, Emulator and Test, at least one row,
and in each row's Test cell at least one `tests/...py::test_name` that pytest would collect.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from typing import Any

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
RECORDED = re.compile(r"^- Recorded `(?P<name>[\w.]+)` from (?P<source>.+?) = `(?P<value>[^`]*)`$")
#: A tag (v1.18.1) or a commit (7 hex digits or more): what "read at" means.
PIN = re.compile(r"\bv\d+\.\d+\.\d+\b|\b[0-9a-f]{7,40}\b")
FRESH = re.compile(r"^Fresh reading (?P<date>\d{4}-\d{2}-\d{2}) at (?P<at>.+?): (?P<checked>.+)$")
#: Constants that copy an upstream value and must be recorded (more may be).
MUST_RECORD = {
    "workflows.steps.addon_install.INSTALL_ORDER",
    "workflows.steps.helm.PENDING",
    "workflows.steps.rollout.DEADLINE_EXCEEDED",
    "workflows.steps.velero_backups.FINAL",
    "workflows.steps.velero_volumes.EXCLUDE_LABEL",
    "workflows.steps.namespace_patterns.WILDCARDS",
    "workflows.steps.namespace_patterns.UNSUPPORTED",
    "workflows.steps.csi_snapshots.DEFAULT_CLASS",
    "workflows.steps.k8s_job.CONDITIONS",
    "workflows.steps.pods.WAITING",
}


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


def recorded() -> dict[str, tuple[str, str]]:
    """`module.NAME` -> (where it was read, the value as read), from the Recorded lines."""
    found: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("- Recorded"):
            match = RECORDED.match(line)
            assert match, f"docs/upstream.md: a Recorded line not of the form: {line[:80]!r}"
            found[match["name"]] = (match["source"], match["value"])
    return found


def as_recorded(value: Any) -> str:
    """The project's constant written as the page records values."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ", ".join(str(key) for key in value)
    if isinstance(value, set | frozenset):
        return ", ".join(sorted(str(item) for item in value))
    return ", ".join(str(item) for item in value)


#: An upstream file a Recorded line names (`pkg/x/y.go`); this repository's own are not.
UPSTREAM_FILE = re.compile(rf"`(?!(?:{TOPS})/)([\w.-]+(?:/[\w.-]+)+\.\w+)`")


def unpinned(source: str) -> list[str]:
    """The upstream files of a Recorded line's source with no tag or commit of their own
    between the file named before them (or the start) and them: one pin at the front must
    not pass for every file of a line that reads several."""
    found = []
    start = 0
    for match in UPSTREAM_FILE.finditer(source):
        if not PIN.search(source[start : match.start()]):
            found.append(match.group(1))
        start = match.end()
    return found


def test_every_recorded_value_is_the_projects_copy() -> None:
    """A constant that copies an upstream value equals what the page says was read there,
    and names the tag or commit it was read at: changing either side without reading the
    source again fails here (helm's InstallOrder grew PriorityClass unnoticed, issue 33)."""
    records = recorded()
    missing = sorted(MUST_RECORD - set(records))
    assert not missing, f"record these in docs/upstream.md: {missing}"
    problems = []
    for name, (source, value) in sorted(records.items()):
        module, _, attr = name.rpartition(".")
        copy = as_recorded(getattr(importlib.import_module(module), attr))
        if copy != value:
            problems.append(f"{name} is {copy!r}; upstream, as recorded: {value!r}")
        if not PIN.search(source):
            problems.append(f"{name}: the source names no tag or commit: {source!r}")
        problems += [f"{name}: `{path}` names no tag or commit" for path in unpinned(source)]
    assert not problems, "docs/upstream.md:\n" + "\n".join(problems)


def test_every_builtin_step_type_has_a_fresh_reading() -> None:
    """Each step type's section says when it was last read again against upstream and the
    failure-case table, at which commits, and what was checked."""
    headings = sections()
    problems = []
    for name in builtin_step_types():
        body = headings.get(f"Step type `{name}`", "")
        lines = [FRESH.match(line) for line in body.splitlines() if line.startswith("Fresh")]
        readings = [match for match in lines if match]
        if not readings or len(readings) != len(lines):
            problems.append(f"{name}: no line 'Fresh reading <YYYY-MM-DD> at <...>: <checked>'")
            continue
        for reading in readings:
            if not PIN.search(reading["at"]) and "no upstream" not in reading["at"]:
                problems.append(f"{name}: the reading names no commit or tag ('no upstream')")
    assert not problems, "docs/upstream.md:\n" + "\n".join(problems)


#: Sections read against an unpinned "master": pin each at its next reading, then drop it.
UNPINNED = {"The resource controller (`workflows/controllers/resources.py`)"}


def test_every_row_says_at_which_tag_or_commit_its_upstream_was_read() -> None:
    """A row's upstream names a tag or a commit, in its own cell or in its section's
    introduction ("Read in ..."): "master" does not say what was read."""
    problems = []
    for heading, body in sections().items():
        if heading in UNPINNED:
            continue
        introduction = body.split("\n|", 1)[0]
        if PIN.search(introduction):
            continue
        problems += [
            f"{heading}: {row[0][:60]!r}"
            for row in table(body)[1:]
            if len(row) == len(COLUMNS) and row[1] != "-" and not PIN.search(row[1])
        ]
    assert not problems, "docs/upstream.md, rows read at no tag or commit:\n" + "\n".join(problems)


def test_the_recorded_value_check_finds_a_difference() -> None:
    line = "- Recorded `a.B` from helm v4.1.4 `x.go` `InstallOrder` = `PriorityClass, Namespace`"
    match = RECORDED.match(line)
    assert match and match["value"] == "PriorityClass, Namespace"
    assert as_recorded(("Namespace",)) != match["value"]
    assert as_recorded({"Complete": "succeeded", "Failed": "failed"}) == "Complete, Failed"
    assert PIN.search("velero v1.18.1 (26ef8fa7df68)") and not PIN.search("kubernetes master")
    # Each file its own pin (kuberuntime_container.go had none, behind images/types.go's).
    two = "kubernetes 0a2f5b12 `pkg/a/types.go` (`X`), kubernetes `pkg/b/c.go` (as `tests/x.py`)"
    assert unpinned(two) == ["pkg/b/c.go"]
    assert unpinned(two.replace("kubernetes `pkg/b", "kubernetes fbba6b47 `pkg/b")) == []
    reading = FRESH.match("Fresh reading 2026-11-28 at helm v4.1.4 (05fa3797): InstallOrder.")
    assert reading and reading["at"] == "helm v4.1.4 (05fa3797)"
    assert not FRESH.match("Fresh reading soon: nothing")
