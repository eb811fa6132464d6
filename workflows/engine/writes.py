"""What a step's next state looks like: the Write that workflows.engine.lifecycle decides and
workflows.engine.stepstate applies, what a decision reads of a step (StepRow), what an
attempt came to (Result), and how a Write is applied (Path, Route). Shapes only: which
Write follows which event is lifecycle's alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any, Protocol

from workflows import errors
from workflows.states import STEP_FINISHED, Step
from workflows.steps import registry


class StepRow(Protocol):
    """The columns of a step its rules read (a StepRun is one)."""

    state: Any
    type: str
    name: str
    params: Any
    depends_on: Any
    failures: int
    failing_since: datetime.datetime | None
    retries: int
    retry_for_seconds: int
    started_at: datetime.datetime | None
    timeout_seconds: int | None
    call_timeout_seconds: int | None
    due_at: datetime.datetime | None
    memo: Any
    output: Any
    message: str
    unrecorded: int
    lost_by: str


class Event(enum.Enum):
    """What the run's history keeps of a write (RunEvent)."""

    NONE = "none"
    #: "from->to", with the write's actor and reason.
    TRANSITION = "transition"
    #: A failed attempt that will be retried: attempt N, its error, the next attempt's time.
    RETRY = "retry"


@dataclasses.dataclass(frozen=True)
class Write:
    """A step's next state as what to write: decided here, applied by stepstate."""

    #: The state it moves to (the same one for a repeated poll or an approval).
    to: str
    #: The columns it writes besides `state`.
    columns: Mapping[str, Any]
    #: The row must be in one of these states, else nothing is written.
    allowed_from: tuple[str, ...]
    #: The row must still carry the attempt's lease (its token and owner).
    by_lease: bool = False
    event: Event = Event.NONE
    #: A message attempts it at its new `due_at` (a retry, a short wait, an approval); else
    #: the batch poller finds it by its due_at (a long wait), or nothing does (finished).
    countdown: bool = False
    #: The step type's cleanup runs once it commits: what the stopped step may have made.
    cleanup: bool = False
    #: An Event on the Cluster: the run waits for a person now.
    announce_person: bool = False
    #: The run's message, where it still says the first, becomes the second (a step that
    #: says its own wait and now says something else: a gate that halts).
    retell: tuple[str, str] | None = None

    @property
    def finished(self) -> bool:
        return self.to in STEP_FINISHED


@dataclasses.dataclass(frozen=True)
class Result:
    """What one attempt of a claimed step came to (`outcome` None: handed back unattempted)."""

    step: StepRow
    run_name: str
    outcome: registry.Outcome | errors.StepError | None
    #: The step's memory after the attempt (the function changes it in place).
    memo: dict[str, Any]
    #: When the attempt ran, and when the step's clock started (its first claim).
    at: datetime.datetime
    started: datetime.datetime
    #: When the step's code returned (None: at `at`). A retry's backoff counts from here:
    #: from `at`, an attempt that ran longer than its backoff (a connect timeout) would be
    #: due again before its failure is even recorded.
    ended: datetime.datetime | None = None
    #: No other step of its run was unfinished when it was claimed: its success ends the run.
    last: bool = False

    @property
    def repeats(self) -> bool:
        """A waiting step that polls again (or goes back unpolled)."""
        waiting = self.step.state == Step.WAITING
        return waiting and (self.outcome is None or isinstance(self.outcome, registry.Poll))


class Path(enum.Enum):
    """How an attempt's Write is applied (stepstate renders each)."""

    #: In the run's scheduling transaction, under its row lock: the run settles after it.
    SCHEDULE = "schedule"
    #: A repeated poll: its own row, many in one statement.
    REPEAT = "repeat"
    #: A first poll its run does not show: its own row, one statement, no run lock.
    ALONE = "alone"
    #: A success that does not end its run, with the claim of the inline steps it makes due.
    CHAIN = "chain"
    #: A success that ends its run: the step, the run's move and its event, one statement.
    FINISH = "finish"


@dataclasses.dataclass(frozen=True)
class Route:
    path: Path
    #: ALONE: applied only while the run says this (else: SCHEDULE).
    run_says: str = ""
    #: The commit need not wait for the disk: an inline step's outcome (or a repeated poll)
    #: lost in a crash is made again alike.
    asynchronous: bool = False
