"""The docs stay true: every setting the code reads, the layers, the paths they name."""

from __future__ import annotations

import configparser
import re

from django.conf import settings

from tests.support.servers import ROOT


def test_the_readme_documents_every_environment_variable() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in settings.ENVIRONMENT if f"`{name}`" not in readme]
    assert not missing, f"add these to README.md's Configuration table: {missing}"


def test_the_readme_opens_with_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("make run") for line in head)
    assert any(line.startswith("make test") for line in head)


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a Markdown text."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _missing_paths(text: str) -> list[str]:
    """Repository paths named in backticks (under one of its top-level folders, or a module's
    file name) that do not exist. URLs (`/admin/`), placeholders (`<hook>`) and upstream
    projects' paths (`util/cache/cache.go`) are not checked."""
    missing = []
    tops = {p.name for p in ROOT.iterdir() if p.is_dir()}
    for name in re.findall(r"`([A-Za-z0-9_.][A-Za-z0-9_./-]*)`", text):
        if "/" in name:
            if name.split("/")[0] in tops and not (ROOT / name).exists():
                missing.append(name)
        elif name.endswith(".py") and not any(
            next((ROOT / package).rglob(name), None) for package in ("hooksvc", "workflows")
        ):
            missing.append(name)
    return missing


def _tree_paths(block: str) -> list[str]:
    """The paths of a folder tree drawn with two spaces per level, and the modules and
    folders its descriptions name (`views.py`, `cli/`) in the folder they describe."""
    paths: list[str] = []
    parents: list[str] = []
    folder = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        if line.startswith(" " * 20):  # the description column, continued
            comment = line
        else:
            indent = (len(line) - len(line.lstrip())) // 2
            entry, _, comment = line.strip().partition("  ")
            parents = parents[:indent]
            for name in entry.split(", "):
                paths.append("".join([*parents, name]))
            folder = "".join([*parents, entry]) if entry.endswith("/") else "".join(parents)
            parents.append(entry if entry.endswith("/") else "")
        paths += [folder + n for n in re.findall(r"(?<![\w/.])(\w+(?:\.py|/))(?![\w/])", comment)]
    return paths


def test_the_architecture_draws_the_layers_of_the_import_contracts() -> None:
    contracts = configparser.ConfigParser()
    contracts.read(ROOT / ".importlinter")
    layers = [
        line.strip()
        for line in contracts["importlinter:contract:layers"]["layers"].splitlines()
        if line.strip()
    ]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = _section(doc, "The layers").split("```")[1].strip().splitlines()
    assert drawn == layers, "copy the layers of .importlinter into docs/architecture.md"


def test_every_path_the_architecture_and_the_readme_layout_name_exists() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    tree = _section(doc, "The folder tree").split("```")[1]
    readme = (ROOT / "README.md").read_text()
    named = [
        *_missing_paths(doc),
        *(p for p in _tree_paths(tree) if not (ROOT / p).exists()),
        *_missing_paths(_section(readme, "Layout")),
        *_missing_paths(_section(readme, "How a hook call is answered")),
    ]
    assert not named, f"these paths moved or were renamed: fix the docs {named}"
    assert "docs/architecture.md" in readme
