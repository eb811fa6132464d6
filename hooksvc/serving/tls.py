"""The HTTPS server's TLS contexts: TLS 1.2+, client certificates on the hook port, hot reload.

Certificates are read from a directory in cert-manager's Secret layout (tls.crt, tls.key,
ca.crt). The worker (serving/gunicorn_worker.py) asks for a context for each new connection,
by the port it came in on (`Listeners.for_port`); `ContextCache` hands out the same one
until the files change, so a rotated certificate is served from the next connection on
without a restart. A half-written rotation keeps the previous context.

With HOOKSVC_TLS_CLIENT_AUTH=1 the hook port asks for a client certificate and refuses the
handshake without one that HOOKSVC_TLS_CLIENT_CA_FILE (default: ca.crt beside the serving
certificate) signed. The admin port (HOOKSVC_ADMIN_PORT) never asks: people sign in there
with a browser, and the kubelet's probes, which cannot present a certificate, go there.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"


def build_context(tls_dir: Path, *, client_ca: Path | None) -> ssl.SSLContext:
    """A server context for `tls_dir`; with `client_ca`, only clients it signed are served."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=tls_dir / CERT_FILE, keyfile=tls_dir / KEY_FILE)
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["http/1.1"])
    return context


class ContextCache:
    """Returns one SSLContext per version of the certificate files."""

    #: How often the files are looked at; a stat per second costs nothing.
    check_interval = 1.0
    clock = staticmethod(time.monotonic)

    def __init__(self, tls_dir: Path, *, client_ca: Path | None) -> None:
        self.tls_dir = tls_dir
        self.client_ca = client_ca
        self._lock = threading.Lock()
        self._signature = self._read_signature()
        self._context = build_context(tls_dir, client_ca=client_ca)
        self._checked_at = self.clock()

    def _read_signature(self) -> tuple[tuple[int, int, int], ...]:
        paths = [self.tls_dir / CERT_FILE, self.tls_dir / KEY_FILE]
        if self.client_ca is not None:
            paths.append(self.client_ca)
        signature = []
        for path in paths:
            st = os.stat(path)
            signature.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(signature)

    def get(self) -> ssl.SSLContext:
        now = self.clock()
        if now - self._checked_at < self.check_interval:
            return self._context
        with self._lock:
            self._checked_at = now
            try:
                signature = self._read_signature()
                if signature != self._signature:
                    self._context = build_context(self.tls_dir, client_ca=self.client_ca)
                    self._signature = signature
                    logger.info("TLS certificate reloaded", extra={"action": "tls_reloaded"})
            except (OSError, ssl.SSLError):
                # Mid-rotation the key and certificate may not match yet; try again soon.
                logger.warning(
                    "TLS files unreadable; keeping the previous certificate",
                    extra={"action": "tls_reload_failed"},
                )
            return self._context


class Listeners:
    """The context of each listening port: the hook port's asks for a client certificate
    when `client_ca` is given; the admin port's never does."""

    def __init__(self, tls_dir: Path, *, client_ca: Path | None, admin_port: int | None) -> None:
        self.admin_port = admin_port
        self.hooks = ContextCache(tls_dir, client_ca=client_ca)
        # Without an admin port, one port serves everything, and asks as the hook port does.
        self.admin = ContextCache(tls_dir, client_ca=None) if admin_port else self.hooks

    def for_port(self, port: int | None) -> ssl.SSLContext:
        return (self.admin if port == self.admin_port else self.hooks).get()


def tls_dir() -> Path:
    """HOOKSVC_TLS_DIR, else the checkout's var/tls (hooksvc.settings' DATA_DIR/tls)."""
    if os.environ.get("HOOKSVC_TLS_DIR"):
        return Path(os.environ["HOOKSVC_TLS_DIR"])
    # This file is hooksvc/serving/tls.py; the checkout's var/ is two levels up.
    data = os.environ.get("HOOKSVC_DATA_DIR") or Path(__file__).resolve().parents[2] / "var"
    return Path(data) / "tls"


def client_ca() -> Path | None:
    """The CA bundle the hook port checks client certificates against; None: it asks for none."""
    if os.environ.get("HOOKSVC_TLS_CLIENT_AUTH", "") != "1":
        return None
    return Path(os.environ.get("HOOKSVC_TLS_CLIENT_CA_FILE") or tls_dir() / CA_FILE)


_listeners: Listeners | None = None
_listeners_lock = threading.Lock()


def listeners() -> Listeners:
    """This process's contexts, from the environment, made on first use.

    gunicorn's master calls it before it forks (serving/gunicorn_conf.py, `on_starting`), so
    unreadable files stop the server before it listens; each worker inherits them.
    """
    global _listeners
    with _listeners_lock:
        if _listeners is None:
            admin = int(os.environ.get("HOOKSVC_ADMIN_PORT", "0")) or None
            _listeners = Listeners(tls_dir(), client_ca=client_ca(), admin_port=admin)
        return _listeners
