"""`workflows retry|cancel|approve|skip|release`: one operator action on one run.

Each calls workflows.operators.actions, which locks, checks, records who and why, and wakes
the engine; an action that does not apply (`actions.ActionError`), or that `--as USER` may
not take there (`access.Denied`), exits 1 with its message. One whose effect is there
already (approved, released, running: `actions.AlreadyDone`) says so and exits 0,
changing nothing, as the REST API answers it.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from workflows.operators import access, actions
from workflows.operators.cli import output

#: Each action: its help, and whether it takes --step ("optional", "required" or None).
ACTIONS = {
    "retry": ("run failed or cancelled steps again", "optional"),
    "cancel": ("stop a run (the lifecycle keeps holding)", None),
    "approve": ("approve an approval step", "required"),
    "skip": ("skip a step; its dependents go on", "required"),
    "release": ("let the held lifecycle proceed", None),
}


def register(sub: argparse._SubParsersAction[Any]) -> None:
    for name, (helptext, step) in ACTIONS.items():
        action = sub.add_parser(name, help=helptext)
        action.add_argument("run_id", type=int, metavar="RUN_ID")
        if step:
            action.add_argument("--step", required=step == "required", metavar="NAME")
        action.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
        output.add_who(action, acts=True)
        action.set_defaults(handler=act)


def act(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    command = options["command"]
    common = {
        "run_id": options["run_id"],
        "actor": output.actor_of(options, acts=True),
        "reason": options["reason"],
    }
    try:
        if command == "retry":
            run = actions.run_retry(**common, step_name=options["step"] or "")
        elif command == "cancel":
            run = actions.run_cancel(**common)
        elif command == "approve":
            run = actions.step_approve(**common, step_name=options["step"])
        elif command == "skip":
            run = actions.step_skip(**common, step_name=options["step"])
        else:
            run = actions.run_release(**common)
    except actions.AlreadyDone as exc:
        # Idempotent, as the API is: done before, so nothing changed, and that is fine.
        stdout.write(f"{exc}: nothing changed")
        return
    except (actions.ActionError, access.Denied) as exc:
        raise CommandError(str(exc)) from None
    step = f" step {options['step']}" if options.get("step") else ""
    stdout.write(f"run {run.pk}{step}: {command} recorded (run is {run.state})")
