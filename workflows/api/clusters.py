"""`/clusters/{namespace}/{name}/why/`: what holds a cluster and the ways out, as `workflows
why` says it (workflows.operators.explain; the CLI's `-o json` prints this same answer).
A cluster the caller may not view, or that hooksvc never met, is not found."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from workflows.api import auth, runs, shapes
from workflows.api.fleet import ApartRun
from workflows.operators import explain

#: A namespace (a DNS-1123 label) and a Cluster's name (a DNS-1123 subdomain).
NAMESPACE = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
NAME = "[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"


#: The operator actions a way out names (SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES).
WAY_OUT_ACTIONS = ["approve", "retry", "release"]


def _text(help_text: str = "") -> serializers.CharField:
    return serializers.CharField(allow_blank=True, help_text=help_text or None)


WayOut = shapes._shape(
    "WayOut",
    {
        "label": serializers.CharField(),
        "action": serializers.ChoiceField(choices=WAY_OUT_ACTIONS),
        "run": serializers.IntegerField(help_text="the run to act on (maybe one it waits for)"),
        "step": _text(),
        "command": serializers.CharField(help_text="the CLI's command; POST runs/{run}/{action}/"),
    },
)
Stalled = shapes._shape(
    "Stalled",
    {
        "since": serializers.DateTimeField(help_text="when the step last made progress"),
        "for": serializers.CharField(help_text="how long it has made none: 25 min"),
        "normal": serializers.CharField(help_text="its type's normal bound: 15 min"),
        "waitsFor": _text(),
    },
)
StalledStep = shapes._shape(
    "StalledStep",
    {
        "name": serializers.CharField(),
        "type": serializers.CharField(),
        **Stalled._declared_fields,  # type: ignore[attr-defined]
    },
)
WhyRun = shapes._shape(
    "WhyRun",
    {
        "run": shapes.RunSummary(),
        "heldSince": serializers.DateTimeField(
            allow_null=True, help_text="when it began to hold its cluster; null: it holds nothing"
        ),
        "heldSeconds": serializers.IntegerField(
            allow_null=True, help_text="how long it has held it, in whole seconds; null: nothing"
        ),
        "heldFor": _text(help_text="the same for people: 12 min, since 2026-06-01 12:03:04 UTC"),
        "step": shapes._shape(
            "WhyStep",
            {
                "name": serializers.CharField(),
                "type": serializers.CharField(),
                "state": serializers.ChoiceField(choices=shapes.STEP_STATES),
                "since": serializers.DateTimeField(allow_null=True),
                "stalled": Stalled(
                    allow_null=True,
                    help_text="no progress for longer than its type says is normal"
                    " (docs/stalls.md)",
                ),
            },
        )(allow_null=True),
        "why": _text(),
        "message": _text(),
        "deadlineAt": serializers.DateTimeField(allow_null=True),
        "stalledSteps": StalledStep(many=True, help_text="each of its steps that is stalled"),
        "waysOut": WayOut(many=True),
    },
)
WhyGroup = shapes._shape(
    "WhyGroup",
    {
        "hook": serializers.ChoiceField(choices=shapes.MOMENTS),
        "moment": _text(),
        "machine": shapes.Machine(allow_null=True, help_text="UpdateMachine: the Machine"),
        "bypass": shapes._shape(
            "BypassInForce",
            {
                "id": serializers.IntegerField(),
                "actor": serializers.CharField(),
                "reason": serializers.CharField(),
                "expiresAt": serializers.DateTimeField(),
                "until": serializers.CharField(),
                "endCommand": serializers.CharField(),
            },
        )(allow_null=True),
        "lastCall": shapes._shape(
            "LastCall",
            {
                "at": serializers.DateTimeField(),
                "status": serializers.CharField(),
                "retryAfter": serializers.IntegerField(allow_null=True),
            },
        )(allow_null=True),
        "runs": WhyRun(many=True),
        "okToDelete": serializers.CharField(
            allow_null=True, help_text="CAPI's own way out of a held deletion"
        ),
    },
)
Why = shapes._shape(
    "Why",
    {
        "cluster": shapes._shape(
            "ClusterName", {"namespace": serializers.CharField(), "name": serializers.CharField()}
        )(),
        "runs": serializers.IntegerField(help_text="the cluster's runs you may view"),
        "held": serializers.BooleanField(),
        "groups": WhyGroup(many=True, help_text="each hook and moment that holds it"),
        "apart": ApartRun(many=True, help_text="unfinished runs that hold nothing"),
    },
)


class WhyView(generics.GenericAPIView):  # type: ignore[type-arg]
    pagination_class = None

    @extend_schema(responses={200: Why, **runs.errors(401, 403, 404, 429)})
    def get(self, request: Request, namespace: str, name: str) -> Response:
        """What holds each hook of the cluster, since when, why, and the ways out."""
        try:
            found = explain.cluster(namespace, name, actor=auth.actor(request))
        except explain.UnknownCluster as exc:
            raise exceptions.NotFound(str(exc)) from None
        return Response(found)
