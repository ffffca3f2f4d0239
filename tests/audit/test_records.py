"""What the consumer records: sessions, transcripts, responses with latencies, rejections, admin ends.

Runs on SQLite here and again on PostgreSQL (see test_admin.py's rerun).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from realtime.audit import records
from realtime.models import ConversationItem, EndReason, RealtimeSession, RefusalCount, ResponseRecord
from realtime.node import cluster, runtime
from s2s_project.asgi import application
from tests.audit.clients import receive_until, text_turn, voice_turn
from tests.support.conformance import decode
from tests.support.speech import pcm16_chunks, tone

pytestmark = pytest.mark.django_db(transaction=True)


async def connect() -> tuple[WebsocketCommunicator, str]:
    comm = WebsocketCommunicator(
        application, "/v1/realtime", subprotocols=["realtime"], headers=[(b"user-agent", b"audit-test/1.0")]
    )
    connected, _ = await comm.connect()
    assert connected
    created = decode(await comm.receive_from(timeout=5))
    assert created["type"] == "session.created"
    return comm, created["session"]["id"]


async def flushed() -> None:
    assert await asyncio.to_thread(runtime.current().writer.flush, 15)


async def test_it_records_the_transcript_and_the_latencies_of_each_response(loopback_pool):
    comm, session_id = await connect()
    await text_turn(comm, "hello there")
    done, before = await voice_turn(comm)
    assert done["response"]["status"] == "completed"
    await comm.disconnect()
    await flushed()

    session = await RealtimeSession.objects.aget(id=session_id)
    assert session.end_reason == EndReason.CLIENT_CLOSED and session.ended_at is not None
    assert session.user_agent == "audit-test/1.0" and session.unit_index in (0, 1)
    assert session.turns == 1 and session.audio_in_seconds == pytest.approx(1.5, abs=0.05)
    assert session.audio_out_seconds > 0
    items = [(i.role, i.text) async for i in ConversationItem.objects.filter(session=session).order_by("seq")]
    assert items[:2] == [("user", "hello there"), ("assistant", "You said: hello there.")]
    assert items[2][0] == "user" and items[2][1].startswith("audio of ")
    assert items[3] == ("assistant", f"You said: {items[2][1]}.")
    responses = [r async for r in ResponseRecord.objects.filter(session=session).order_by("finished_at")]
    assert [r.status for r in responses] == ["completed", "completed"]
    text_response, voice_response = responses
    assert text_response.voice_to_voice_s is None and text_response.stt_s is None  # no speech in that turn
    assert 0 < text_response.breakdown["request_to_audio_s"] < 5  # timed from its response.create instead
    assert text_response.lm_first_token_s is not None and text_response.tts_first_audio_s is not None
    assert text_response.output_tokens > 0 and text_response.audio_ms > 0
    assert voice_response.stt_s is not None and 0 < voice_response.voice_to_voice_s < 5
    # The post-session task ran (eagerly here) and put its summary on the record.
    assert session.summarized_at is not None
    words = {role: sum(len(text.split()) for r, text in items if r == role) for role in ("user", "assistant")}
    assert session.summary["words"] == words
    assert session.summary["latency_s"]["voice_to_voice"]["count"] == 1
    assert session.summary["latency_s"]["request_to_audio"]["count"] == 1  # the typed turn
    assert session.summary["responses"] == {"completed": 2}


async def test_a_live_sessions_record_counts_its_errors_and_turns_as_they_happen(loopback_pool):
    """The admin's live page reads the record: its Errors said 0 until the session ended (issue 50)."""
    comm, session_id = await connect()
    await comm.send_json_to({"type": "no.such.event", "event_id": "evt_bad"})
    assert decode(await comm.receive_from(timeout=5))["type"] == "error"
    await voice_turn(comm)
    for _ in range(50):  # the counters are written every 2 s while the session lives
        await flushed()
        session = await RealtimeSession.objects.aget(id=session_id)
        if session.errors == 1 and session.turns == 1:
            break
        await asyncio.sleep(0.2)
    assert (session.errors, session.turns, session.ended_at) == (1, 1, None)
    assert session.audio_in_seconds == pytest.approx(1.5, abs=0.05)
    await comm.disconnect()


async def test_a_truncated_answer_is_recorded_as_what_the_user_heard(loopback_pool):
    comm, session_id = await connect()
    done = await text_turn(comm, "hello there")
    item = done["response"]["output"][0]
    assert item["content"][0]["transcript"] == "You said: hello there."
    # The FAKE TTS speaks 60 ms of tone per word, piece by piece: "You said:" then "hello there."
    await comm.send_json_to(
        {"type": "conversation.item.truncate", "item_id": item["id"], "content_index": 0, "audio_end_ms": 120}
    )
    await receive_until(comm, "conversation.item.truncated")
    await comm.disconnect()
    await flushed()
    record = await ConversationItem.objects.aget(session_id=session_id, item_id=item["id"])
    assert (record.text, record.audio_ms) == ("You said:", 120)


async def test_a_slow_database_never_delays_an_audio_delta(loopback_pool):
    comm, session_id = await connect()
    gate = threading.Event()
    runtime.current().writer.submit(lambda: gate.wait(20))  # the record writer is stuck behind a slow database
    try:
        started = time.monotonic()
        await comm.send_json_to(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "while the database is slow"}],
                },
            }
        )
        await comm.send_json_to({"type": "response.create"})
        await receive_until(comm, "response.output_audio.delta")
        first_delta_s = time.monotonic() - started
        await receive_until(comm, "response.done")
        assert first_delta_s < 2.0
        assert runtime.current().writer.backlog > 0  # the records wait; the audio did not
        assert not await ConversationItem.objects.filter(session_id=session_id).aexists()
    finally:
        gate.set()
    await comm.disconnect()
    await flushed()
    texts = [i.text async for i in ConversationItem.objects.filter(session_id=session_id).order_by("seq")]
    assert texts == ["while the database is slow", "You said: while the database is slow."]


def test_while_the_database_stays_away_the_backlog_is_bounded_and_what_fits_is_written_in_order():
    writer = records.RecordWriter(max_backlog=3)
    gate, done = threading.Event(), []
    writer.submit(lambda: gate.wait(20))  # taken by the writer thread: the database does not answer
    deadline = time.monotonic() + 5
    while writer.backlog and time.monotonic() < deadline:
        time.sleep(0.01)
    for n in range(5):
        writer.submit(lambda n=n: done.append(n))
    assert (writer.backlog, writer.overflowed) == (3, 2)
    gate.set()
    assert writer.flush(10)
    assert done == [0, 1, 2] and writer.dropped == 0


async def test_a_connection_turned_away_is_counted_per_minute_and_reason_without_a_row_of_its_own(loopback_pool):
    runtime.current().refusals.flush()  # what earlier tests counted goes to their database, not this one
    await flushed()
    await RefusalCount.objects.all().adelete()
    held = [await connect() for _ in range(2)]
    comm = WebsocketCommunicator(application, "/v1/realtime")
    await comm.connect()
    error = decode(await comm.receive_from(timeout=5))
    assert error["error"]["code"] == "session_limit_reached"
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 1008, "reason": "All session slots are in use"}
    for other, _ in held:
        await other.disconnect()
    await flushed()
    runtime.current().refusals.flush()
    await flushed()
    assert not await RealtimeSession.objects.filter(end_reason=EndReason.REJECTED).aexists()
    counted = await RefusalCount.objects.aget(reason="session_limit_reached")
    assert counted.count == 1 and counted.close_code == 1008


async def test_an_admin_message_ends_the_session_frees_the_unit_and_is_recorded(loopback_pool):
    comm, session_id = await connect()
    await flushed()
    assert loopback_pool.free_units() == 1
    await get_channel_layer().group_send(cluster.session_group(session_id), {"type": cluster.END_SESSION})
    error, _ = await receive_until(comm, "error", timeout=5)
    assert error["error"]["code"] == "session_ended_by_admin"
    closed = await comm.receive_output(timeout=5)
    assert closed["type"] == "websocket.close" and closed["code"] == 1008
    for _ in range(50):
        if loopback_pool.free_units() == 2:
            break
        await asyncio.sleep(0.1)
    assert loopback_pool.free_units() == 2
    await comm.disconnect()
    await flushed()
    session = await RealtimeSession.objects.aget(id=session_id)
    assert session.end_reason == EndReason.ADMIN_ENDED and session.close_code == 1008


async def test_the_admin_action_ends_the_selected_live_session(loopback_pool, admin_user):
    from django.test import Client

    comm, session_id = await connect()
    await flushed()
    client = Client()
    await sync_to_async(client.force_login)(admin_user)
    response = await sync_to_async(client.post)(
        "/admin/realtime/realtimesession/", {"action": "end_live_sessions", "_selected_action": [session_id]}
    )
    assert response.status_code == 302
    error, _ = await receive_until(comm, "error", timeout=5)
    assert error["error"]["code"] == "session_ended_by_admin"
    await comm.disconnect()


async def slow_response(comm: WebsocketCommunicator, modality: str) -> str:
    """Starts the fake LM's long, slow answer; returns its response id once its output flows."""
    await comm.send_json_to(
        {"type": "session.update", "session": {"type": "realtime", "output_modalities": [modality]}}
    )
    await comm.send_json_to(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "slow answer please"}],
            },
        }
    )
    await comm.send_json_to({"type": "response.create"})
    delta, _ = await receive_until(comm, f"response.output_{modality}.delta")
    return delta["response_id"]


async def test_a_response_the_client_cancels_is_recorded_as_client_cancelled(loopback_pool):
    """The cancel carries its reason: before, the LM stage recorded every cancel it saw as turn_detected."""
    comm, session_id = await connect()
    response_id = await slow_response(comm, "text")
    await comm.send_json_to({"type": "response.cancel"})
    done, _ = await receive_until(comm, "response.done")
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    await comm.disconnect()
    await flushed()
    record = await ResponseRecord.objects.aget(session_id=session_id, response_id=response_id)
    assert (record.status, record.reason) == ("cancelled", "client_cancelled")


async def test_a_response_the_user_talks_over_is_recorded_as_turn_detected(loopback_pool):
    """Before, the TTS stage recorded every cancel it saw as client_cancelled."""
    comm, session_id = await connect()
    response_id = await slow_response(comm, "audio")
    for chunk in pcm16_chunks(tone(0.4)):
        await comm.send_json_to({"type": "input_audio_buffer.append", "audio": chunk})
    await receive_until(comm, "input_audio_buffer.speech_started")
    while True:
        done, _ = await receive_until(comm, "response.done")
        if done["response"]["id"] == response_id:
            break
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    await comm.disconnect()
    await flushed()
    record = await ResponseRecord.objects.aget(session_id=session_id, response_id=response_id)
    assert (record.status, record.reason) == ("cancelled", "turn_detected")
