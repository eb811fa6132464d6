"""A real OpenID Connect provider for tests: oidc-provider-mock, over TLS on a local port.

oidc-provider-mock (PyPI) is a Flask app built on authlib's authorization server: discovery,
a JWKS with an RSA key of its own (a new one per provider), an authorization form where the
person types their subject, the token and userinfo endpoints, and `PUT /users/<sub>` to set
the claims a subject gets (e-mail, groups). Its issuer is the URL it is reached at
(`flask.request.host_url` in oidc_provider_mock/_app.py, `OpenIDCode.get_jwt_config`), so
one provider reached as `localhost` and as `127.0.0.1` is two issuers with one key. It runs
here behind werkzeug's TLS with a certificate of the tests' CA, as a provider would. (It
uses authlib's deprecated server APIs: pyproject.toml's filterwarnings lets those through.
Importing `authlib.deprecate` installs an "always" filter for authlib's warnings; imported
here, at collection, it sits below the filters pytest applies to each test.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import authlib.deprecate  # noqa: F401
import requests
import werkzeug.serving


@dataclasses.dataclass(frozen=True)
class Provider:
    port: int
    ca_file: Path

    @property
    def issuer(self) -> str:
        return f"https://localhost:{self.port}"

    def user(self, sub: str, **claims: Any) -> None:
        """Set the claims `sub` gets (its e-mail, its groups, ...)."""
        response = requests.put(
            f"{self.issuer}/users/{urllib.parse.quote(sub, safe='')}",
            json=claims,
            verify=str(self.ca_file),
            timeout=10,
        )
        assert response.status_code == 204, response.text

    def authorize(self, authorize_url: str, sub: str) -> str:
        """Submit the provider's authorization form as `sub`; the redirect back, with the code."""
        response = requests.post(
            authorize_url,
            data={"sub": sub},
            verify=str(self.ca_file),
            allow_redirects=False,
            timeout=10,
        )
        assert response.status_code == 302, response.text
        return response.headers["Location"]

    def token(self, sub: str, *, host: str = "localhost", nonce: str = "n-1") -> dict[str, Any]:
        """A token response for `sub` through the code flow, reached at `host` (its issuer)."""
        base = f"https://{host}:{self.port}"
        redirect = "https://client.invalid/callback"
        query = urllib.parse.urlencode(
            {
                "client_id": "hooksvc",
                "response_type": "code",
                "scope": "openid email profile",
                "redirect_uri": redirect,
                "state": "s-1",
                "nonce": nonce,
            }
        )
        back = self.authorize(f"{base}/oauth2/authorize?{query}", sub)
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(back).query)["code"][0]
        response = requests.post(
            f"{base}/oauth2/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect,
                "client_id": "hooksvc",
                "client_secret": "s",
            },
            verify=str(self.ca_file),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        token: dict[str, Any] = response.json()
        return token


@contextlib.contextmanager
def provider(server_dir: Path) -> Iterator[Provider]:
    """A provider serving with `server_dir`'s tls.crt and tls.key (ca.crt signed them)."""
    # Imported here, where pytest's warning filters apply (see the module's docstring).
    import oidc_provider_mock

    app = oidc_provider_mock.app()
    server = werkzeug.serving.make_server(
        "localhost",
        0,
        app,
        threaded=True,
        ssl_context=(str(server_dir / "tls.crt"), str(server_dir / "tls.key")),
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield Provider(port=server.server_port, ca_file=server_dir / "ca.crt")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
