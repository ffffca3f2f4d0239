"""A real ``manage.py serve`` process (daphne, loopback profile) and real clients: ``websockets`` and the openai SDK."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import websockets

from tests.support.client import RealtimeClient, text_item
from tests.support.conformance import decode
from tests.support.server import LiveServer

SESSION_LIMIT_REASON = "All session slots are in use"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    """One server with a pool of 2 for the tests of this module that leave it as they found it."""
    live = LiveServer(tmp_path_factory.mktemp("live")).start()
    yield live
    live.stop()


async def open_client(server: LiveServer, **kwargs) -> tuple[websockets.ClientConnection, RealtimeClient]:
    ws = await websockets.connect(
        f"{server.ws}?model=gpt-realtime", subprotocols=["realtime"], open_timeout=10, close_timeout=2, **kwargs
    )
    return ws, RealtimeClient.over_websocket(ws)


async def admitted(server: LiveServer, within_s: float) -> tuple[websockets.ClientConnection, RealtimeClient, float]:
    """Connects until a session is admitted (at most ``within_s``); returns it and how long it took."""
    started = time.monotonic()
    while True:
        ws, client = await open_client(server)
        first = await client.recv(5)
        if first is not None and first["type"] == "session.created":
            return ws, client, time.monotonic() - started
        await ws.close()
        assert first is not None and first["error"]["code"] == "session_limit_reached", first
        if time.monotonic() - started > within_s:
            raise AssertionError(f"no session admitted within {within_s}s")
        await asyncio.sleep(0.02)


async def test_six_connections_to_a_pool_of_two_give_two_sessions_and_four_clear_refusals(server):
    connections = await asyncio.gather(*(open_client(server) for _ in range(6)))
    try:
        firsts = await asyncio.gather(*(client.recv(10) for _, client in connections))
        created = [i for i, event in enumerate(firsts) if event and event["type"] == "session.created"]
        refused = [i for i, event in enumerate(firsts) if event and event["type"] == "error"]
        assert len(created) == 2 and len(refused) == 4, firsts
        for i in refused:
            error = firsts[i]["error"]
            assert (error["type"], error["code"], error["message"]) == (
                "invalid_request_error",
                "session_limit_reached",
                SESSION_LIMIT_REASON,
            )
            close = await connections[i][1].closed(5)
            assert (close.code, close.reason) == (1008, SESSION_LIMIT_REASON)
        for i in created:  # the admitted sessions work
            client = connections[i][1]
            await client.say_text(f"hello {i}", output_modalities=["text"])
            done = await client.until("response.done")
            assert done["response"]["output"][0]["content"][0]["text"] == f"You said: hello {i}."
    finally:
        await asyncio.gather(*(ws.close() for ws, _ in connections))


async def all_units_free(server: LiveServer, within_s: float = 5.0) -> None:
    """Waits until the previous test's sessions are released (/readyz counts free units)."""
    deadline = time.monotonic() + within_s
    while True:
        status, body = await asyncio.to_thread(server.get, "/readyz")
        if status == 200 and json.loads(body)["free_units"] == json.loads(body)["units"]:
            return
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


async def test_a_new_connection_is_admitted_as_soon_as_a_session_closes(server):
    await all_units_free(server)
    (ws1, _), (ws2, c2) = await asyncio.gather(open_client(server), open_client(server))
    try:
        assert {(await c2.recv(10))["type"]} == {"session.created"}
        ws3, c3 = await open_client(server)
        assert (await c3.error(5))["code"] == "session_limit_reached"
        await ws3.close()
        await ws1.close()
        ws4, _, waited = await admitted(server, within_s=1.0)
        await ws4.close()
        assert waited < 1.0
    finally:
        await ws1.close()
        await ws2.close()


async def test_a_session_after_a_client_vanished_mid_response_gets_nothing_of_it(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "1"}).start()
    try:
        ws1, old = await open_client(server)
        await old.until("session.created")
        await old.update_session(audio={"input": {"turn_detection": None}})
        await old.say_text("slow alphamarker story")
        await old.until("response.output_audio.delta")
        await old.until("response.output_audio_transcript.delta")
        ws1.transport.abort()  # gone mid-response, without a close handshake

        ws2, new, _ = await admitted(server, within_s=5.0)
        try:
            await new.update_session(output_modalities=["text"])
            await new.say_text("bravomarker")
            await new.until("response.done", timeout=10)
            await new.say_text("charliemarker")
            await new.until("response.done", timeout=10)
            await new.drain(0.5)
            received = repr(new.received)
            assert "alphamarker" not in received and "so on" not in received
            assert not [e for e in new.received if "audio" in e["type"] and "delta" in e["type"]]
            answers = [
                e["response"]["output"][0]["content"][0]["text"] for e in new.received if e["type"] == "response.done"
            ]
            assert answers == ["You said: bravomarker.", "You said: charliemarker."]
        finally:
            await ws2.close()
    finally:
        server.stop()


async def validated(connection) -> AsyncIterator:
    """The SDK connection's events, each first validated against the SDK's types (the SDK itself only constructs)."""
    while True:
        raw = await connection.recv_bytes()
        decode(raw)
        yield connection.parse_event(raw)


async def test_the_official_openai_sdk_completes_a_conversation(server):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="test-key", base_url=f"http://127.0.0.1:{server.port}/v1")
    seen: list[str] = []
    async with asyncio.timeout(30):
        async with client.realtime.connect(model="gpt-realtime") as connection:
            await connection.session.update(
                session={"type": "realtime", "output_modalities": ["text"], "instructions": "Answer briefly."}
            )
            await connection.conversation.item.create(item=text_item("hello from the sdk"))
            await connection.response.create()
            async for event in validated(connection):
                seen.append(event.type)
                if event.type == "error":
                    raise AssertionError(event.error)
                if event.type == "response.done":
                    done = event.response
                    break
            await connection.response.create(response={"output_modalities": ["audio"]})
            async for event in validated(connection):
                seen.append(event.type)
                if event.type == "response.output_audio.delta":
                    assert event.delta
                if event.type == "response.done":
                    spoken = event.response
                    break
    expected = [
        "session.created",
        "session.updated",
        "conversation.item.added",
        "conversation.item.done",
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    it = iter(seen)
    assert all(name in it for name in expected), seen
    assert done.status == "completed"
    assert done.output[0].content[0].text == "You said: hello from the sdk."
    assert spoken.status == "completed"
    assert "response.output_audio.delta" in seen and "response.output_audio_transcript.done" in seen
    assert spoken.output[0].content[0].transcript == "You said: hello from the sdk."


async def test_the_official_openai_sdk_runs_a_transcription_session_and_every_event_validates(server):
    from openai import AsyncOpenAI

    from tests.support.speech import pcm16_chunks, silence, tone

    client = AsyncOpenAI(api_key="test-key", base_url=f"http://127.0.0.1:{server.port}/v1")
    seen: list[dict] = []
    async with asyncio.timeout(30):
        async with client.realtime.connect(model="gpt-realtime") as connection:
            await connection.session.update(
                session={
                    "type": "transcription",
                    "include": ["item.input_audio_transcription.logprobs"],
                    "audio": {
                        "input": {
                            "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": 200},
                        }
                    },
                }
            )
            for chunk in pcm16_chunks(silence(0.3)) + pcm16_chunks(tone(1.0)) + pcm16_chunks(silence(0.5)):
                await connection.input_audio_buffer.append(audio=chunk)
            await connection.response.create()  # refused: a transcription session never answers
            wanted = {"conversation.item.input_audio_transcription.completed", "error"}
            while not wanted <= {e["type"] for e in seen}:
                seen.append(decode(await connection.recv_bytes()))
            completed = next(e for e in seen if e["type"] == "conversation.item.input_audio_transcription.completed")
            event = connection.parse_event(json.dumps(completed))
    kinds = [e["type"] for e in seen]
    assert kinds[:2] == ["session.created", "session.updated"]
    assert seen[1]["session"]["type"] == "transcription"
    assert "error" in kinds and not [k for k in kinds if k.startswith("response.")]
    assert event.type == "conversation.item.input_audio_transcription.completed"
    assert event.transcript.startswith("audio of") and event.logprobs and event.usage.seconds > 0.9


async def test_the_openai_sdks_beta_client_runs_a_beta_transcription_session(server):
    from openai import AsyncOpenAI

    from tests.support.speech import pcm16_chunks, silence, tone

    # The beta client always says wss:// unless told the WebSocket address.
    client = AsyncOpenAI(
        api_key="test-key",
        base_url=f"http://127.0.0.1:{server.port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
    )
    seen: list[dict] = []
    async with asyncio.timeout(30):
        async with client.beta.realtime.connect(model="gpt-realtime") as connection:  # sends OpenAI-Beta: realtime=v1
            await connection.transcription_session.update(
                session={
                    "input_audio_transcription": {"model": "gpt-4o-mini-transcribe", "prompt": "Tones."},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 200},
                }
            )
            for chunk in pcm16_chunks(silence(0.3)) + pcm16_chunks(tone(1.0)) + pcm16_chunks(silence(0.5)):
                await connection.input_audio_buffer.append(audio=chunk)
            while "conversation.item.input_audio_transcription.completed" not in {e["type"] for e in seen}:
                seen.append(decode(await connection.recv_bytes(), beta=True))
    kinds = [e["type"] for e in seen]
    assert kinds[:2] == ["session.created", "transcription_session.updated"]
    assert seen[1]["session"]["input_audio_transcription"] == {"model": "gpt-4o-mini-transcribe", "prompt": "Tones."}
    assert "conversation.item.created" in kinds and not [k for k in kinds if k.startswith("response.")]


@pytest.fixture(scope="module")
def pool_of_one(tmp_path_factory) -> Iterator[LiveServer]:
    """A server with one unit and a long wait for a draining one (S2S_CLAIM_WAIT_S=5): a refusal that comes at
    once then shows that nothing was waited for."""
    live = LiveServer(tmp_path_factory.mktemp("pool-of-one"), env={"S2S_POOL_SIZE": "1", "S2S_CLAIM_WAIT_S": "5"})
    yield live.start()
    live.stop()


async def test_a_client_that_closes_and_reconnects_at_once_20_times_on_a_pool_of_one_is_never_refused(pool_of_one):
    """Before: the new connection met the unit while it drained (about 100-130 ms) and got 1008."""
    await all_units_free(pool_of_one)
    for attempt in range(20):
        ws, client = await open_client(pool_of_one)
        first = await client.recv(10)
        assert first is not None and first["type"] == "session.created", (attempt, first)
        await ws.close()  # and at once the next


async def test_a_translation_session_reconnected_at_once_20_times_on_a_pool_of_one_is_never_refused(pool_of_one):
    """The translation route claims as the voice agent's does (it claimed once, without waiting, and got 1008)."""
    await all_units_free(pool_of_one)
    path = f"{pool_of_one.ws}/translations?model=gpt-realtime-translate"
    for attempt in range(20):
        async with websockets.connect(path, subprotocols=["realtime"], open_timeout=10, close_timeout=2) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert first["type"] == "session.created", (attempt, first)


async def test_a_pool_that_is_really_full_still_refuses_at_once(pool_of_one):
    await all_units_free(pool_of_one)
    ws, client = await open_client(pool_of_one)
    try:
        assert (await client.recv(10))["type"] == "session.created"
        started = time.monotonic()
        refused_ws, refused = await open_client(pool_of_one)
        assert (await refused.error(10))["code"] == "session_limit_reached"
        assert time.monotonic() - started < 2.5  # not the 5 s a draining unit is waited for: none drains
        await refused_ws.close()
    finally:
        await ws.close()
