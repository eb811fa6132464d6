"""What clusterctl does with a provider's components YAML, for tests/deploy, as its source
says (kubernetes-sigs/cluster-api at ae7ff04; there is no clusterctl binary here):

- cmd/clusterctl/client/repository/components.go, NewComponents: variables are replaced
  first (the yaml processor), then the YAML is parsed; the default target namespace is the
  one Namespace object (inspectTargetNamespace: more than one is an error); namespaced
  objects are moved into the target namespace, ClusterRoleBinding subjects and Certificate
  dnsNames follow it (fixTargetNamespace, fixCertificate), nothing else does.
- cmd/clusterctl/client/yamlprocessor/simple_processor.go, Process: a variable neither set
  nor given a non-empty default is missing, and clusterctl refuses with the missing names
  (so `${X:=}` is as required as `${X}`); substitution is drone/envsubst's.
- drone/envsubst parse/scan.go and parse.go: `${` opens a reference, `$$` is an escaped `$`,
  a `$` before anything else is text; `${X:=d}` and `${X:-d}` use d when X is unset or
  empty, `${X=d}` when X is unset.

The substitution below covers the forms the components file may use (`${X}`, `${X:=d}`);
`references` refuses any other, so the file cannot rely on one this model lacks.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests

SCRIPT = manifests.ROOT / "scripts" / "clusterctl-files"
DIRECTORY = manifests.ROOT / "clusterctl"
#: `${NAME}` or `${NAME:=default}`.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}$]*))?\}")


class MissingVariablesError(Exception):
    """clusterctl's refusal: these variables have no value and no non-empty default."""


def generator() -> dict[str, Any]:
    """scripts/clusterctl-files' globals (VARIABLES, FIXED_VALUES, files, ...)."""
    return runpy.run_path(str(SCRIPT))


def components_text() -> str:
    return (DIRECTORY / "runtime-extension-components.yaml").read_text()


def metadata() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DIRECTORY / "metadata.yaml").read_text())
    return doc


def references(text: str) -> dict[str, str | None]:
    """Each variable and its default (None: none), as clusterctl lists them; any `$` that
    is not part of such a reference and could mean something to envsubst is refused."""
    assert "$$" not in text, "`$$` is an escaped `$` to envsubst"
    found: dict[str, str | None] = {}
    for match in REFERENCE.finditer(text):
        name, default = match.group(1), match.group(2)
        assert found.get(name, default) == default, f"{name} has two defaults"
        found[name] = default
    rest = REFERENCE.sub("", text)
    assert "${" not in rest, (
        f"a reference envsubst reads otherwise: {rest[rest.index('${') :][:60]}"
    )
    return found


def substitute(text: str, given: dict[str, str]) -> str:
    """The text after clusterctl's variable substitution, or MissingVariablesError."""
    missing = sorted(n for n, d in references(text).items() if not given.get(n) and not d)
    if missing:
        raise MissingVariablesError(missing)

    def value(match: re.Match[str]) -> str:
        return given.get(match.group(1)) or match.group(2) or ""

    return REFERENCE.sub(value, text)


def install(text: str, given: dict[str, str]) -> list[manifests.Obj]:
    """The objects clusterctl would create (before its labels and target namespace)."""
    return [doc for doc in yaml.safe_load_all(substitute(text, given)) if doc]


def target_namespace(objects: list[manifests.Obj]) -> str:
    namespaces = [str(o["metadata"]["name"]) for o in objects if o["kind"] == "Namespace"]
    assert len(namespaces) == 1, f"clusterctl wants exactly one Namespace, found {namespaces}"
    return namespaces[0]


def write_copy(tmp_path: Path) -> Path:
    """A copy of clusterctl/ to spoil."""
    copy = tmp_path / "clusterctl"
    copy.mkdir()
    for path in DIRECTORY.iterdir():
        (copy / path.name).write_text(path.read_text())
    return copy
