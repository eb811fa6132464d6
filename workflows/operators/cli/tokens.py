"""`workflows token create|list|revoke`: the REST API's tokens, for an admin.

`create` prints the token once (only its SHA-256 is kept); `list` shows every token with
its scope, expiry and last use, never the token; `revoke` ends one at once. Everything goes
through workflows.operators.tokens, which refuses anyone but an admin (`--as USER` who is
not one exits 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from workflows.operators import access, roles, tokens
from workflows.operators.cli import output


def register(sub: argparse._SubParsersAction[Any]) -> None:
    parser = sub.add_parser("token", help="the REST API's tokens: create, list, revoke")
    modes = parser.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = modes.add_parser("create", help="make a token and print it (once)")
    create.add_argument("name", metavar="NAME", help="recorded as token:NAME in what it does")
    create.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        choices=list(roles.ROLES),
        help="a role it has (repeatable)",
    )
    create.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        metavar="NS",
        help="only in this namespace (repeatable; default every namespace)",
    )
    create.add_argument(
        "--expires", default="90d", metavar="DURATION", help="how long it lives (90d, 366d most)"
    )
    output.add_who(create, acts=True)
    create.set_defaults(handler=_create)
    lister = modes.add_parser("list", help="every token, without the tokens themselves")
    lister.add_argument("-o", "--output", choices=["table", "json"], default="table")
    output.add_who(lister, acts=False)
    lister.set_defaults(handler=_list)
    revoke = modes.add_parser("revoke", help="refuse a token from now on")
    revoke.add_argument("name", metavar="NAME")
    output.add_who(revoke, acts=True)
    revoke.set_defaults(handler=_revoke)


def _create(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    try:
        made = tokens.token_create(
            name=options["name"],
            role_names=options["roles"],
            namespaces=options["namespaces"],
            lifetime=tokens.parse_lifetime(options["expires"]),
            actor=output.actor_of(options, acts=True),
        )
    except (tokens.TokenError, access.Denied) as exc:
        raise CommandError(str(exc)) from None
    token = made.token
    where = ", ".join(token.namespaces) if token.namespaces else "every namespace"
    stdout.write(
        f"token {token.name} ({', '.join(token.roles)} in {where}), until "
        f"{token.expires_at.isoformat()}; it is shown this once:\n{made.secret}"
    )


def _list(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    try:
        found = tokens.tokens_list(actor=output.actor_of(options, acts=False))
    except access.Denied as exc:
        raise CommandError(str(exc)) from None
    if options["output"] == "json":
        output.write_json(stdout, [tokens.summary(t) for t in found])
        return
    if not found:
        stdout.write("no API tokens")
        return
    header = ["NAME", "PREFIX", "ROLES", "NAMESPACES", "EXPIRES", "REVOKED", "LAST USED"]
    rows = [
        [
            t.name,
            t.prefix,
            ",".join(t.roles),
            ",".join(t.namespaces) if t.namespaces else "*",
            t.expires_at.isoformat(timespec="seconds"),
            t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "",
            t.last_used_at.isoformat(timespec="seconds") if t.last_used_at else "",
        ]
        for t in found
    ]
    stdout.write(output.table([header, *rows]))


def _revoke(stdout: OutputWrapper, options: dict[str, Any]) -> None:
    try:
        token = tokens.token_revoke(name=options["name"], actor=output.actor_of(options, acts=True))
    except (tokens.TokenError, access.Denied) as exc:
        raise CommandError(str(exc)) from None
    stdout.write(f"token {token.name} revoked: requests carrying it are refused from now on")
