"""A two-wave rollout for tests that run the real servers: canary checks at
AfterClusterUpgrade (a second, failing check for clusters labelled `health: bad`), and the
main wave gated on two canaries at BeforeClusterUpgrade."""

from __future__ import annotations

from tests.support import workflows as wf


def templates(*, poll_seconds: float = 2) -> None:
    wf.template(
        "canary-checks",
        hook="AfterClusterUpgrade",
        steps=[{"name": "check", "type": "noop"}],
        clusterSelector={"matchLabels": {"ring": "canary"}},
    )
    wf.template(
        "canary-health",
        hook="AfterClusterUpgrade",
        steps=[{"name": "health", "type": "flaky", "retries": 0, "retryForSeconds": 0}],
        clusterSelector={"matchLabels": {"health": "bad"}},
    )
    gate = {"matchLabels": {"ring": "canary"}, "count": 2, "pollSeconds": poll_seconds}
    wf.template(
        "wave-main",
        steps=[{"name": "canaries", "type": "gate", "with": gate}],
        clusterSelector={"matchLabels": {"ring": "main"}},
        retryAfterSeconds=30,
    )
