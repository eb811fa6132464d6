"""The Dockerfile, read statically (no Docker engine needed): multi-stage, non-root, no
compilers or pip caches in the final stage, production settings, the entrypoint.
"""

from __future__ import annotations

import re
import subprocess

from hooksvc.serving import gunicorn_conf
from tests.deploy import manifests


def _stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuations joined, comments dropped) per stage."""
    text = (manifests.ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    instructions = re.sub(r"\\\n", " ", "\n".join(lines)).splitlines()
    stages: list[list[str]] = [[]]
    for instruction in filter(str.strip, instructions):
        if instruction.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(instruction.strip())
    return stages


def test_the_image_is_built_in_stages_on_python_311_slim() -> None:
    preamble, *stages = _stages()
    assert len(stages) >= 2
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in preamble
    assert stages[-1][0] == "FROM ${PYTHON_IMAGE} AS final"
    assert any(line.startswith("COPY --from=builder /opt/venv") for line in stages[-1])


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [line.split()[1] for line in _stages()[-1] if line.startswith("USER ")]
    assert len(users) == 1
    uid = users[0].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, f"USER {users[0]} must be a numeric non-root UID"
    # The Kubernetes pods run as that UID.
    assert "runAsUser: 10001" in (manifests.K8S / "base" / "web.yaml").read_text()
    assert uid == "10001"


def test_no_pip_cache_and_no_compiler_reach_the_final_stage() -> None:
    stages = _stages()
    installs = [line for stage in stages for line in stage if "pip install" in line]
    assert installs
    for line in installs:
        assert "--no-cache-dir" in line, line
    final = " ".join(stages[-1])
    for word in ("gcc", "build-essential", "apt-get install", "pip install"):
        assert word not in final, f"{word!r} in the final stage"


def test_the_image_runs_production_settings_through_the_entrypoint() -> None:
    final = _stages()[-1]
    env = " ".join(line for line in final if line.startswith("ENV "))
    assert "HOOKSVC_ENV=production" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert 'ENTRYPOINT ["/app/docker-entrypoint.sh"]' in final
    assert 'CMD ["web"]' in final


def test_the_entrypoint_execs_each_process_with_beats_schedule_in_tmp() -> None:
    script = (manifests.ROOT / "docker-entrypoint.sh").read_text()
    assert "exec gunicorn -c python:hooksvc.serving.gunicorn_conf hooksvc.wsgi" in script
    assert "exec celery -A hooksvc worker -l INFO" in script
    assert "exec celery -A hooksvc beat -l INFO -s /tmp/celerybeat-schedule" in script
    assert "exec python manage.py migrate --noinput" in script


def test_the_build_context_leaves_out_local_state() -> None:
    rules = (manifests.ROOT / ".dockerignore").read_text().splitlines()
    # Everything is excluded first, then only what the image copies is let back in.
    effective = [r for r in rules if r and not r.startswith("#")]
    assert effective[0] == "**"
    assert not any(r.startswith("!") and (".env" in r or "var" in r) for r in effective)


def test_gunicorn_opens_no_control_socket_on_the_read_only_root() -> None:
    assert gunicorn_conf.control_socket_disable is True


def test_the_image_requirements_bring_what_the_redis_broker_imports() -> None:
    # kombu's Redis transport imports `packaging`, declared only by its `redis` extra; the
    # dev virtualenv has it through pytest, the image only through this extra.
    base = (manifests.ROOT / "requirements" / "base.txt").read_text().splitlines()
    assert any(line.startswith("celery[redis]==") for line in base)
    prod = (manifests.ROOT / "requirements" / "prod.txt").read_text().splitlines()
    assert "-r base.txt" in prod


def test_the_dockerfile_names_no_frontend_to_fetch() -> None:
    # `# syntax=` makes BuildKit pull that frontend image from a registry before building.
    first = (manifests.ROOT / "Dockerfile").read_text().splitlines()
    assert not any(re.match(r"#\s*syntax\s*=", line, flags=re.IGNORECASE) for line in first)


def test_make_image_builds_with_the_script_the_image_tests_use() -> None:
    dry = subprocess.run(
        ["make", "-n", "image", "IMAGE=example/hooksvc:1"],
        cwd=manifests.ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "scripts/build-image example/hooksvc:1" in dry.stdout
