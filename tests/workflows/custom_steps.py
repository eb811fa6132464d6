"""A custom step type as a user writes one; the tests load it through HOOKSVC_STEP_MODULES."""

from __future__ import annotations

from workflows import errors
from workflows.steps import registry


def _check_channel(channel: str) -> str:
    if not channel.startswith("#"):
        raise registry.ParamError("", "must start with '#'")
    return channel


@registry.step_type(
    "chat_notify",
    params={
        "channel": registry.Param(str, required=True, check=_check_channel),
        "mentions": registry.Param(int, default=0, minimum=0),
    },
)
def chat_notify(ctx: registry.StepContext) -> registry.Outcome:
    """Posts a line to a chat channel (here: records it in memo, once)."""
    if ctx.memo.get("posted"):  # a re-run after a crash must not post twice
        return registry.Done({"posted": ctx.memo["posted"]})
    if ctx.params["channel"] == "#down":
        raise errors.TemporaryError("chat is unavailable")
    ctx.memo["posted"] = f"{ctx.params['channel']}: {ctx.cluster.get('name')} {ctx.object_name()}"
    return registry.Done({"posted": ctx.memo["posted"]})
