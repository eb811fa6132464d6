"""Keys of a step's memo that hooksvc itself writes or reads, beside the step type's own.

Operator actions (workflows.operators.actions) write these into a step's memo and step
types read them (or the other way round); both sides name them from here.
"""

from __future__ import annotations

#: Bumped by an operator's retry; `StepContext.object_name` adds it to the names of what
#: the step creates, so a retry's objects are not mistaken for the failed attempt's.
GENERATION = "generation"
#: Written by `approve` on a step that waits for a person: who approved it, and why.
APPROVED_BY = "approved_by"
APPROVAL_REASON = "reason"
