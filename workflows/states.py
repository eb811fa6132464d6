"""The states of runs and steps, as plain values: what the engine's rules and the models share.

The models (workflows.models) give these to Django as choices and CHECK constraints; the
rules of a step's life (workflows.engine.lifecycle) read them here, so that a decision
imports no database code. tests/workflows/test_lifecycle_home.py checks the two agree.
"""

from __future__ import annotations

import enum


class Run(enum.StrEnum):
    PENDING = "pending"  #: recorded; waiting to start (concurrency budget, waitFor)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Step(enum.StrEnum):
    PENDING = "pending"  #: its dependencies have not finished
    READY = "ready"  #: due at `due_at`
    WAITING = "waiting"  #: started; polled again at `due_at`
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


RUN_FINISHED = (Run.SUCCEEDED, Run.FAILED, Run.CANCELLED)
RUN_ACTIVE = (Run.PENDING, Run.RUNNING)

STEP_FINISHED = (Step.SUCCEEDED, Step.FAILED, Step.SKIPPED, Step.CANCELLED)
#: Finished in a way that lets dependent steps go on.
STEP_DONE = (Step.SUCCEEDED, Step.SKIPPED)
#: Started or about to: an attempt may claim it once its due_at has come.
STEP_DUE = (Step.READY, Step.WAITING)
