"""Translation sessions over WebRTC, as OpenAI's guide has them (issue 55): the SDP offer to
``POST /v1/realtime/translations/calls``, the source speech on the client's track, the translated speech on the
answer's, the translation's events on ``oai-events`` (every one checked against the SDK's translation types; no
audio delta there: the audio rides the track). The loopback profile's FAKE translator says how long each phrase
was; its voice is a tone."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from tests.support.conformance import check_translation
from tests.support.server import LiveServer
from tests.support.speech import silence, tone
from tests.support.webrtc_client import WebRTCClient, post
from tests.webrtc.conftest import wait_free

CALLS = "/v1/realtime/translations/calls"


async def translation_events(call: WebRTCClient, until: str, timeout: float = 20) -> list[dict]:
    """The translation events on the call's channel, through the first of type ``until``."""
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = await call._recv(deadline - time.monotonic())
        if text is None:
            break
        events.append(check_translation(json.loads(text)))
        if events[-1]["type"] == until:
            return events
    raise AssertionError(f"no {until} in {[e['type'] for e in events]}")


async def test_a_translation_call_hears_the_track_and_speaks_the_translation_on_its_own(server, calls):
    call = calls(server)
    session = {"audio": {"input": {"transcription": {"model": "gpt-4o-transcribe"}}}}
    answer = await call.connect(session=session, path=CALLS)
    assert answer.status == 201, answer.body
    assert answer.body.startswith(b"v=0") and answer.headers["Location"].startswith("/v1/realtime/calls/rtc_")
    created = (await translation_events(call, "session.created"))[-1]["session"]
    assert created["type"] == "translation" and created["audio"]["input"]["transcription"] == {
        "model": "gpt-4o-transcribe"
    }
    since = time.monotonic()
    call.microphone.say(np.concatenate([tone(1.0), silence(1.0)]))
    events = await translation_events(call, "session.output_transcript.delta")
    types = [event["type"] for event in events]
    assert "session.input_transcript.delta" in types and "session.output_audio.delta" not in types, types
    assert events[-1]["delta"].startswith("audio of ")
    for _ in range(50):  # the translation's speech (the FAKE voice's tone) on the answer's track
        if len(call.loud(since)) * 0.02 >= 0.1:
            break
        await asyncio.sleep(0.1)
    assert len(call.loud(since)) * 0.02 >= 0.1, "no translated speech on the track"
    # session.update over the channel, then a bad one: an error naming the param, the call goes on
    await call._send(
        json.dumps(
            {"type": "session.update", "event_id": "evt_xx", "session": {"audio": {"output": {"language": "xx"}}}}
        )
    )
    error = (await translation_events(call, "error"))[-1]["error"]
    assert (error["param"], error["event_id"]) == ("session.audio.output.language", "evt_xx")
    hung_up = await call.hang_up()
    assert hung_up.status == 204
    assert await wait_free(server, 2) == 2


async def test_a_translation_call_with_bad_settings_is_refused_before_any_unit_is_claimed(server, calls):
    call = calls(server)
    answer = await call.connect(session={"audio": {"output": {"language": "xx"}}}, path=CALLS)
    assert answer.status == 400
    assert answer.json["error"]["param"] == "session.audio.output.language"
    answer = await calls(server).connect(session={"instructions": "Be brief."}, path=CALLS)
    assert answer.status == 400 and answer.json["error"]["param"] == "session.instructions"
    assert await wait_free(server, 2) == 2


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("translation-auth"), env={"S2S_AUTH_REQUIRED": "1"}).start()
    owner = server.manage("create_api_key", "owner").stdout.strip().splitlines()[-1]
    stranger = server.manage("create_api_key", "stranger").stdout.strip().splitlines()[-1]
    yield server, owner, stranger
    server.stop()


def mint(server: LiveServer, key: str, path: str, session: dict) -> str:
    answer = post(f"{server.http}{path}", json.dumps({"session": session}).encode(), "application/json", key)
    assert answer.status == 200, answer.body
    return answer.json["value"]


async def test_a_translation_call_is_its_owners_and_each_kind_of_secret_opens_only_its_kind(secured, calls):
    """Another key hanging it up gets what an unknown call gets, and the call goes on; its owner hangs it up. A
    voice agent's secret offered here, and a translation's at /v1/realtime/calls, are refused as an unknown secret
    is (401), and each still opens its own kind of call."""
    server, owner, stranger = secured
    call = calls(server)
    assert (await call.connect(token=owner, path=CALLS)).status == 201
    await translation_events(call, "session.created")
    call_id = call.location.rsplit("/", 1)[-1]
    theirs = await asyncio.to_thread(post, f"{server.http}/v1/realtime/calls/{call_id}", b"", "", stranger, "DELETE")
    unknown = await asyncio.to_thread(
        post, f"{server.http}/v1/realtime/calls/rtc_0000000000000000000000", b"", "", stranger, "DELETE"
    )
    assert (
        (theirs.status, theirs.json["error"]["code"])
        == (unknown.status, unknown.json["error"]["code"])
        == (
            404,
            "call_not_found",
        )
    )
    await call._send(json.dumps({"type": "session.update", "session": {}}))
    assert (await translation_events(call, "session.updated"))[-1]["type"] == "session.updated"  # still live
    assert (await call.hang_up(token=owner)).status == 204
    voice = await asyncio.to_thread(mint, server, owner, "/v1/realtime/client_secrets", {"type": "realtime"})
    translation = await asyncio.to_thread(
        mint, server, owner, "/v1/realtime/translations/client_secrets", {"model": "gpt-realtime-translate"}
    )
    refused = [
        await calls(server).connect(token=voice, path=CALLS),
        await calls(server).connect(token=translation),
        await calls(server).connect(token="ek_0000", path=CALLS),
    ]
    assert {(a.status, a.json["error"]["code"], a.json["error"]["message"]) for a in refused} == {
        (refused[2].status, "invalid_api_key", refused[2].json["error"]["message"])
    }
    assert refused[2].status == 401
    right = calls(server)
    assert (await right.connect(token=translation, path=CALLS)).status == 201
    assert (await translation_events(right, "session.created"))[-1]["session"]["type"] == "translation"
    other = calls(server)
    assert (await other.connect(token=voice)).status == 201
    await other.events.until("session.created")
    for each in (right, other):
        assert (await each.hang_up(token=owner)).status == 204
    assert await wait_free(server, 2, key=owner) == 2
