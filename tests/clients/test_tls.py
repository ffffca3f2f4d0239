"""HTTPS and WSS on the server's own port (``S2S_TLS_CERT``, ``S2S_TLS_KEY``): what a client of each kind
reaches, what stops the start, and Django's secure settings that follow."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import websockets
from django.core.exceptions import ImproperlyConfigured

from realtime.server import tls
from tests.clients.conftest import make_certs, tls_env
from tests.support.server import ROOT, LiveServer
from tests.support.webrtc_client import WebRTCClient

SECRET = "x7-Kq2!vLr9@pZ4#mN8$wB1%tY6^hJ3&cF5*gD0(sA2)eR7_uI9+oP4=lK1~"


async def first_event(url: str, key: str | None, context: ssl.SSLContext) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with websockets.connect(url, additional_headers=headers, ssl=context, open_timeout=10) as ws:
        return json.loads(await asyncio.wait_for(ws.recv(), 10))


def test_a_missing_unreadable_foreign_or_lone_file_is_refused_with_its_name(tmp_path, certs):
    other = make_certs(tmp_path / "other")
    not_pem = tmp_path / "cert.der"
    not_pem.write_bytes(b"\x30\x82\x01\x0a")
    cases = {
        (str(tmp_path / "nowhere.pem"), str(certs.key)): "cannot be read: No such file or directory",
        (str(certs.cert), str(tmp_path)): "cannot be read: Is a directory",
        (str(not_pem), str(certs.key)): "is not a PEM file",
        (str(certs.cert), str(other.key)): "are not a pair",
        (str(certs.cert), ""): "S2S_TLS_KEY is not set",
        ("", str(certs.key)): "S2S_TLS_CERT is not set",
    }
    for (cert, key), message in cases.items():
        with pytest.raises(ImproperlyConfigured, match=message):
            tls.load_pair(cert, key)
    assert tls.load_pair("", "") is None
    assert tls.load_pair(str(certs.cert), str(certs.key)) == tls.TlsFiles(str(certs.cert), str(certs.key))


def test_serve_stops_before_it_listens_when_the_key_is_not_the_certificates(tmp_path, certs):
    other = make_certs(tmp_path / "other")
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", "9"],
        cwd=ROOT,
        env={**os.environ, "S2S_PIPELINE": "loopback", "S2S_TLS_CERT": str(certs.cert), "S2S_TLS_KEY": str(other.key)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "S2S_TLS_CERT=" in result.stderr and "are not a pair" in result.stderr, result.stderr[-2000:]


def test_the_endpoint_description_escapes_paths_for_twisted():
    files = tls.TlsFiles(cert="/a:b/cert=1.pem", key="C:\\k.pem")
    assert tls.endpoint("tcp:port=8443:interface=127.0.0.1", files) == (
        "ssl:port=8443:interface=127.0.0.1:privateKey=C\\:\\\\k.pem:certKey=/a\\:b/cert\\=1.pem"
    )
    assert tls.endpoint("tcp:port=80:interface=::1", None) == "tcp:port=80:interface=::1"


def test_https_answers_with_hsts_and_secure_cookies_and_plain_http_is_not_served(tls_server):
    with urllib.request.urlopen(f"{tls_server.http}/readyz", timeout=10, context=tls_server.ssl_context) as response:
        assert response.status == 200
        assert response.headers["Strict-Transport-Security"].startswith("max-age=31536000")
    with urllib.request.urlopen(
        f"{tls_server.http}/admin/login/", timeout=10, context=tls_server.ssl_context
    ) as response:
        cookies = response.headers.get_all("Set-Cookie")
    assert any(c.startswith("csrftoken=") and "; Secure" in c for c in cookies), cookies
    with pytest.raises(OSError):  # a TLS port answers no plain HTTP request
        urllib.request.urlopen(f"http://127.0.0.1:{tls_server.port}/readyz", timeout=10).read()


def test_an_untrusted_certificate_is_refused_by_a_client_that_verifies(tls_server):
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(f"{tls_server.http}/readyz", timeout=10, context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError), refused.value


async def test_a_websocket_session_opens_over_wss_with_an_api_key(tls_server, api_key):
    event = await first_event(tls_server.ws, api_key, tls_server.ssl_context)
    assert event["type"] == "session.created", event


async def test_a_webrtc_call_is_signalled_over_https(tls_server, api_key, certs, monkeypatch):
    """The call endpoint on the TLS port; the Python client trusts the authority through ``SSL_CERT_FILE``."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    client = WebRTCClient(tls_server.http, microphone=False)
    try:
        answer = await client.connect(token=api_key)
        assert answer.status == 201, answer.body
        created = await client.events.until("session.created", timeout=10)
        assert created["session"]["id"]
        assert (await client.hang_up(token=api_key)).status == 204
    finally:
        await client.close()


def test_check_deploy_is_clean_with_tls_on_the_servers_own_port(certs):
    env = {
        **os.environ,
        **tls_env(certs),
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": SECRET,
        "DJANGO_ALLOWED_HOSTS": "voice.example.com",
    }
    env.pop("S2S_PRODUCTION", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "no issues" in result.stdout, result.stdout + result.stderr


async def test_uvicorn_serves_wss_with_the_same_pair(tmp_path, certs):
    server = LiveServer(
        tmp_path, env={**tls_env(certs), "S2S_AUTH_REQUIRED": "0"}, launcher="uvicorn", ca_file=certs.ca
    )
    await asyncio.to_thread(server.start, 120)
    try:
        event = await first_event(server.ws, None, server.ssl_context)
        assert event["type"] == "session.created", event
    finally:
        await asyncio.to_thread(server.stop)
