"""`make lint` fails on a module of hooksvc/ or workflows/ over 500 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.servers import ROOT

SCRIPT = ROOT / "scripts" / "check-module-size"


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, check=False
    )


def test_no_module_of_hooksvc_or_workflows_is_over_500_lines() -> None:
    result = _check()
    assert result.returncode == 0, f"split these modules by concern:\n{result.stderr}"


def test_a_501_line_module_is_named_with_its_count(tmp_path: Path) -> None:
    (tmp_path / "fits.py").write_text("x = 1\n" * 500)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 501)
    result = _check(tmp_path)
    assert result.returncode == 1
    assert (
        result.stderr
        == f"{tmp_path / 'pkg' / 'long.py'}: 501 lines (limit 500): split it by concern\n"
    )


def test_generated_migrations_are_not_counted(tmp_path: Path) -> None:
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "0001_initial.py").write_text("x = 1\n" * 900)
    assert _check(tmp_path).returncode == 0


def test_a_path_that_does_not_exist_is_an_error_not_a_pass(tmp_path: Path) -> None:
    result = _check(tmp_path / "nowhere")
    assert result.returncode == 1
    assert result.stderr == f"check-module-size: {tmp_path / 'nowhere'} does not exist\n"
