"""WebRTC calls against a real server (daphne, and uvicorn) with a Python aiortc client.

The loopback profile's FAKE stages echo the user's turn back as the reply, so a tone
spoken into the microphone track comes back on the reply track.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import numpy as np
import pytest

from tests.support.server import LiveServer
from tests.support.speech import silence, tone
from tests.support.webrtc_client import FRAME, RATE, WebRTCClient, post
from tests.webrtc.conftest import wait_free

FRAME_S = FRAME / RATE


def utterance(seconds: float) -> np.ndarray:
    return np.concatenate([tone(seconds), silence(1.0)])


async def spoken_turn(call, seconds: float = 1.5) -> list[dict]:
    """Says a tone and returns every event up to the reply's ``output_audio_buffer.stopped``."""
    call.microphone.say(utterance(seconds))
    return await call.events.collect("output_audio_buffer.stopped", timeout=30)


def check_turn(events: list[dict]) -> None:
    types = [event["type"] for event in events]
    for expected in (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.done",
        "output_audio_buffer.started",
        "output_audio_buffer.stopped",
    ):
        assert expected in types, (expected, " ".join(types))
    assert "response.output_audio.delta" not in types  # the audio rides the track
    assert "output_audio_buffer.cleared" not in types  # nothing was playing when the user spoke
    response_id = next(e for e in events if e["type"] == "response.created")["response"]["id"]
    started = next(e for e in events if e["type"] == "output_audio_buffer.started")
    stopped = events[-1]
    assert started["response_id"] == stopped["response_id"] == response_id
    assert types.index("output_audio_buffer.started") > types.index("response.created")
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"].startswith("audio of ")


def check_paced(call, since: float) -> None:
    """The reply came as a stream: its frames spread over as much wall-clock time as they last, no burst."""
    loud = call.loud(since)
    assert len(loud) * FRAME_S >= 1.0, f"only {len(loud)} loud frames of reply"
    span = loud[-1] - loud[0]
    assert span >= 0.8 * len(loud) * FRAME_S, f"{len(loud)} frames ({len(loud) * FRAME_S:.2f}s) arrived in {span:.2f}s"


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory):
    live = LiveServer(tmp_path_factory.mktemp("webrtc-uvicorn"), launcher="uvicorn").start()
    yield live
    live.stop()


@pytest.mark.parametrize("launcher", ["daphne", "uvicorn"])
async def test_a_spoken_turn_over_webrtc_gets_its_reply_on_the_audio_track_in_real_time(launcher, request, calls):
    live = request.getfixturevalue("server" if launcher == "daphne" else "uvicorn_server")
    call = calls(live)
    answer = await call.connect()
    assert answer.status == 201, answer.body
    assert answer.headers["Content-Type"].startswith("application/sdp")
    assert answer.body.startswith(b"v=0") and b"m=audio" in answer.body
    assert answer.headers["Location"].startswith("/v1/realtime/calls/rtc_")
    created = await call.events.until("session.created")
    assert created["session"]["type"] == "realtime"
    since = time.monotonic()
    events = await spoken_turn(call)
    check_turn(events)
    check_paced(call, since)
    # a second turn on the same call
    check_turn(await spoken_turn(call, 1.0))
    hung_up = await call.hang_up()
    assert hung_up.status == 204
    assert await wait_free(live, 2) == 2


async def test_the_session_of_a_multipart_offer_applies_before_the_first_event_and_a_bad_one_is_refused(server, calls):
    session = {
        "type": "realtime",
        "instructions": "Answer in French.",
        "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300}}},
    }
    call = calls(server)
    assert (await call.connect(session=session)).status == 201
    created = (await call.events.until("session.created"))["session"]
    assert created["instructions"] == "Answer in French."
    assert created["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 300
    await call.hang_up()

    bad = calls(server)
    answer = await bad.connect(session={"type": "realtime", "audio": {"output": {"voice": 5}}})
    assert answer.status == 400
    error = answer.json["error"]
    assert error["param"].startswith("session.") and error["message"]
    assert await wait_free(server, 2) == 2


async def test_a_full_pool_answers_429_with_the_websocket_error_and_no_sdp(server, calls):
    first, second = calls(server), calls(server)
    assert (await first.connect()).status == 201
    assert (await second.connect()).status == 201
    third = calls(server)
    answer = await third.connect()
    assert answer.status == 429
    assert answer.headers["Content-Type"] == "application/json"
    assert b"v=0" not in answer.body
    body = answer.json
    assert body["type"] == "error"
    assert body["error"]["code"] == "session_limit_reached"
    assert body["error"]["message"] == "All session slots are in use"
    await first.hang_up()
    assert await wait_free(server, 1) == 1
    fourth = calls(server)
    assert (await fourth.connect()).status == 201
    await second.hang_up()
    await fourth.hang_up()
    assert await wait_free(server, 2) == 2


async def test_barge_in_clears_the_reply_at_once_and_truncates_it_to_what_was_played(server, calls):
    call = calls(server)
    assert (await call.connect()).status == 201
    call.microphone.say(utterance(3.0))  # the echo lasts about 4 s
    started = await call.events.until("output_audio_buffer.started", timeout=30)
    await asyncio.sleep(1.0)
    call.microphone.say(utterance(1.5))  # the user talks over the reply
    events = await call.events.collect("output_audio_buffer.cleared", timeout=10)
    cleared_at = time.monotonic()
    types = [event["type"] for event in events]
    assert "input_audio_buffer.speech_started" in types
    assert "output_audio_buffer.stopped" not in types
    assert events[-1]["response_id"] == started["response_id"]
    truncated = await call.events.until("conversation.item.truncated")
    assert 500 <= truncated["audio_end_ms"] <= 2500, truncated
    # the next reply starts only after the user's 1.5 s; until then the track is silent
    await asyncio.sleep(1.0)
    late = [at for at in call.loud(cleared_at + 0.3) if at < cleared_at + 1.0]
    assert late == [], f"{len(late)} frames of the cleared reply played after the clear"
    await call.hang_up()


async def test_the_client_event_output_audio_buffer_clear_stops_the_reply(server, calls):
    call = calls(server)
    assert (await call.connect()).status == 201
    call.microphone.say(utterance(3.0))
    started = await call.events.until("output_audio_buffer.started", timeout=30)
    await asyncio.sleep(0.5)
    await call.events.send("output_audio_buffer.clear")
    cleared = await call.events.until("output_audio_buffer.cleared")
    cleared_at = time.monotonic()
    assert cleared["response_id"] == started["response_id"]
    await asyncio.sleep(1.5)
    assert call.loud(cleared_at + 0.3) == []
    seen = [event["type"] for event in await call.events.drain()]
    assert "output_audio_buffer.stopped" not in seen and "error" not in seen
    await call.hang_up()


async def test_a_closed_data_channel_or_a_vanished_peer_gives_the_unit_back(server, calls):
    by_channel = calls(server)
    assert (await by_channel.connect()).status == 201
    await by_channel.events.until("session.created")
    by_channel.channel.close()
    vanished = calls(server)
    assert (await vanished.connect()).status == 201
    await vanished.events.until("session.created")
    await vanished.pc.close()  # no DELETE: the peer connection just goes
    assert await wait_free(server, 2, within_s=20) == 2


async def test_a_silent_peer_is_hung_up_a_typing_only_one_is_not_and_both_are_recorded_as_webrtc(tmp_path, calls):
    live = LiveServer(tmp_path, env={"S2S_WEBRTC_PEER_TIMEOUT_S": "3"}).start()
    try:
        ghost = calls(live)  # offers, gets its answer, and is never heard from again (no ICE, no media)
        await ghost.pc.setLocalDescription(await ghost.pc.createOffer())
        answer = await asyncio.to_thread(
            post, f"{live.http}/v1/realtime/calls", ghost.pc.localDescription.sdp.encode(), "application/sdp"
        )
        assert answer.status == 201
        typist = WebRTCClient(live.http, microphone=False)  # receives the reply track, sends no media
        try:
            assert (await typist.connect()).status == 201
            await typist.events.until("session.created")
            assert await wait_free(live, 1, within_s=15) == 1  # the ghost's unit came back
            await asyncio.sleep(4.0)  # longer than the timeout without a word from the typist
            await typist.events.say_text("still there")
            done = await typist.events.until("response.done", timeout=15)
            assert done["response"]["status"] == "completed"
        finally:
            await typist.hang_up()
            await typist.close()
        assert await wait_free(live, 2) == 2
        await asyncio.sleep(0.5)
        rows = (
            sqlite3.connect(tmp_path / "server.sqlite3")
            .execute("select transport, end_reason from realtime_realtimesession order by started_at")
            .fetchall()
        )
        assert rows == [("webrtc", "client_closed"), ("webrtc", "client_closed")]
    finally:
        live.stop()


async def test_a_cleared_reply_stays_silent_while_its_response_is_still_being_generated(server, calls):
    call = calls(server)
    assert (await call.connect()).status == 201
    await call.events.until("session.created")
    await call.events.say_text("slow please, a long answer")  # the FAKE LM answers slowly, for seconds
    started = await call.events.until("output_audio_buffer.started", timeout=15)
    await asyncio.sleep(0.5)
    await call.events.send("output_audio_buffer.clear")  # no response.cancel: generation goes on
    cleared = await call.events.until("output_audio_buffer.cleared")
    cleared_at = time.monotonic()
    assert cleared["response_id"] == started["response_id"]
    more = await call.events.collect("response.output_audio_transcript.delta", timeout=10)
    assert more[-1]["response_id"] == started["response_id"]  # still generating
    await asyncio.sleep(1.5)
    assert call.loud(cleared_at + 0.3) == []
    await call.events.send("response.cancel")
    done = await call.events.until("response.done", timeout=10)
    assert done["response"]["status"] == "cancelled"
    await call.hang_up()
