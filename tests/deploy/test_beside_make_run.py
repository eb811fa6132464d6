"""A `manage.py` beside `make run` serves with what `make run` was given (hooksvc.devrun).

Covers: `manage.py workflows list --as PERSON`, from another shell in another directory,
judges a person who signed in through the provider by the provider and role rules `make
run` serves with (recorded in var/make-run.json, a relative roles file made absolute), and
answers what that person sees in the browser; the record holds no secret; what the shell
exports otherwise is named; without that record the same command says what it lacks instead
of answering "No runs" with confidence, and a person with no role is told why.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from hooksvc import devrun
from tests.support import servers
from tests.support import workflows as wf
from workflows.models import Identity, Run

ISSUER = "https://localhost:5556"
RULES = "rules:\n  - group: team-a-operators\n    roles: [operator]\n    namespaces: [team-a]\n"


@pytest.fixture
def make_run_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line is `make run`'s (the record names its PID)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m", "hooksvc.serving.devserver"]
    )
    yield process
    process.kill()
    process.wait()


def _run(namespace: str) -> Run:
    return Run.objects.create(
        template_name="gate", template_generation=1, spec=wf.spec(),
        hook="BeforeClusterUpgrade", cluster_key=f"uid-{namespace}",
        cluster_namespace=namespace, cluster_name=f"{namespace}-prod", moment="v1.33.0",
        state="running",
    )  # fmt: skip


def _ann(issuer: str = ISSUER) -> None:
    user = User.objects.create_user("ann@example.com")
    Identity.objects.create(
        user=user, issuer=issuer, subject="sub-ann", email="ann@example.com",
        groups=["team-a-operators"], signed_in_at=timezone.now(),
    )  # fmt: skip


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def _manage(
    data_dir: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HOOKSVC_", "DATABASE_", "CELERY_", "DJANGO_", "KUBECONFIG"))
    }
    done = subprocess.run(
        [sys.executable, str(servers.ROOT / "manage.py"), *args],
        cwd=cwd,
        env={**clean, "HOOKSVC_DATA_DIR": str(data_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.django_db(transaction=True)
def test_the_cli_as_a_person_beside_make_run_sees_what_the_browser_shows(
    tmp_path: Path, make_run_process: subprocess.Popen[bytes]
) -> None:
    _run("team-a")
    _run("team-b")
    _ann()
    started_in = tmp_path / "checkout"
    started_in.mkdir()
    (started_in / "roles.yaml").write_text(RULES)
    data_dir = tmp_path / "var"
    served_with = {
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
        "HOOKSVC_OIDC_ISSUER": ISSUER,
        "HOOKSVC_OIDC_CLIENT_ID": "hooksvc",
        "HOOKSVC_OIDC_CLIENT_SECRET": "client-secret-never-recorded",
        "HOOKSVC_ROLES_FILE": "roles.yaml",  # relative to where `make run` started
    }
    here = os.getcwd()
    os.chdir(started_in)
    try:
        devrun.write(data_dir, served_with, make_run_process.pid)
    finally:
        os.chdir(here)
    record = devrun.path(data_dir).read_text()
    assert "client-secret-never-recorded" not in record
    assert json.loads(record)["environment"]["HOOKSVC_ROLES_FILE"] == str(started_in / "roles.yaml")

    elsewhere = tmp_path / "another-shell"
    elsewhere.mkdir()
    code, out, err = _manage(data_dir, elsewhere, "workflows", "list", "--as", "ann@example.com")
    assert code == 0, err
    assert "team-a-prod" in out and "team-b-prod" not in out, out
    assert "note:" not in err, err

    # A shell that exports a setting otherwise is told that its answers follow its own.
    code, out, err = _manage(
        data_dir,
        elsewhere,
        *("workflows", "list", "--as", "ann@example.com"),
        env={"HOOKSVC_ROLES_FILE": ""},
    )
    assert code == 0, err
    assert "team-a-prod" not in out
    assert "this shell sets HOOKSVC_ROLES_FILE otherwise than the `make run` beside it" in err
    assert "ann@example.com gets no role: HOOKSVC_ROLES_FILE is unset" in err


@pytest.mark.django_db
def test_the_cli_as_a_person_of_a_provider_it_does_not_know_says_what_it_lacks() -> None:
    _run("team-a")
    _ann()
    with pytest.raises(CommandError) as caught:
        call_command("workflows", "list", "--as", "ann@example.com", stdout=io.StringIO())
    said = str(caught.value)
    assert f"'ann@example.com' signs in through {ISSUER}" in said
    assert "no provider (HOOKSVC_OIDC_ISSUER is unset)" in said
    assert "var/make-run.json" in said


@pytest.mark.django_db(transaction=True)
def test_a_cli_action_prints_its_answer_and_no_log_line_after_it(
    tmp_path: Path, make_run_process: subprocess.Popen[bytes]
) -> None:
    """The action's INFO log line ("operator cli:... did release ...") came on the terminal
    after its answer; it is for the server's log, and `workflows -v 2 ...` still shows it."""
    run = _run("team-a")
    devrun.write(tmp_path, {"DATABASE_URL": _database_url()}, make_run_process.pid)
    release = ("workflows", "release", str(run.pk), "--reason", "CAB-1", "--actor", "ops:ann")
    code, out, err = _manage(tmp_path, servers.ROOT, *release)
    assert code == 0, err
    assert out.startswith(f"run {run.pk}: release recorded"), out
    assert err == "", err
    cancel = ("cancel", str(run.pk), "--reason", "CAB-2", "--actor", "ops:ann")
    code, out, err = _manage(tmp_path, servers.ROOT, "workflows", "-v", "2", *cancel)
    assert code == 0, err
    assert out.startswith(f"run {run.pk}: cancel"), out
    assert "operator ops:ann did cancel" in err, err
