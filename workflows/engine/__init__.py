"""The workflow engine: workers advance runs and attempt their steps; PostgreSQL is the truth.

- `scheduling`: advance a run under its row lock (start, promote, settle, deadline).
- `attempts`: attempt one step (call its function once, record the outcome, retry policy).
- `polls`: batched polls of steps that wait long.
- `reconciler`: re-enqueue work whose wake-up is overdue.
- `transitions`: every state change, compare-and-set, with its audit event.
- `cleanups`: a step type's cleanup after its step stopped early.
- `dispatch`: every message to the broker, after commit. `observe`: events for metrics.
- `messages`: every deterministic message. `sql`: every hand-written statement.
- `clock`: the time, one seam for tests.

The hook path (workflows.hookpath) creates runs and wakes the engine through `dispatch`.
"""
