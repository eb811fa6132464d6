"""The HTTPS server's TLS context: TLS 1.2+, optional client certificates, hot reload.

Certificates are read from a directory in cert-manager's Secret layout (tls.crt, tls.key,
ca.crt). gunicorn asks for a context on every new connection; `ContextCache` hands out
the same one until the files change, so a rotated certificate is served from the next
connection on without a restart. A half-written rotation keeps the previous context.
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


def build_context(tls_dir: Path, *, client_auth: bool) -> ssl.SSLContext:
    """A server context for `tls_dir`; with `client_auth`, ca.crt must sign the client."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=tls_dir / CERT_FILE, keyfile=tls_dir / KEY_FILE)
    if client_auth:
        context.load_verify_locations(cafile=tls_dir / CA_FILE)
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["http/1.1"])
    return context


class ContextCache:
    """Returns one SSLContext per version of the certificate files."""

    #: How often the files are looked at; a stat per second costs nothing.
    check_interval = 1.0
    clock = staticmethod(time.monotonic)

    def __init__(self, tls_dir: Path, *, client_auth: bool) -> None:
        self.tls_dir = tls_dir
        self.client_auth = client_auth
        self._lock = threading.Lock()
        self._signature = self._read_signature()
        self._context = build_context(tls_dir, client_auth=client_auth)
        self._checked_at = self.clock()

    def _read_signature(self) -> tuple[tuple[int, int, int], ...]:
        names = [CERT_FILE, KEY_FILE] + ([CA_FILE] if self.client_auth else [])
        signature = []
        for name in names:
            st = os.stat(self.tls_dir / name)
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
                    self._context = build_context(self.tls_dir, client_auth=self.client_auth)
                    self._signature = signature
                    logger.info("TLS certificate reloaded", extra={"action": "tls_reloaded"})
            except (OSError, ssl.SSLError):
                # Mid-rotation the key and certificate may not match yet; try again soon.
                logger.warning(
                    "TLS files unreadable; keeping the previous certificate",
                    extra={"action": "tls_reload_failed"},
                )
            return self._context
