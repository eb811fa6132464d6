"""`make run-signin`: `make run` with a local OpenID Connect provider, to try sign-in and roles.

With HOOKSVC_DEV_SIGNIN=1 (what `make run-signin` sets), `make run` (hooksvc.serving.devserver)
first starts the provider the tests sign in through (oidc-provider-mock, a development
requirement: tests/support/oidc.py) in a thread of its own process, on https://localhost:PORT
(HOOKSVC_DEV_SIGNIN_PORT, default 9444) with `make run`'s development certificate; its form
signs in each of PEOPLE with one click, no password. It writes ROLES, the role rules for their
groups, to HOOKSVC_DATA_DIR/dev-signin/roles.yaml, and points hooksvc at both: the
HOOKSVC_OIDC_* settings and HOOKSVC_ROLES_FILE, each unless exported, and
HOOKSVC_OIDC_DISPLAY_NAME for the sign-in button. The provider's issuer is the URL it is
reached at (oidc_provider_mock/_app.py: `flask.request.host_url`), so it must be reached as
`localhost`, as hooksvc names it.

For trying only: whoever reaches the port signs in as anyone; it listens on 127.0.0.1 alone.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The sample people: their subject, and the groups the provider gives them.
PEOPLE: dict[str, list[str]] = {
    "ann": ["team-a-operators"],
    "vic": ["team-a-viewers"],
    "sam": ["sre"],
    "pat": ["platform"],
    "nobody": ["unknown-group"],
}
#: Their roles (HOOKSVC_ROLES_FILE's format, docs/sign-in.md): pat is an admin, sam releases
#: everywhere, ann operates team-a, vic views it, nobody's group matches no rule.
ROLES = """\
rules:
  - group: platform
    roles: [admin]
  - group: sre
    roles: [releaser]
  - group: team-a-operators
    roles: [operator]
    namespaces: [team-a]
  - group: team-a-viewers
    roles: [viewer]
    namespaces: [team-a]
"""
DEFAULT_PORT = 9444
#: The client ID hooksvc uses with it (the provider takes any, and any secret).
CLIENT_ID = "hooksvc-dev"
DISPLAY_NAME = "the local test provider"


class Error(Exception):
    """The provider cannot start (not installed, a bad port, the port taken)."""


def wanted(environ: Mapping[str, str]) -> bool:
    value = environ.get("HOOKSVC_DEV_SIGNIN", "")
    if value not in ("", "0", "1"):
        raise Error(f"HOOKSVC_DEV_SIGNIN must be 1 or 0, got {value!r}")
    return value == "1"


def _port(environ: Mapping[str, str]) -> int:
    raw = environ.get("HOOKSVC_DEV_SIGNIN_PORT", "") or str(DEFAULT_PORT)
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise Error(f"HOOKSVC_DEV_SIGNIN_PORT must be a port number, got {raw!r}")
    return int(raw)


class Provider:
    """The provider, serving in a daemon thread until `stop`."""

    def __init__(self, server: Any, thread: threading.Thread, issuer: str) -> None:
        self._server = server
        self._thread = thread
        self.issuer = issuer

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def start(
    data_dir: Path, tls_dir: Path, environ: Mapping[str, str]
) -> tuple[Provider, dict[str, str]]:
    """Start the provider with `tls_dir`'s certificate; it and the settings that use it."""
    try:
        import oidc_provider_mock
        import werkzeug.serving
    except ImportError:
        raise Error(
            "the local provider (oidc-provider-mock) is a development requirement: "
            "`make run-signin` installs it (requirements/dev.txt)"
        ) from None
    port = _port(environ)
    people = [
        oidc_provider_mock.User(
            # email_verified: hooksvc takes only a verified e-mail (identities.verified_email).
            sub=name,
            claims={
                "email": f"{name}@example.com",
                "email_verified": True,
                "groups": groups,
                "name": name,
            },
        )
        for name, groups in PEOPLE.items()
    ]
    app = oidc_provider_mock.app(user_claims=people)
    # Its request lines would fill `make run`'s terminal; errors still show.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    try:
        server = werkzeug.serving.make_server(
            "127.0.0.1",
            port,
            app,
            threaded=True,
            ssl_context=(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key")),
        )
    except OSError as exc:
        raise Error(f"the local provider cannot listen on port {port}: {exc}") from None
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
    )
    thread.start()
    issuer = f"https://localhost:{port}"
    roles = data_dir / "dev-signin" / "roles.yaml"
    roles.parent.mkdir(parents=True, exist_ok=True)
    roles.write_text(ROLES)
    offered = {
        "HOOKSVC_OIDC_ISSUER": issuer,
        "HOOKSVC_OIDC_CLIENT_ID": CLIENT_ID,
        # The provider takes any secret; a public client (none) it refuses (invalid_client).
        "HOOKSVC_OIDC_CLIENT_SECRET": secrets.token_urlsafe(24),
        "HOOKSVC_OIDC_CA_FILE": str(tls_dir / "ca.crt"),
        "HOOKSVC_OIDC_SCOPES": "openid email profile",
        "HOOKSVC_OIDC_DISPLAY_NAME": DISPLAY_NAME,
        "HOOKSVC_ROLES_FILE": str(roles),
    }
    return Provider(server, thread, issuer), {
        k: v for k, v in offered.items() if not environ.get(k)
    }


def banner(provider: Provider) -> str:
    """What `make run` prints about it."""
    people = ", ".join(f"{name} ({', '.join(groups)})" for name, groups in PEOPLE.items())
    return (
        f"Local sign-in provider: {provider.issuer} (for trying only; its form signs in"
        f" anyone with one click). People: {people}. Their roles: "
        f"{os.path.join('HOOKSVC_DATA_DIR', 'dev-signin', 'roles.yaml')}."
    )
