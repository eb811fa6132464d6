"""The workflow engine: workers advance runs and attempt their steps; PostgreSQL is the truth.

- `lifecycle`: a step's life in one place: for its state and an event, the Write that
  follows (retries, the error budget, the next poll, timeouts, lost attempts, operators).
- `stepstate`: the one writer of a step's row: applies lifecycle's Writes, decides nothing.
- `queries.sql`: every statement of the engine, named (`sql` loads them).
- `scheduling`: advance a run under its row lock (start, promote, settle, deadline).
- `attempts`: attempt one step (call its function once, bounded; record its outcome).
- `polls`: batched polls of steps that wait long.
- `reconciler`: re-enqueue work whose wake-up is overdue.
- `transitions`: a run's state changes, compare-and-set, and the audit trail.
- `cleanups`: a step type's cleanup after its step stopped early.
- `dispatch`: every message to the broker, after commit. `observe`: events for metrics.
- `messages`: every deterministic message. `sql`: the statements' loader, the hook path's.

The time is read through the project's one clock, workflows.clock (the step types read it
too, so it sits below them).

The hook path (workflows.hookpath) creates runs and wakes the engine through `dispatch`.
"""

from __future__ import annotations
