"""The error vocabulary of steps: what the engine retries and what it gives up on.

A step raises `TemporaryError` when trying again later can succeed (an API server that
does not answer, a kubeconfig Secret that does not exist yet) and `PermanentError` when it
cannot. The class docstring is the default message; messages reach the run's record and,
summarised, CAPI's conditions, so they must be deterministic and free of secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class StepError(Exception):
    """The step failed."""

    def __init__(
        self, message: str | None = None, *, output: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        #: What the step reports even though it failed (results, a log tail); kept on the run.
        self.output = output

    @property
    def message(self) -> str:
        return str(self.args[0])


class TemporaryError(StepError):
    """The step failed; trying again later can succeed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        delay: float | None = None,
        output: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, output=output)
        #: Seconds before the next attempt; None lets the step's backoff decide.
        self.delay = delay


class PermanentError(StepError):
    """The step failed; trying again will not help."""
