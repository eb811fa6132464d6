"""The README stays true: it documents every setting the code reads."""

from __future__ import annotations

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
