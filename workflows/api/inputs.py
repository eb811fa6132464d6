"""What the REST API's writes take, validated before any service is called.

Each field says what it is in the OpenAPI document; a value that fails is refused with
`invalid` and one entry per field (workflows.api.problems). Limits match the models'
(a reason is at most 500 characters, a step name 63).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from hooksvc.contract import catalog
from workflows.operators import actions, bulk, reasons, states
from workflows.rollout_actions import REASON_LENGTH

#: Run ids are PostgreSQL bigints; a larger number names no run (and must not reach SQL).
MAX_ID = 2**63 - 1


class Reason(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(
        max_length=actions.REASON_LENGTH, help_text="why, in your words (recorded with the action)"
    )

    def validate_reason(self, value: str) -> str:
        # A hint's `<why>` pasted as is is no reason (workflows.operators.reasons).
        wrong = reasons.problem(value)
        if wrong:
            raise serializers.ValidationError(wrong)
        return value


class StepReason(Reason):
    step = serializers.CharField(max_length=63, help_text="the step's name")


class Retry(Reason):
    step = serializers.CharField(
        max_length=63, required=False, help_text="one failed step; default: every failed step"
    )


#: The fleet's filters, as the fleet page and its bulk actions take them (a class built
#: from a mapping: `label` is also a Field's attribute).
FleetFilter = type(
    "FleetFilter",
    (serializers.Serializer,),
    {
        "namespace": serializers.CharField(max_length=253, required=False),
        "hook": serializers.ChoiceField(choices=list(catalog.MOMENTS), required=False),
        "template": serializers.CharField(max_length=63, required=False),
        "label": serializers.CharField(
            max_length=400, required=False, help_text="key=value: a label of the cluster"
        ),
        "state": serializers.ChoiceField(choices=states.State.values, required=False),
    },
)


#: A bulk action's filter: the fleet's, on one of its views (the clusters held, or the runs
#: that hold nothing), all pages.
BulkFilter = type(
    "BulkFilter",
    (FleetFilter,),
    {
        "view": serializers.ChoiceField(
            choices=["held", "background"], required=False, help_text="default held"
        )
    },
)


class Bulk(Reason):
    action = serializers.ChoiceField(choices=list(bulk.ACTIONS))
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        min_length=1,
        max_length=bulk.LIMIT,
        required=False,
        help_text="the runs to act on",
    )
    filter = BulkFilter(
        required=False,
        help_text="or every run of the fleet's view these find that the action applies to now",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("ids" in attrs) == ("filter" in attrs):
            raise serializers.ValidationError("give either ids or filter")
        return attrs


class BypassOpen(Reason):
    reason = serializers.CharField(
        max_length=200, help_text="why (recorded, and in every answer it makes)"
    )
    hook = serializers.ChoiceField(choices=list(catalog.BYPASSABLE))
    duration = serializers.CharField(
        max_length=20, help_text="how long: 30m, 2h, 1h30m, 1d (7d at most)"
    )
    selector = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="only clusters whose labels match (env=prod)",
    )
    namespace = serializers.CharField(
        max_length=63, required=False, allow_blank=True, help_text="only clusters in it"
    )


class RolloutReason(Reason):
    reason = serializers.CharField(
        max_length=REASON_LENGTH, help_text="why (recorded with the action)"
    )


class BypassEnd(Reason):
    reason = serializers.CharField(max_length=200, help_text="why it ends early")


class Document(serializers.Serializer):  # type: ignore[type-arg]
    """A document as `apply_workflows` reads it (apiVersion, kind, metadata, spec), as JSON."""

    apiVersion = serializers.CharField()
    kind = serializers.CharField()
    metadata = serializers.DictField(child=serializers.JSONField())
    spec = serializers.DictField(child=serializers.JSONField())
