"""The docs stay true and readable: every setting the code reads, the layers, the paths they
name; a short README that opens with the two commands; a site that builds with no broken link."""

from __future__ import annotations

import configparser
import html.parser
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from django.conf import settings

from tests.support.servers import ROOT

DOCS = ROOT / "docs"
#: "A few hundred lines at most" (issue 24): the commands, the five-minute start and a map.
README_MAX_LINES = 200


def test_the_settings_page_documents_every_environment_variable() -> None:
    page = (DOCS / "settings.md").read_text()
    documented = {
        name
        for row in re.findall(r"^\| (`[^|]+`) \|", page, flags=re.MULTILINE)
        for name in re.findall(r"`([A-Z0-9_]+)`", row)
    }
    missing = [name for name in settings.ENVIRONMENT if name not in documented]
    assert not missing, f"add these to the table of docs/settings.md: {missing}"


def test_the_readme_opens_with_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("make run") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_the_readme_stays_short_and_points_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    length = len(readme.splitlines())
    assert length <= README_MAX_LINES, (
        f"README.md has {length} lines (at most {README_MAX_LINES}): write the details as a "
        "page under docs/ (in mkdocs.yml's nav) and link it from the README's map"
    )
    assert "## Five-minute start" in readme
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", readme))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert not pages - linked, f"add these pages to the README's map: {sorted(pages - linked)}"


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a Markdown text."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _missing_paths(text: str) -> list[str]:
    """Repository paths named in backticks (under one of its top-level folders, or a module's
    file name) that do not exist. URLs (`/admin/`), placeholders (`<hook>`), upstream
    projects' paths (`util/cache/cache.go`) and what is made at run time, in the folders
    .gitignore names (`var/tls/`), are not checked."""
    missing = []
    ignored = set(re.findall(r"^/([\w.-]+)/$", (ROOT / ".gitignore").read_text(), re.MULTILINE))
    tops = {p.name for p in ROOT.iterdir() if p.is_dir()} - ignored
    for name in re.findall(r"`([A-Za-z0-9_.][A-Za-z0-9_./-]*)`", text):
        if "/" in name:
            if name.split("/")[0] in tops and not (ROOT / name).exists():
                missing.append(name)
        elif (
            name.endswith(".py")
            and not (ROOT / name).exists()
            and not any(next((ROOT / top).rglob(name), None) for top in _CODE)
        ):
            missing.append(name)
    return missing


#: Where a module named by its file name alone (`views.py`, `test_https.py`) may be.
_CODE = ("hooksvc", "workflows", "tests", "bench", "scripts")


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
    doc = (DOCS / "architecture.md").read_text()
    drawn = _section(doc, "The layers").split("```")[1].strip().splitlines()
    assert drawn == layers, "copy the layers of .importlinter into docs/architecture.md"


def test_every_path_the_docs_name_exists() -> None:
    """The architecture's folder tree, and every repository path any page or the README
    names in backticks."""
    tree = _section((DOCS / "architecture.md").read_text(), "The folder tree").split("```")[1]
    named = [p for p in _tree_paths(tree) if not (ROOT / p).exists()]
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        named += [f"{page.relative_to(ROOT)}: {p}" for p in _missing_paths(page.read_text())]
    assert not named, f"these paths moved or were renamed: fix the docs {named}"
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()


# --- the site -------------------------------------------------------------------------


def _hooks() -> ModuleType:
    """scripts/mkdocs_hooks.py, which mkdocs.yml names (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a link to a missing page or anchor, a page left out of the
    nav (mkdocs.yml's `validation`), or a nav entry without its page fails, with MkDocs'
    own warnings as the message."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    warnings = [line for line in built.stderr.splitlines() if not line.startswith("INFO")]
    assert built.returncode == 0, "mkdocs build --strict:\n" + "\n".join(warnings)
    page = (tmp_path / "index.html").read_text()
    article = page[page.index("<article") : page.index("</article>")]
    home = _Lists()
    home.feed(article)
    assert home.items_of_first_ordered_list == 3, "the README's five-minute start has 3 steps"
    assert 'href="make-run.html"' in article


class _Lists(html.parser.HTMLParser):
    """How many items the first <ol> of a page has (its own, not those of nested lists)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.seen = False
        self.items_of_first_ordered_list = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("ol", "ul") and (self.depth or (tag == "ol" and not self.seen)):
            self.depth += 1
            self.seen = True
        elif tag == "li" and self.depth == 1:
            self.items_of_first_ordered_list += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("ol", "ul") and self.depth:
            self.depth -= 1


def test_lists_written_for_github_are_indented_as_mkdocs_reads_them() -> None:
    """CommonMark nests under an item's text column (2 spaces under `- `, 3 under `1. `);
    Python-Markdown wants 4 per level, and a blank line before an item that follows a
    paragraph of a loose item."""
    github = (
        "1. one\n   more\n\n   ```sh\n   code\n     deeper\n   ```\n"
        "2. two\n- a\n  - b\n    text\n- c\n\nafter\n"
    )
    assert _hooks().four_space_lists(github) == (
        "1. one\n    more\n\n    ```sh\n    code\n      deeper\n    ```\n\n"
        "2. two\n- a\n    - b\n        text\n- c\n\nafter\n"
    )


def test_the_home_page_is_the_readme_with_its_links_into_docs() -> None:
    hooks = _hooks()
    assert (DOCS / "index.md").read_text().strip() == hooks.MARKER
    assert hooks.readme_as_page("[a](docs/api.md#x) [b](https://e.org/docs/c)") == (
        "[a](api.md#x) [b](https://e.org/docs/c)"
    )


def test_the_metrics_page_documents_every_metric() -> None:
    """Every metric the processes define (a counter is exposed with `_total`)."""
    code = (ROOT / "hooksvc" / "metrics.py").read_text()
    code += (ROOT / "hooksvc" / "serving" / "scrape.py").read_text()
    defined = set(re.findall(r'"(hooksvc_[a-z_]+)",\n', code))
    page = (DOCS / "metrics.md").read_text()
    documented = set(re.findall(r"`(hooksvc_[a-z_]+?)(?:_total)?[`{]", page))
    assert len(defined) >= 17, defined
    missing = sorted(defined - documented)
    assert not missing, f"add these to docs/metrics.md: {missing}"


def test_the_docs_describe_every_built_in_step_type() -> None:
    """Each step type has its bounds in the table of "Timeouts and retries" and its
    parameters in a reference table (the built-ins' or the Kubernetes step types')."""
    from workflows.steps import registry

    templates = (DOCS / "templates.md").read_text()
    bounds = _section(templates, "Timeouts and retries")
    bounded = {
        n
        for row in re.findall(r"^\| (.+?) \|", bounds, re.MULTILINE)
        for n in re.findall(r"`([a-z0-9_]+)`", row)
    }
    kubernetes = (DOCS / "kubernetes-steps.md").read_text()
    described = set(re.findall(r"^\| `([a-z0-9_]+)` \|", kubernetes, re.MULTILINE))
    described |= set(re.findall(r"`([a-z0-9_]+)`\s\(", _section(templates, "Built-in step types")))
    names = {  # the built-ins, not the step types tests register
        n for n in registry.names() if registry.get(n).run.__module__.startswith("workflows.")
    }
    assert {"noop", "http", "k8s_job"} <= names
    assert names - bounded == set(), "add to the table in docs/templates.md, Timeouts and retries"
    assert names - described == set(), (
        "describe the parameters in docs/templates.md or docs/kubernetes-steps.md"
    )


def _served_api_versions() -> dict[str, set[str]]:
    """Each custom resource kind, and the group/version its CRD serves (k8s/base/crds)."""
    import yaml

    served: dict[str, set[str]] = {}
    for path in sorted((ROOT / "k8s" / "base" / "crds").glob("hooks.*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        versions = {f"{spec['group']}/{v['name']}" for v in spec["versions"] if v["served"]}
        served.setdefault(spec["names"]["kind"], set()).update(versions)
    return served


def test_every_example_document_uses_the_api_version_its_crd_serves() -> None:
    """`kubectl apply` finds a kind by its CRD's group (hooks.hooksvc.io/v1alpha1); the README
    once said `hooksvc/v1alpha1`, which only apply_workflows takes."""
    served = _served_api_versions()
    assert set(served) >= {"WorkflowTemplate", "AddonProfile"}
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    found = 0
    wrong = []
    for page in pages:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            version = re.fullmatch(r"\s*(?:- )?apiVersion: (\S+)", line)
            kind = re.fullmatch(r"\s*kind: (\S+)", lines[i + 1]) if i + 1 < len(lines) else None
            if version and kind and kind.group(1) in served:
                found += 1
                if version.group(1) not in served[kind.group(1)]:
                    wrong.append(f"{page.name}:{i + 1}: {kind.group(1)} as {version.group(1)}")
    assert found >= 5, "the pages' example documents were not found"
    assert not wrong, f"use the API version the CRD serves: {wrong}"
