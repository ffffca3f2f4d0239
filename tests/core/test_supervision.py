"""A supervisor on a live session (issue 51), over the in-process ASGI app with FAKE stages (the loopback
profile: its STT says "audio of N seconds", its LM "You said: ...", its TTS a tone): the protocol of
``/v1/realtime?call_id=ID&mode=supervise``: listen (both sides' audio and the events), whisper (into the LM's
conversation, never to the caller or a follower), take over (the agent silent, the supervisor's voice to the caller
as a response), hand back, and bad input answered with an error while the session goes on. The real models and
a real server: tests/pipeline/test_supervision_real.py; who may: tests/security/test_owner_layers.py."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import pytest
from channels.testing import WebsocketCommunicator

from pipelines import audio, messages as m
from pipelines.stages.lm import LmStage
from realtime.models import SupervisorAction
from realtime.node import runtime
from s2s_project.asgi import application
from tests.support.client import RealtimeClient, types
from tests.support.speech import silence, tone
from tests.support.supervisor import SupervisorClient

pytestmark = pytest.mark.django_db(transaction=True)

VAD = {"type": "server_vad", "silence_duration_ms": 200, "prefix_padding_ms": 0}
TRANSCRIBED = {"type": "realtime", "audio": {"input": {"transcription": {"model": "whisper-1"}, "turn_detection": VAD}}}


async def supervise(session_or_call_id: str, headers: list[tuple[bytes, bytes]] | None = None) -> RealtimeClient:
    comm = WebsocketCommunicator(
        application, f"/v1/realtime?call_id={session_or_call_id}&mode=supervise", headers=headers or []
    )
    connected, _ = await comm.connect(timeout=10)
    assert connected
    client = SupervisorClient.over_communicator(comm)
    client.communicator = comm  # type: ignore[attr-defined]
    return client


async def caller(connect) -> tuple[RealtimeClient, str]:
    client = await connect()
    await client.update_session(**TRANSCRIBED)
    return client, client.created["session"]["id"]


def pcm_of(events: list[dict], kind: str, key: str = "delta") -> bytes:
    return b"".join(base64.b64decode(e[key]) for e in events if e["type"] == kind)


def session_core(session_id: str) -> Any:
    return next(s for s in runtime.current().sessions if getattr(s, "id", None) == session_id)


def lm_history(session_id: str) -> list[m.HistoryItem]:
    lm = next(stage for stage in session_core(session_id).lease.unit.stages() if isinstance(stage, LmStage))
    return [item for item in lm.history.values() if isinstance(item, m.HistoryItem)]


async def turn(client: RealtimeClient, seconds: float = 0.6) -> None:
    """The caller says something (a tone the fake VAD hears as speech), then falls silent."""
    await client.append(np.concatenate([tone(seconds), silence(0.5)]))


async def test_a_supervisor_hears_both_sides_and_gets_the_transcripts(connect):
    client, session_id = await caller(connect)
    boss = await supervise(session_id)
    assert (await boss.recv(5))["type"] == "session.created"
    assert (await boss.recv(5)) | {"event_id": None} == {
        "type": "supervisor.state",
        "event_id": None,
        "state": "listening",
        "by": "",
    }
    spoken = np.concatenate([tone(0.6), silence(0.5)])
    await client.append(spoken)
    await client.until("response.done", timeout=15)
    await boss.until("response.done", timeout=15)
    await boss.drain()
    heard = boss.received
    assert pcm_of(heard, "supervisor.input_audio.delta") == audio.encode(spoken, audio.PCM)
    assert "conversation.item.input_audio_transcription.completed" in types(heard)
    agent = pcm_of(heard, "response.output_audio.delta")
    assert agent and agent == pcm_of(client.received, "response.output_audio.delta")


async def test_a_whisper_reaches_the_agent_and_no_caller_or_follower_event(direct, connect):
    call = await direct(call_id="rtc_supervisedcall0000000001")
    session_id = call.created["session"]["id"]
    follower = await connect(path="/v1/realtime?call_id=rtc_supervisedcall0000000001")
    boss = await supervise(session_id)
    await boss.until("supervisor.state")
    secret = "Always end your answer with the word pineapple"
    event_id = await boss.send("supervisor.whisper", text=secret)
    added = await boss.until("supervisor.whisper.added")
    assert added["text"] == secret and added["item_id"].startswith("item_")
    core = session_core(session_id)
    assert secret in core.lease.unit.context.settings.instructions  # what the LM reads from the next answer on
    assert secret not in core.session.instructions  # not the session the caller sees
    asked: list[m.ResponseRequest] = []
    submit = core.conversation.port.submit

    def spied(msg: m.Downstream) -> None:
        if isinstance(msg, m.ResponseRequest):
            asked.append(msg)
        submit(msg)

    core.conversation.port.submit = spied
    await call.say_text("hello")
    await call.until("response.done")
    await follower.until("response.done")
    assert asked and secret in asked[-1].instructions  # a client's response.create reads it too
    for client in (call, follower):
        assert secret not in json.dumps(client.received) and added["item_id"] not in json.dumps(client.received)
    assert event_id not in json.dumps(call.received)
    runtime.current().writer.flush(10)
    row = await SupervisorAction.objects.aget(session_id=session_id, kind="whisper")
    assert row.text == secret and row.actor == "anonymous" and row.ended_at is not None


async def test_take_over_silences_the_agent_and_the_caller_hears_the_supervisor(connect):
    client, session_id = await caller(connect)
    boss = await supervise(session_id)
    await boss.until("supervisor.state")
    await boss.send("supervisor.take_over")
    assert (await boss.until("supervisor.state"))["state"] == "taken_over"
    await turn(client)  # transcribed, not answered
    await client.until("conversation.item.input_audio_transcription.completed", timeout=15)
    assert "response.created" not in types(await client.drain(quiet_s=1.0))
    await client.send("response.create")  # the client's own: asked, and cancelled at once
    held = await client.collect("response.done", timeout=15)
    assert held[-1]["response"]["status"] == "cancelled"
    assert "response.output_audio.delta" not in types(held + await client.drain(quiet_s=0.5))
    voice = np.concatenate([tone(0.5, freq=330.0), silence(1.0)])
    for chunk in range(0, len(voice), 480):
        await boss.send(
            "supervisor.audio.append",
            audio=base64.b64encode(audio.encode(voice[chunk : chunk + 480], audio.PCM)).decode(),
        )
    said = await client.collect("response.done", timeout=15)
    assert said[-1]["response"]["status"] == "completed"
    heard = pcm_of(said, "response.output_audio.delta")
    assert audio.encode(voice, audio.PCM).startswith(heard[: len(heard) // 2]) and len(heard) >= 0.5 * 48000
    item = said[-1]["response"]["output"][0]
    assert item["role"] == "assistant" and item["content"][0]["transcript"].startswith("audio of ")
    for _ in range(50):  # the LM's conversation gets it through the unit's queues
        if item["id"] in [i.item_id for i in lm_history(session_id) if i.role == "assistant"]:
            break
        await asyncio.sleep(0.05)
    assert item["id"] in [i.item_id for i in lm_history(session_id) if i.role == "assistant"]
    await boss.send("supervisor.hand_back")
    assert (await boss.until("supervisor.state"))["state"] == "listening"
    await turn(client)
    answer = await client.until("response.done", timeout=15)
    assert answer["response"]["output"][0]["content"][0]["transcript"].startswith("You said")
    runtime.current().writer.flush(10)
    kinds = [row.kind async for row in SupervisorAction.objects.filter(session_id=session_id)]
    assert kinds == ["listen", "take_over", "hand_back"]


async def test_a_supervisor_who_leaves_holding_the_call_hands_it_back(connect):
    client, session_id = await caller(connect)
    boss = await supervise(session_id)
    await boss.until("supervisor.state")
    await boss.send("supervisor.take_over")
    await boss.until("supervisor.state")
    await boss.communicator.disconnect()  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    await turn(client)
    await client.until("response.done", timeout=15)
    runtime.current().writer.flush(10)
    rows = [row async for row in SupervisorAction.objects.filter(session_id=session_id)]
    assert {row.kind for row in rows} == {"listen", "take_over", "hand_back"}
    assert all(row.ended_at is not None for row in rows)


async def test_bad_supervisor_input_is_an_error_and_the_session_goes_on(connect):
    client, session_id = await caller(connect)
    boss = await supervise(session_id)
    await boss.until("supervisor.state")
    cases = [
        ({"type": "supervisor.audio.append", "audio": "AAAAAA=="}, "invalid_value", "type"),  # not taken over
        ({"type": "supervisor.whisper"}, "missing_required_parameter", "text"),
        ({"type": "supervisor.whisper", "text": "  "}, "invalid_value", "text"),
        ({"type": "supervisor.whisper", "text": 7}, "invalid_type", "text"),
        ({"type": "response.create"}, "invalid_value", "type"),  # a supervise connection speaks only supervisor.*
        ({"type": "supervisor.hand_back"}, "invalid_value", "type"),
    ]
    for event, code, param in cases:
        await boss.send_raw(json.dumps({**event, "event_id": "evt_bad"}))
        error = await boss.error()
        assert (error["code"], error["param"], error["event_id"]) == (code, param, "evt_bad"), event
    await boss.send("supervisor.take_over")
    await boss.until("supervisor.state")
    await boss.send_raw(json.dumps({"type": "supervisor.audio.append", "audio": "AAAA", "event_id": "evt_odd"}))
    assert (await boss.error())["param"] == "audio"
    await boss.send_raw(json.dumps({"type": "supervisor.take_over", "event_id": "evt_twice"}))
    assert (await boss.error())["event_id"] == "evt_twice"
    # The caller may not send a supervisor's events; it is told so, and nothing else happens.
    await client.send_raw(json.dumps({"type": "supervisor.hand_back", "event_id": "evt_mine"}))
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_value", "type", "evt_mine")
    assert "supervise connection" in error["message"]
    await boss.send("supervisor.hand_back")
    assert (await boss.until("supervisor.state"))["state"] == "listening"
    await client.say_text("still here")
    assert (await client.until("response.done"))["response"]["status"] == "completed"


async def test_an_unknown_session_or_mode_is_refused_as_an_unknown_id(connect):
    client, _ = await caller(connect)
    boss = await supervise("sess_0000000000000000000000")
    error = await boss.error()
    assert error["code"] == "call_not_found" and (await boss.closed()).code == 1008
    comm = WebsocketCommunicator(application, "/v1/realtime?call_id=sess_x&mode=boss")
    assert (await comm.connect(timeout=10))[0]
    odd = SupervisorClient.over_communicator(comm)
    assert (await odd.error())["param"] == "mode"


async def test_over_a_call_the_supervisors_voice_is_played_as_the_calls_outgoing_audio(direct):
    """A transport that plays the reply itself (WebRTC's track, SIP's RTP): the supervisor's voice is handed to it
    as the reply's audio (in the session's output format), and a reply being played is cut by the take-over."""
    call = await direct(playing=True, call_id="rtc_supervisedcall0000000002")
    session_id = call.created["session"]["id"]
    await call.update_session(**{**TRANSCRIBED, "audio": {"output": {"format": {"type": "audio/pcmu"}}}})
    await call.say_text("slow answer please")  # the fake LM's long, slow answer
    await call.until("output_audio_buffer.started", timeout=15)
    boss = await supervise("rtc_supervisedcall0000000002")
    await boss.until("supervisor.state")
    await boss.send("supervisor.take_over")
    cut = await call.until("response.done", timeout=15)
    assert cut["response"]["status"] == "cancelled"
    assert "output_audio_buffer.cleared" in types(call.received)
    played_before = len(call.transport.played)  # type: ignore[attr-defined]
    voice = np.concatenate([tone(0.5, freq=330.0), silence(1.0)])
    data = audio.encode(voice, audio.PCM)
    for at in range(0, len(data), 960):
        await boss.send("supervisor.audio.append", audio=base64.b64encode(data[at : at + 960]).decode())
    said = await call.until(lambda e: e["type"] == "response.done" and e["response"]["id"] != cut["response"]["id"])
    assert said["response"]["status"] == "completed" and "response.output_audio.delta" not in types(call.received)
    played = call.transport.played[played_before:]  # type: ignore[attr-defined]
    assert {fmt for _, _, fmt in played} == {"audio/pcmu"}
    assert {a.response_id for _, a, _ in played} == {said["response"]["id"]}
    assert sum(len(a.data) for _, a, _ in played) >= 0.5 * 8000  # μ-law at 8 kHz: the half second of voice
    assert said["response"]["id"] in call.transport.ended_replies  # type: ignore[attr-defined]
    assert session_id


async def test_the_supervisor_notice_is_said_as_the_session_starts(connect, settings):
    settings.S2S_SUPERVISOR_NOTICE = "This call may be monitored."
    client = await connect()
    done = await client.until("response.done", timeout=15)
    assert done["response"]["status"] == "completed"
    item = done["response"]["output"][0]
    assert item["role"] == "assistant" and item["content"][0]["transcript"] == "This call may be monitored."
    assert audio.duration_ms(len(pcm_of(client.received, "response.output_audio.delta")), audio.PCM) > 100
