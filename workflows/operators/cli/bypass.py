"""`workflows bypass`: break glass. Open a bypass, list those in force, end one early.

Opening needs --hook, --for and --reason (--selector and --namespace narrow it); the
bypass ends by itself when its time is up. Everything goes through
workflows.operators.bypasses, which checks before it writes (`BypassError`, or
`access.Denied` for what `--as USER` may not do, exits 1 with its message) and records who
and why.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from hooksvc.contract import catalog
from workflows.engine import messages
from workflows.hookpath import bypass as hook_bypass
from workflows.operators import access, bypasses
from workflows.operators.cli import output

#: What only opening a bypass takes, by option.
_OPEN_ONLY = {"hook": "--hook", "selector": "--selector", "namespace": "--namespace"}


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser(
        "bypass",
        help="bypass a hook (break glass): answer its calls Success without runs, for a while",
        description=(
            "While a bypass is in force, the hook's calls for matching clusters answer Success "
            "and start no run; runs that exist are left as they are. Who, why and until when "
            "are in every such answer's message (and so in the admin's hook calls)."
        ),
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="the bypasses in force")
    mode.add_argument("--end", type=int, metavar="ID", help="end bypass ID before it expires")
    parser.add_argument("--hook", metavar="HOOK", help=f"one of: {', '.join(catalog.BYPASSABLE)}")
    parser.add_argument(
        "--selector", metavar="LABELSELECTOR", help="only clusters whose labels match (env=prod)"
    )
    parser.add_argument("--namespace", metavar="NS", help="only clusters in this namespace")
    parser.add_argument(
        "--for",
        dest="duration",
        metavar="DURATION",
        help="how long: 30m, 2h, 1h30m, 1d (7d at most)",
    )
    parser.add_argument("--reason", metavar="TEXT", help="why (recorded, and in every answer)")
    output.add_who(parser, acts=True)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.set_defaults(handler=handle)


def handle(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    try:
        if options["list"]:
            _refuse(options, (*_OPEN_ONLY, "duration", "reason", "actor"), "--list")
            _list(stdout, options)
        elif options["end"] is not None:
            _refuse(options, (*_OPEN_ONLY, "duration"), "--end")
            _end(stdout, options)
        else:
            _open(stdout, options)
    except (bypasses.BypassError, access.Denied) as exc:
        raise CommandError(str(exc)) from None


def _refuse(options: dict[str, Any], names: tuple[str, ...], mode: str) -> None:
    given = [_flag(n) for n in names if options[n] is not None]
    if given:
        raise CommandError(f"{mode} takes no {', '.join(given)}")


def _flag(name: str) -> str:
    return _OPEN_ONLY.get(name) or {"duration": "--for"}.get(name) or f"--{name}"


def _open(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    missing = [_flag(n) for n in ("hook", "duration", "reason") if not options[n]]
    if missing:
        raise CommandError(
            f"a bypass needs {', '.join(missing)} (or use --list, or --end ID to end one)"
        )
    duration = bypasses.parse_duration(options["duration"])
    bypass = bypasses.bypass_open(
        hook=options["hook"],
        selector=options["selector"] or "",
        namespace=options["namespace"] or "",
        duration=duration,
        actor=output.actor_of(options, acts=True),
        reason=options["reason"],
    )
    shown = bypasses.shown(bypass)
    stdout.write(
        f"bypass {bypass.pk} in force until {hook_bypass.until(bypass.expires_at)}: "
        f"{shown.scope} answer Success without runs\n"
        f"end it early with `{messages.bypass_end_command(bypass.pk)}`"
    )


def _end(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    if not options["reason"]:
        raise CommandError("ending a bypass needs --reason")
    bypass = bypasses.bypass_end(
        bypass_id=options["end"],
        actor=output.actor_of(options, acts=True),
        reason=options["reason"],
    )
    stdout.write(f"bypass {bypass.pk} ended: {bypass.hook} calls start runs again")


def _list(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    found = bypasses.active(actor=output.actor_of(options, acts=False))
    if options["output"] == "json":
        output.write_json(stdout, [bypasses.summary(b) for b in found])
        return
    if not found:
        stdout.write("no bypass in force")
        return
    header = ["ID", "HOOK", "NAMESPACE", "SELECTOR", "BY", "UNTIL", "REASON"]
    rows = [
        [b.pk, b.hook, b.namespace, b.selector, b.actor, hook_bypass.until(b.expires_at), b.reason]
        for b in found
    ]
    stdout.write(output.table([header, *rows]))
