"""Operators' in-place and upgrade policies: a model of the workflows app (workflows.Policy),
kept apart from workflows.models for that module's size; that module imports it, so that
Django finds it with the others."""

from __future__ import annotations

from django.db import models


class Policy(models.Model):
    """An operator's InPlacePolicy or UpgradePolicy (workflows.definitions.policies).

    Read by the CanUpdate* and GenerateUpgradePlan hooks, written like templates (a name
    belongs to one source, `managed_by`) and never by a hook call.
    """

    class Kind(models.TextChoices):
        IN_PLACE = "InPlacePolicy"
        UPGRADE = "UpgradePolicy"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    name = models.CharField(max_length=63)
    #: The validated `spec` of the document.
    spec = models.JSONField()
    generation = models.PositiveIntegerField(default=1)
    #: "" for an operator's (apply_workflows, the admin); "resource" for a custom resource's.
    managed_by = models.CharField(max_length=80, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind", "name"]
        verbose_name_plural = "policies"
        constraints = [
            models.UniqueConstraint(fields=["kind", "name"], name="workflows_policy_kind_name_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
