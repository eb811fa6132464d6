"""The record of operators' resumes and abandons of rollouts: a model of the workflows app
(workflows.RolloutAction), kept apart from workflows.models for that module's size; that
module imports it, so that Django finds it with the others."""

from __future__ import annotations

from typing import Any

from django.db import models

#: The longest reason the record keeps (the API's form and the service refuse a longer one).
REASON_LENGTH = 200


class RolloutAction(models.Model):
    """An operator's word on a halted rollout to `version` (workflows.operators.rollouts):
    resume (the failed canary runs in `runs` no longer halt the gates) or abandon (every
    gate of the version fails its run). Read by the `gate` step (workflows.steps.gate)."""

    class Kind(models.TextChoices):
        RESUME = "resume"
        ABANDON = "abandon"

    version = models.CharField(max_length=64)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    #: resume: the ids of the failed canary runs it set aside; abandon: the runs whose
    #: gates it failed.
    runs: Any = models.JSONField(default=list, blank=True)
    actor = models.CharField(max_length=150)
    actor_subject = models.CharField(max_length=255, blank=True)
    actor_email = models.CharField(max_length=254, blank=True)
    reason = models.CharField(max_length=REASON_LENGTH)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["version", "kind"], name="workflows_rollout_version_idx")]

    def __str__(self) -> str:
        return f"{self.kind} of the rollout to {self.version}"
