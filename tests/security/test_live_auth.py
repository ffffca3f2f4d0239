"""Authentication against a real server, with real clients: the official openai SDK and a browser-style secret."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.security.live import close_code, turn
from tests.support.conformance import decode
from tests.support.server import LiveServer


@pytest.fixture
def secured(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_AUTH_REQUIRED": "1"}).start()
    key = server.manage("create_api_key", "sdk tests").stdout.strip()
    yield server, key
    server.stop()


async def test_the_official_openai_sdk_connects_with_its_bearer_key_and_is_refused_without(secured):
    from openai import AsyncOpenAI

    server, key = secured
    client = AsyncOpenAI(api_key=key, base_url=f"{server.http}/v1")
    async with asyncio.timeout(30):
        async with client.realtime.connect(model="gpt-realtime") as connection:
            first = await connection.recv()
            assert first.type == "session.created"
    wrong = AsyncOpenAI(api_key="sk-s2s-wrong", base_url=f"{server.http}/v1")
    async with asyncio.timeout(30):
        async with wrong.realtime.connect(model="gpt-realtime") as connection:
            first = await connection.recv()
            assert first.type == "error" and first.error.code == "invalid_api_key"


def test_a_minted_client_secret_opens_one_browser_style_session(secured):
    server, key = secured
    request = urllib.request.Request(
        f"{server.http}/v1/realtime/client_secrets",
        method="POST",
        data=json.dumps({"session": {"type": "realtime"}}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        secret = json.loads(response.read())["value"]
    headers = {"Origin": f"http://127.0.0.1:{server.port}"}
    ws = connect(
        server.ws,
        subprotocols=["realtime", f"openai-insecure-api-key.{secret}"],
        open_timeout=10,
        additional_headers=headers,
    )
    assert ws.subprotocol == "realtime"
    assert decode(ws.recv(timeout=10))["type"] == "session.created"
    assert turn(ws, "hello with a secret")[0]["response"]["status"] == "completed"
    ws.close()
    again = connect(server.ws, subprotocols=["realtime", f"openai-insecure-api-key.{secret}"], open_timeout=10)
    assert decode(again.recv(timeout=10))["error"]["code"] == "invalid_api_key"
    assert close_code(again) == 1008
    with contextlib.suppress(ConnectionClosed):
        again.close()
