"""WebRTC calls with authentication on: API keys, one-use ek_ secrets, hanging up, and the official openai SDK."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.server import LiveServer
from tests.support.webrtc_client import WebRTCClient, post
from tests.webrtc.conftest import wait_free


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("webrtc-auth"), env={"S2S_AUTH_REQUIRED": "1"}).start()
    key = server.manage("create_api_key", "webrtc tests").stdout.strip()
    yield server, key
    server.stop()


async def test_a_call_needs_credentials_and_a_secret_opens_exactly_one(secured, calls):
    server, key = secured
    for token, status in ((None, 401), ("sk-s2s-wrong", 401)):
        answer = await calls(server).connect(token=token)
        assert answer.status == status and answer.json["error"]["code"] == "invalid_api_key"
    secret = server.mint_client_secret(key)
    call = calls(server)
    assert (await call.connect(token=secret)).status == 201
    await call.events.until("session.created")
    again = await calls(server).connect(token=secret)
    assert again.status == 401  # spent
    assert (await call.hang_up()).status == 401  # no credentials
    assert (await call.hang_up(token=secret)).status == 204  # the secret that opened it may hang it up
    assert await wait_free(server, 2, key=key) == 2


async def test_a_refused_or_bad_offer_gives_the_secret_back(secured, calls):
    server, key = secured
    secret = server.mint_client_secret(key)
    bad = await asyncio.to_thread(
        post, f"{server.http}/v1/realtime/calls", b"v=0\r\nnonsense", "application/sdp", secret
    )
    assert bad.status == 400
    call = calls(server)
    assert (await call.connect(token=secret)).status == 201  # still good for one session
    await call.hang_up(token=key)
    missing = await asyncio.to_thread(post, f"{server.http}/v1/realtime/calls/rtc_nosuchcall", b"", "", key, "DELETE")
    assert missing.status == 404 and missing.json["error"]["code"] == "call_not_found"


async def test_the_official_openai_sdk_creates_and_hangs_up_a_call(secured):
    from openai import AsyncOpenAI

    server, key = secured
    client = AsyncOpenAI(api_key=key, base_url=f"{server.http}/v1")
    peer = WebRTCClient(server.http)
    try:
        await peer.pc.setLocalDescription(await peer.pc.createOffer())
        response = await client.realtime.calls.with_raw_response.create(
            sdp=peer.pc.localDescription.sdp, session={"type": "realtime", "instructions": "Be brief."}
        )
        assert response.status_code == 201
        call_id = response.headers["location"].rsplit("/", 1)[-1]
        from aiortc import RTCSessionDescription

        await peer.pc.setRemoteDescription(RTCSessionDescription(response.content.decode(), "answer"))
        created = await peer.events.until("session.created", timeout=15)
        assert created["session"]["instructions"] == "Be brief."
        await client.realtime.calls.hangup(call_id)
        assert await wait_free(server, 2, key=key) == 2
    finally:
        await peer.close()
