"""HTTPS and WSS on the server's own port: the PEM pair named by ``S2S_TLS_CERT`` and ``S2S_TLS_KEY``.

Settings check the pair when they load (:func:`load_pair`), so a missing, unreadable or mismatched file
stops ``manage.py serve``, uvicorn and every other ``manage.py`` command alike, with a message that
names the file. :func:`endpoint` turns daphne's plain TCP endpoint into Twisted's TLS one.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class TlsFiles:
    """A certificate (its chain may follow it in the same file) and its private key, both PEM."""

    cert: str
    key: str


def _no_passphrase() -> bytes:
    raise ImproperlyConfigured("S2S_TLS_KEY: the key is encrypted; give the server an unencrypted PEM key")


def load_pair(cert: str, key: str) -> TlsFiles | None:
    """The checked pair, or None when neither is set; :class:`ImproperlyConfigured` says what is wrong."""
    if not cert and not key:
        return None
    if not (cert and key):
        missing = "S2S_TLS_KEY" if cert else "S2S_TLS_CERT"
        raise ImproperlyConfigured(f"{missing} is not set: S2S_TLS_CERT and S2S_TLS_KEY (PEM files) go together")
    for name, path in (("S2S_TLS_CERT", cert), ("S2S_TLS_KEY", key)):
        try:
            head = Path(path).read_bytes()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}={path!r} cannot be read: {exc.strerror}") from None
        if b"-----BEGIN " not in head:
            raise ImproperlyConfigured(f"{name}={path!r} is not a PEM file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except ssl.SSLError as exc:
        raise ImproperlyConfigured(
            f"S2S_TLS_CERT={cert!r} and S2S_TLS_KEY={key!r} are not a pair ({exc.reason or exc}): "
            "the key must be the certificate's own"
        ) from None
    return TlsFiles(cert=str(Path(cert).resolve()), key=str(Path(key).resolve()))


def _escape(path: str) -> str:
    """A path as a value in a Twisted endpoint description (``:``, ``=`` and ``\\`` are its syntax)."""
    return path.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def endpoint(description: str, tls: TlsFiles | None) -> str:
    """daphne's ``tcp:port=...:interface=...`` as ``ssl:...`` with the pair (unchanged without TLS)."""
    if tls is None:
        return description
    kind, _, rest = description.partition(":")
    if kind != "tcp":
        raise ImproperlyConfigured(f"S2S_TLS_CERT: cannot serve TLS on the endpoint {description!r}")
    return f"ssl:{rest}:privateKey={_escape(tls.key)}:certKey={_escape(tls.cert)}"
