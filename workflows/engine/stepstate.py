"""The one writer of a step's row: it applies what workflows.engine.lifecycle decides.

A step's state, lease and attempt columns change only here, and only as a `writes.Write`
says: this module renders a Write as SQL (and onto the StepRun the caller holds) and
decides nothing. Every write ends or checks a lease, so an attempt whose step moved
meanwhile finds its lease lost and its outcome is dropped.

- `apply`: a Write under the run's lock (writes.Path.SCHEDULE, every operator's and the
  deadline's): one compare-and-set UPDATE (the row's states, and for an attempt its lease),
  its RunEvent, and what follows once it commits (a countdown, the cleanup, an Event).
- `apply_alone`, `apply_repeats`, `apply_chain`, `apply_finish`: the fast paths
  (lifecycle.route), each the same Write as one statement of queries.sql.
- `claim`, `claim_promoted`, `claim_due_waiting`: leases (queries.sql `claim_*`).
- `start`: a run's move to running, its event and its step rows (lifecycle.created), one
  statement.
- `extend_leases`, `free_leases` (the heartbeat), `free_leases_of` (the reaper), `make_due`
  (a rollout's gates), `note_stalls` (a stall's Event sent): columns that are no state.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import Any, Protocol

from django.db import transaction
from django.utils import timezone

from workflows import clock
from workflows.definitions import typed
from workflows.engine import dispatch, lifecycle, messages, sql, transitions, writes
from workflows.models import Run, RunEvent, StepRun

#: The row was not in a state the transition starts from (runs' and steps' alike).
InvalidTransition = transitions.InvalidTransition


class LeaseLost(InvalidTransition):
    """The step no longer carries the attempt's lease: it passed and was claimed again, or
    someone else (an operator, the deadline) moved the step on."""


class Held(Protocol):
    """What identifies a lease on a row (workflows.engine.leases.Lease)."""

    @property
    def token(self) -> int: ...
    @property
    def owner(self) -> str: ...


def apply(
    step: StepRun,
    write: writes.Write,
    *,
    lease: Held | None = None,
    run: Run | None = None,
    actor: str = "",
    reason: str = "",
) -> None:
    """Apply `write` to `step` by compare-and-set (by `lease` when the write is an
    attempt's); record it and send what follows once the transaction commits.

    Raises LeaseLost (by lease) or InvalidTransition when the row moved on meanwhile.
    """
    rows = StepRun.objects.filter(pk=step.pk, state__in=write.allowed_from)
    if write.by_lease:
        if lease is None:
            raise ValueError(f"step {step.pk}: an attempt's write needs its lease")
        rows = rows.filter(claims=lease.token, lease_owner=lease.owner)
    if not rows.update(state=write.to, **write.columns):
        if write.by_lease:
            raise LeaseLost(f"step {step.pk} no longer carries claim {lease.token if lease else 0}")
        raise InvalidTransition(f"step {step.pk} is not in {list(write.allowed_from)}")
    previous = step.state
    _mirror(step, write)
    if write.event == writes.Event.TRANSITION and previous != write.to:
        RunEvent.objects.create(
            run_id=step.run_id,
            step_name=step.name,
            kind=RunEvent.Kind.TRANSITION,
            name=f"{previous}->{write.to}",
            actor=actor,
            reason=reason,
            message=step.message,
        )
    elif write.event == writes.Event.RETRY:
        transitions.retry_record(step, error=step.message, next_at=write.columns["due_at"])
    _follow(step, write, run)


def _mirror(step: StepRun, write: writes.Write) -> None:
    """The caller's StepRun as the row now is."""
    step.state = write.to
    for name, value in write.columns.items():
        setattr(step, name, value)


def _follow(step: StepRun, write: writes.Write, run: Run | None) -> None:
    """What follows a write once it commits."""
    if write.countdown and step.due_at is not None:
        dispatch.poll_step(step.pk, max(0.0, (step.due_at - clock.now()).total_seconds()))
    if write.cleanup:
        dispatch.step_cleanups([step.pk])
    if write.announce_person and run is not None:
        _announce_person(run, step)


def _announce_person(run: Run, step: StepRun) -> None:
    """An Event on the Cluster: the run waits for a person, what for, and how to approve."""
    moment = f"{run.hook} {run.moment}" if run.moment else run.hook
    waiting, asks = lifecycle.asks_person(step)
    text = messages.run_awaiting_person(
        run.pk, run.template_name, waiting, step.name, moment=moment, asks=asks
    )
    dispatch.cluster_event(run.pk, dispatch.AWAITING_APPROVAL, text)


# --- The fast paths: the same Write, one statement each ---------------------------------------


def _commit(route: writes.Route) -> str:
    return "off" if route.asynchronous else "on"


def apply_alone(step: StepRun, write: writes.Write, *, lease: Held, route: writes.Route) -> bool:
    """A first poll on the step's row alone, while its run says `route.run_says`
    (queries.sql `record_first_poll`); whether it was written."""
    columns = write.columns
    output = columns.get("output")
    written = sql.named(
        "record_first_poll",
        {
            "commit": _commit(route),
            "id": step.pk,
            "token": lease.token,
            "owner": lease.owner,
            "due_at": columns["due_at"],
            "memo": json.dumps(columns["memo"]),
            "message": columns["message"],
            "output": json.dumps(output) if output is not None else None,
            "started_at": columns["started_at"],
            "run_says": route.run_says,
        },
    )
    if written:
        _mirror(step, write)
        _follow(step, write, None)
    return bool(written)


def apply_repeats(items: Sequence[tuple[StepRun, writes.Write, Held]]) -> set[int]:
    """Repeated polls (and handed-back steps) of one owner, in one statement, asynchronously
    committed (a crash may lose the last polls: the steps are polled again, which steps
    allow); then the run messages that follow their steps'. The ids written."""
    if not items:
        return set()
    arrays: dict[str, list[Any]] = {
        name: [] for name in ("ids", "tokens", "due_at", "memo", "message", "output", "started_at")
    }
    for step, write, lease in items:
        columns = write.columns
        arrays["ids"].append(step.pk)
        arrays["tokens"].append(lease.token)
        arrays["due_at"].append(columns["due_at"])
        for name in ("memo", "output"):
            value = columns.get(name)
            arrays[name].append(json.dumps(value) if value is not None else None)
        arrays["message"].append(columns.get("message"))
        arrays["started_at"].append(columns.get("started_at"))
    with transaction.atomic():
        sql.named("asynchronous_commit")
        found = sql.named("record_repeats", {**arrays, "owner": items[0][2].owner})
        written = {row["id"] for row in found}
        for step, write, _ in items:
            if step.pk in written:
                _mirror(step, write)
                _follow(step, write, None)
    for step, write, _ in items:
        if step.pk in written and write.retell is not None:
            _retell(step.run_id, write.retell)
    return written


def _retell(run_id: int, retell: tuple[str, str]) -> None:
    """The run's message follows its step's, by compare-and-set on what it said, in its own
    statement after the steps' commit (a run's lock comes before its steps')."""
    said, says = retell
    Run.objects.filter(pk=run_id, state=Run.State.RUNNING, message=said).update(message=says)


def apply_chain(
    step: StepRun,
    write: writes.Write,
    *,
    lease: Held,
    route: writes.Route,
    run_id: int,
    now: datetime.datetime,
    expires: datetime.datetime,
    ahead: Sequence[tuple[StepRun, writes.Write, dict[str, Any]]] = (),
) -> Chained | None:
    """A success, the steps run ahead of their claim (each with its Write and the memo its
    code saw: all written or none), and the claim of the inline steps they make due, one
    statement (queries.sql `succeed_and_claim_next`): None when the run is not running
    (nothing written); else what was written and claimed."""
    found = sql.named(
        "succeed_and_claim_next",
        {
            **_success(step, write, lease=lease, route=route, run_id=run_id, now=now),
            "expires": expires,
            "inline": lifecycle.inline_types(),
            "ahead_ids": [s.pk for s, _, _ in ahead],
            "ahead_seen": [json.dumps(seen) for _, _, seen in ahead],
            "ahead_memo": [json.dumps(w.columns["memo"]) for _, w, _ in ahead],
            "ahead_output": [json.dumps(w.columns["output"]) for _, w, _ in ahead],
            "ahead_started_at": [w.columns["started_at"] for _, w, _ in ahead],
            "ahead_finished_at": [w.columns["finished_at"] for _, w, _ in ahead],
        },
        json=CLAIM_JSON,
    )
    if not found:
        return None
    if not found[0]["recorded"]:
        return Chained(recorded=False, ran=[], claimed=[], left=[])
    _mirror(step, write)
    ran = [s for s, _, _ in ahead] if found[0]["ran"] else []
    for each, each_write, _ in ahead if ran else ():
        _mirror(each, each_write)
    rows = [row for row in found if row["id"] is not None]
    return Chained(
        recorded=True,
        ran=ran,
        claimed=[row for row in rows if row["claimed"]],
        left=[row for row in rows if not row["claimed"]],
    )


@dataclasses.dataclass(frozen=True)
class Chained:
    """What the chain's statement wrote: the success (False: its lease was lost, nothing
    written), the steps run ahead (none, or all that were given), the claimed rows, and the
    run's pending steps left when it claimed one step and nothing else of the run is
    unfinished (what the next chain may run ahead)."""

    recorded: bool
    ran: list[StepRun]
    claimed: list[dict[str, Any]]
    left: list[dict[str, Any]]


def _success(
    step: StepRun,
    write: writes.Write,
    *,
    lease: Held,
    route: writes.Route,
    run_id: int,
    now: datetime.datetime,
) -> dict[str, Any]:
    """The parameters of a success recorded by its lease, shared by the chain's statement
    and the run's end."""
    columns = write.columns
    return {
        "run": run_id,
        "commit": _commit(route),
        "id": step.pk,
        "token": lease.token,
        "owner": lease.owner,
        "memo": json.dumps(columns["memo"]),
        "output": json.dumps(columns["output"]),
        "started_at": columns["started_at"],
        "finished_at": columns["finished_at"],
        "now": now,
    }


def apply_finish(
    step: StepRun,
    write: writes.Write,
    *,
    lease: Held,
    route: writes.Route,
    run_id: int,
    now: datetime.datetime,
) -> dict[str, Any] | None:
    """The last step's success and its run's end, one statement (queries.sql
    `succeed_and_finish_run`): the run's row as finished, or None when nothing was written
    (the lease was lost, the run is not running or its deadline passed, or another step is
    unfinished again): then the run's scheduling decides."""
    found = sql.named(
        "succeed_and_finish_run",
        {
            **_success(step, write, lease=lease, route=route, run_id=run_id, now=now),
            # A RunEvent's time is Django's (auto_now_add), as transitions.run_move's event.
            "at": timezone.now(),
        },
        json=("spec",),
    )
    if not found:
        return None
    _mirror(step, write)
    return found[0]


# --- Claims ------------------------------------------------------------------------------------

#: The JSON columns a claim returns (the step's and its run's context).
CLAIM_JSON = ("params", "memo", "output", "context", "depends_on")


def claim(
    ids: Sequence[int],
    *,
    now: datetime.datetime,
    owner: str,
    expires: datetime.datetime,
    promote: bool = False,
) -> list[dict[str, Any]]:
    """Lease the claimable steps among `ids` (with `promote`: pending steps whose
    dependencies are done, promoted in the same statement); each claimed row."""
    if not ids:
        return []
    params = {"ids": list(ids), "now": now, "owner": owner, "expires": expires}
    return sql.named("claim_promoted" if promote else "claim_steps", params, json=CLAIM_JSON)


def claim_due_waiting(
    limit: int, *, now: datetime.datetime, owner: str, expires: datetime.datetime
) -> list[dict[str, Any]]:
    """Lease up to `limit` claimable waiting steps, most overdue first; each claimed row."""
    params = {"limit": limit, "now": now, "owner": owner, "expires": expires}
    return sql.named("claim_due_waiting", params, json=CLAIM_JSON)


# --- A run's steps as it starts -------------------------------------------------------------


def start(
    run: Run,
    steps: Sequence[typed.Step],
    *,
    message: str,
    now: datetime.datetime,
    wake_at: datetime.datetime | None,
) -> list[dict[str, Any]]:
    """The pending `run` starts (its caller holds its lock): running, its event, and its step
    rows as lifecycle.created says, one statement (queries.sql `start_run`); the rows it
    made (as queries.sql `run_steps` reads them: fewer than `steps` when some were there).

    Raises InvalidTransition when the run was not pending."""
    made = [
        lifecycle.created(
            type_name=s.type, params=s.params, timeout=s.timeout_seconds, stall=s.stall_seconds
        )
        for s in steps
    ]
    found = sql.named(
        "start_run",
        {
            "run": run.pk,
            "message": message,
            "now": now,
            "wake_at": wake_at,
            # A RunEvent's time is Django's (auto_now_add), as transitions.run_move's event.
            "at": timezone.now(),
            "names": [s.name for s in steps],
            "positions": list(range(len(steps))),
            "types": [s.type for s in steps],
            "params": [json.dumps(dict(s.params)) for s in steps],
            "depends_on": [json.dumps(list(s.depends_on)) for s in steps],
            "retries": [s.retries for s in steps],
            "retry_for_seconds": [s.retry_for_seconds for s in steps],
            "states": [str(m["state"]) for m in made],
            "timeouts": [m["timeout_seconds"] for m in made],
            "call_timeouts": [m["call_timeout_seconds"] for m in made],
            "waits_for_person": [m["waits_for_person"] for m in made],
            "stalls": [m["stall_seconds"] for m in made],
        },
        json=("depends_on",),
    )
    if not found:
        raise InvalidTransition(f"run {run.pk} is not in ['pending']")
    return [{k: v for k, v in row.items() if k != "moved"} for row in found if row["id"]]


# --- Columns that are no state: leases, wake-ups, stall notices ----------------------------


def extend_leases(
    ids: Sequence[int], tokens: Sequence[int], expires: Sequence[datetime.datetime], owner: str
) -> int:
    """Move the expiry of the leases `owner` still holds; how many."""
    params = {"ids": list(ids), "tokens": list(tokens), "expires": list(expires), "owner": owner}
    return sql.count("extend_leases", params)


def free_leases(ids: Sequence[int], tokens: Sequence[int], owner: str) -> int:
    """End the leases `owner` still holds (outcomes it could not record); how many."""
    return sql.count("free_leases", {"ids": list(ids), "tokens": list(tokens), "owner": owner})


def free_leases_of(owners: Sequence[str]) -> list[int]:
    """End every lease the dead processes `owners` held; each freed step's id."""
    return [int(row["id"]) for row in sql.named("free_leases_of", {"owners": list(owners)})]


def make_due(ids: Sequence[int], at: datetime.datetime) -> int:
    """Make the steps `ids` due at `at` (an operator let their gates go on); a lease on one
    stays: its attempt is polling it and sees the change as it does. How many."""
    return StepRun.objects.filter(pk__in=list(ids)).update(due_at=at)


def note_stalls(ids: Sequence[int], at: Any) -> int:
    """Record that the stall of the steps `ids` was noticed (its Event sent) at `at` (a time,
    or the database's clock as an expression); how many."""
    return StepRun.objects.filter(pk__in=list(ids)).update(stall_noticed_at=at)
