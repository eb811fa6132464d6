"""Files steps keep with their run (`StepArtifact`): written by a step, read by the admin.

A step stores a file while the engine holds its row, so the file and the step's outcome
commit together; storing again (a repeated attempt) replaces the file.
"""

from __future__ import annotations

from workflows.models import StepArtifact, StepRun


def artifact_store(
    *, run_id: int, step_name: str, name: str, content: bytes, content_type: str
) -> StepArtifact:
    """Keep `content` as the step's file `name`, replacing an earlier one."""
    step = StepRun.objects.only("pk").get(run_id=run_id, name=step_name)
    artifact, _ = StepArtifact.objects.update_or_create(
        step=step,
        name=name,
        defaults={"content": content, "size": len(content), "content_type": content_type},
    )
    return artifact


def artifact_get(*, run_id: int, step_name: str, name: str) -> StepArtifact | None:
    return StepArtifact.objects.filter(step__run_id=run_id, step__name=step_name, name=name).first()
