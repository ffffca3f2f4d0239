"""A real server on HTTPS and WSS with a test certificate authority made by openssl, and an API key on it.

The certificate comes from ``scripts/local_cert.sh`` (what ``make tls-cert`` runs); each client trusts
its authority the way its users would: node through ``NODE_EXTRA_CA_CERTS``, Python through
``SSL_CERT_FILE``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.server import ROOT, LiveServer


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(folder: Path) -> Certs:
    subprocess.run(["bash", str(ROOT / "scripts/local_cert.sh"), str(folder)], check=True, timeout=60)
    return Certs(ca=folder / "ca.pem", cert=folder / "localhost.pem", key=folder / "localhost-key.pem")


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_env(certs: Certs) -> dict[str, str]:
    return {"S2S_TLS_CERT": str(certs.cert), "S2S_TLS_KEY": str(certs.key)}


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory, certs) -> Iterator[LiveServer]:
    """``manage.py serve`` on https/wss (loopback profile), authentication on as on a public address."""
    server = LiveServer(
        tmp_path_factory.mktemp("tls"), env={**tls_env(certs), "S2S_AUTH_REQUIRED": "1"}, ca_file=certs.ca
    )
    server.start(ready_timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def api_key(tls_server) -> str:
    return tls_server.manage("create_api_key", "clients").stdout.strip().splitlines()[-1]
