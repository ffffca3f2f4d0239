"""The OpenAI Realtime protocol over the real ASGI application (``connect``) or the session core alone
behind the in-memory test transport (``direct``), on the loopback profile (FAKE stages).

The fake stages answer by fixed rules (pipelines/loopback.py): the fake STT
transcribes a turn as "audio of N seconds", the fake LM replies
"You said: <text>." (slowly for a text starting with "slow", raising for one
starting with "fail"), and the fake TTS echoes the user's last turn or plays a
440 Hz tone of 60 ms per word.
"""

from __future__ import annotations

import base64
import time

import numpy as np
import pytest

from pipelines import audio
from tests.support.client import audio_bytes, text_item, types
from tests.support.speech import silence, tone

pytestmark = pytest.mark.django_db(transaction=True)

MANUAL = {"audio": {"input": {"turn_detection": None}}}
FAST_VAD = {"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}}


def subsequence(expected: list[str], actual: list[str]) -> bool:
    it = iter(actual)
    return all(name in it for name in expected)


def dominant_hz(samples: np.ndarray, rate: int = 24000) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * rate / len(samples))


def echo_ms(data: bytes, fmt: str = audio.PCM) -> int:
    """How long the response audio plays the user's 220 Hz tone back before the fake TTS's 440 Hz tone.

    The fake TTS echoes the user's turn for the first piece of the answer and
    plays 440 Hz for the pieces after it (how many depends on how the LM stage
    cuts the text).
    """
    rate = audio.RATES[fmt]
    samples = audio.decode(data, fmt)
    window = rate * 40 // 1000
    ms = 0
    for at in range(0, len(samples) - window + 1, window):
        if dominant_hz(samples[at : at + window], rate) > 330:
            break
        ms += 40
    return ms


# --- session -----------------------------------------------------------------


async def test_it_sends_session_created_with_the_realtime_subprotocol_and_the_model(connect):
    client = await connect("/v1/realtime?model=my-model-name")
    assert client.subprotocol == "realtime"
    session = client.created["session"]
    assert session["model"] == "my-model-name"
    assert session["type"] == "realtime"
    assert session["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"


async def test_session_update_in_the_ga_shape_is_applied_and_echoed(direct):
    client = await direct()
    passthrough = {
        "tracing": "auto",
        "include": ["item.input_audio_transcription.logprobs"],
        "truncation": {"type": "retention_ratio", "retention_ratio": 0.5},
    }
    updated = await client.update_session(
        instructions="Be terse.",
        output_modalities=["text"],
        max_output_tokens=90,
        audio={
            "input": {
                "format": {"type": "audio/pcmu"},
                "noise_reduction": {"type": "near_field"},
                "transcription": {"model": "whisper-1", "language": "en"},
                "turn_detection": {"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 350},
            },
            "output": {"format": {"type": "audio/pcma"}, "voice": "ash", "speed": 1.1},
        },
        **passthrough,
    )
    session = updated["session"]
    assert session["instructions"] == "Be terse."
    assert session["output_modalities"] == ["text"]
    assert session["max_output_tokens"] == 90
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
    assert session["audio"]["input"]["transcription"] == {"model": "whisper-1", "language": "en"}
    assert session["audio"]["input"]["turn_detection"]["threshold"] == 0.6
    assert session["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 350
    assert session["audio"]["output"] == {"format": {"type": "audio/pcma"}, "voice": "ash", "speed": 1.1}
    for key, value in passthrough.items():
        assert session[key] == value
    assert (session["tools"], session["tool_choice"]) == ([], "auto")


async def test_session_update_in_the_beta_flat_shape_is_applied(connect):
    client = await connect()
    await client.send(
        "session.update",
        session={
            "modalities": ["text"],
            "input_audio_format": "g711_ulaw",
            "output_audio_format": "g711_alaw",
            "voice": "echo",
            "turn_detection": None,
            "input_audio_noise_reduction": {"type": "far_field"},
            "max_response_output_tokens": 50,
            "tracing": {"workflow_name": "tests"},
        },
    )
    session = (await client.until("session.updated"))["session"]
    assert session["output_modalities"] == ["text"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["output"]["format"] == {"type": "audio/pcma"}
    assert session["audio"]["output"]["voice"] == "echo"
    assert session["audio"]["input"]["turn_detection"] is None
    assert session["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    assert session["max_output_tokens"] == 50
    assert session["tracing"] == {"workflow_name": "tests"}


async def test_a_beta_client_gets_the_beta_session_shape_and_event_names(connect):
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    assert client.created["session"]["input_audio_format"] == "pcm16"
    await client.send(
        "session.update",
        session={
            "modalities": ["text", "audio"],
            "turn_detection": None,
            "output_audio_format": "g711_ulaw",
            "tracing": "auto",
        },
    )
    session = (await client.until("session.updated"))["session"]
    assert session["output_audio_format"] == "g711_ulaw"
    assert session["turn_detection"] is None
    assert session["tracing"] == "auto"

    await client.say_text("hello audio")
    spoken = await client.collect("response.done")
    assert "conversation.item.created" in types(spoken)
    assert "response.audio.delta" in types(spoken)
    assert "response.audio_transcript.delta" in types(spoken)
    assert spoken[-1]["response"]["output"][0]["content"][0]["type"] == "audio"

    await client.say_text("hello text", modalities=["text"])
    written = await client.collect("response.done")
    assert "response.text.delta" in types(written)
    assert written[-1]["response"]["output"][0]["content"][0] == {"type": "text", "text": "You said: hello text."}
    ga_only = {
        "conversation.item.added",
        "conversation.item.done",
        "response.output_audio.delta",
        "response.output_text.delta",
        "response.output_audio_transcript.delta",
    }
    assert not ga_only & set(types(client.received))


async def test_a_beta_client_samples_within_the_beta_temperature_range_and_greedy_is_the_default(connect):
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    assert client.created["session"]["temperature"] == 0.0  # greedy unless the client asks
    assert "spoken aloud" in client.created["session"]["instructions"]
    for bad in (0.3, 1.5):
        event_id = await client.send("session.update", session={"temperature": bad})
        error = await client.error()
        assert (error["code"], error["param"], error["event_id"]) == ("invalid_value", "session.temperature", event_id)
    event_id = await client.send("response.create", response={"temperature": 2.0, "modalities": ["text"]})
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_value", "response.temperature", event_id)
    await client.send("session.update", session={"temperature": 0.9})
    assert (await client.until("session.updated"))["session"]["temperature"] == 0.9


# --- responses -----------------------------------------------------------------

GA_ORDER_TEXT = [
    "response.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.done",
]
GA_ORDER_AUDIO = [
    "response.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_audio_transcript.delta",  # a piece's words go out as its synthesis starts, ahead of it
    "response.output_audio.delta",
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.done",
]


async def test_a_text_response_comes_in_the_ga_order_and_response_done_carries_the_text(direct):
    client = await direct()
    await client.update_session(output_modalities=["text"])
    await client.send("conversation.item.create", item=text_item("hello there"))
    added = await client.until("conversation.item.done")
    assert added["item"]["content"] == [{"type": "input_text", "text": "hello there"}]
    await client.send("response.create")
    events = await client.collect("response.done")
    assert subsequence(GA_ORDER_TEXT, types(events)), types(events)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "You said: hello there."
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output_modalities"] == ["text"]
    assert done["output"][0]["role"] == "assistant"
    assert done["output"][0]["content"] == [{"type": "output_text", "text": "You said: hello there."}]
    assert done["usage"]["output_tokens"] > 0
    assert all(event.get("event_id") for event in client.received)


async def test_rate_limits_are_reported_at_each_responses_start_with_its_tokens_reserved(direct, loopback_pool):
    client = await direct()
    await client.update_session(output_modalities=["text"])
    await client.send("conversation.item.create", item=text_item("hello there"))
    await client.send("response.create", response={"max_output_tokens": 5})
    events = await client.collect("response.done")
    kinds = types(events)
    assert kinds.index("response.created") + 1 == kinds.index("rate_limits.updated")
    update = events[kinds.index("rate_limits.updated")]
    limits = {limit["name"]: limit for limit in update["rate_limits"]}
    assert set(limits) == {"requests", "tokens"}
    assert 0 < limits["requests"]["remaining"] <= limits["requests"]["limit"]
    cap = next(s.max_new_tokens for s in loopback_pool.units[0].stages() if hasattr(s, "max_new_tokens"))
    assert limits["tokens"] == {"name": "tokens", "limit": cap, "remaining": cap - 5, "reset_seconds": 0.0}
    assert "rate_limits.updated" not in types(await client.drain())  # not again after response.done


async def test_a_silent_user_is_prompted_after_idle_timeout_ms_from_the_end_of_the_answers_audio(connect):
    client = await connect()
    await client.update_session(audio={"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}}})
    await client.send("conversation.item.create", item=text_item("hello"))
    await client.send("response.create")
    done = await client.until("response.done")
    done_at = time.monotonic()
    audio_ms = audio.duration_ms(len(audio_bytes(client.received)), audio.PCM)
    triggered = await client.until("input_audio_buffer.timeout_triggered", timeout=10)
    waited_ms = (time.monotonic() - done_at) * 1000
    assert waited_ms >= audio_ms + 1000 - 50, (waited_ms, audio_ms)
    assert triggered["audio_end_ms"] >= triggered["audio_start_ms"]
    prompted = await client.until("response.done", timeout=10)
    assert prompted["response"]["id"] != done["response"]["id"]
    assert prompted["response"]["status"] == "completed"


async def test_speech_before_idle_timeout_ms_cancels_the_prompt(connect):
    client = await connect()
    await client.update_session(audio={"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}}})
    await client.send("conversation.item.create", item=text_item("hi"))
    await client.send("response.create", response={"output_modalities": ["text"]})
    await client.until("response.done")
    await client.append(tone(0.3))
    await client.until("input_audio_buffer.speech_started")
    await client.append(tone(1.5), pace=1.0)  # still speaking when the timeout would have fired
    await client.append(silence(1.0))
    events = await client.collect("response.done", timeout=10)
    assert "input_audio_buffer.timeout_triggered" not in types(events)
    assert "input_audio_buffer.speech_stopped" in types(events)


async def test_an_audio_response_comes_in_the_ga_order_with_audio_and_its_transcript(direct):
    client = await direct()
    await client.say_text("hello sound")
    events = await client.collect("response.done")
    assert subsequence(GA_ORDER_AUDIO, types(events)), types(events)
    transcript = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
    assert transcript == "You said: hello sound."
    kinds = types(events)
    assert kinds.index("response.output_audio_transcript.delta") < kinds.index("response.output_audio.delta")
    pcm = audio_bytes(events)
    # No user audio to echo: the fake TTS plays 440 Hz for 60 ms per word (4 words).
    assert audio.duration_ms(len(pcm), audio.PCM) == 240
    assert abs(dominant_hz(audio.decode(pcm, audio.PCM)) - 440) < 10
    done = events[-1]["response"]
    assert done["output"][0]["content"] == [{"type": "output_audio", "transcript": "You said: hello sound."}]
    assert all(event.get("event_id") for event in client.received)


async def test_a_spoken_turn_with_server_vad_is_transcribed_and_answered_with_its_echo(connect):
    client = await connect()
    await client.update_session(**FAST_VAD)
    await client.append(silence(0.3))
    await client.append(tone(1.0))
    await client.append(silence(0.5))
    events = await client.collect("response.done")
    expected = [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.completed",
        *GA_ORDER_AUDIO,
    ]
    assert subsequence(expected, types(events)), types(events)
    started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    stopped = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
    # audio_start_ms includes the 300 ms of prefix padding, as OpenAI's does.
    assert 0 <= started["audio_start_ms"] <= 100
    assert 1250 <= stopped["audio_end_ms"] <= 1400
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["item_id"] == started["item_id"]
    seconds = float(transcript["transcript"].split()[2])
    assert 1.0 <= seconds <= 1.6
    # The user's own turn comes back: about as long as the turn.
    assert abs(echo_ms(audio_bytes(events)) - seconds * 1000) <= 80, (echo_ms(audio_bytes(events)), seconds)
    assert events[-1]["response"]["status"] == "completed"


async def test_manual_mode_commits_and_answers_only_when_asked(direct):
    client = await direct()
    await client.update_session(**MANUAL)
    await client.append(tone(0.5))
    assert await client.drain(0.3) == []  # no turn detection: nothing happens until the commit
    await client.send("input_audio_buffer.commit")
    committed = await client.collect("conversation.item.input_audio_transcription.completed")
    assert "input_audio_buffer.committed" in types(committed)
    assert "response.created" not in types(await client.drain(0.3))
    await client.send("response.create")
    events = await client.collect("response.done")
    assert 440 <= echo_ms(audio_bytes(events)) <= 560


async def test_committing_an_empty_buffer_is_an_error_and_clear_is_confirmed(direct):
    client = await direct()
    await client.update_session(**MANUAL)
    event_id = await client.send("input_audio_buffer.commit")
    error = await client.error()
    assert error["code"] == "input_audio_buffer_commit_empty"
    assert error["type"] == "invalid_request_error"
    assert error["event_id"] == event_id  # found by the pipeline, after parsing: still the client's id
    await client.append(tone(0.2))
    await client.send("input_audio_buffer.clear")
    await client.until("input_audio_buffer.cleared")
    await client.send("input_audio_buffer.commit")  # cleared: empty again
    assert (await client.error())["code"] == "input_audio_buffer_commit_empty"


@pytest.mark.parametrize("fmt", [audio.PCMU, audio.PCMA])
async def test_g711_audio_goes_in_and_comes_out_at_8_khz_one_byte_per_sample(connect, fmt):
    client = await connect()
    await client.update_session(
        audio={"input": {"format": {"type": fmt}, "turn_detection": None}, "output": {"format": {"type": fmt}}}
    )
    spoken = audio.encode(tone(0.6, rate=8000), fmt)
    assert len(spoken) == 4800
    await client.append_bytes(spoken, 160)  # 20 ms at 8 kHz
    await client.send("input_audio_buffer.commit")
    transcript = await client.until("conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"] == "audio of 0.60 seconds"
    await client.send("response.create")
    events = await client.collect("response.done")
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert all(len(base64.b64decode(e["delta"])) == 800 for e in deltas[:-1])  # 100 ms at 8 kHz, 1 byte a sample
    played = audio_bytes(deltas)
    # The echo of the 0.6 s turn, then 60 ms (480 bytes) of the fake TTS's tone per word of any later piece.
    assert len(played) >= 4800 and (len(played) - 4800) % 480 == 0
    assert 560 <= echo_ms(played, fmt) <= 640  # the user's 0.6 s came back through G.711 both ways
    assert events[-1]["response"]["audio"]["output"]["format"]["type"] == fmt


# --- conversation items ----------------------------------------------------------


async def test_items_can_be_retrieved_and_deleted(direct):
    client = await direct()
    await client.send("conversation.item.create", item={**text_item("keep me"), "id": "item_mine"})
    await client.until("conversation.item.done")
    await client.send("conversation.item.retrieve", item_id="item_mine")
    item = (await client.until("conversation.item.retrieved"))["item"]
    assert item["id"] == "item_mine" and item["content"][0]["text"] == "keep me"
    await client.send("conversation.item.delete", item_id="item_mine")
    assert (await client.until("conversation.item.deleted"))["item_id"] == "item_mine"
    event_id = await client.send("conversation.item.retrieve", item_id="item_mine")
    error = await client.error()
    assert (error["code"], error["event_id"]) == ("item_not_found", event_id)


async def test_truncating_a_spoken_assistant_item_trims_its_transcript_to_what_was_heard(connect):
    client = await connect()
    await client.update_session(**MANUAL)
    await client.append(tone(1.0))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    done = (await client.until("response.done"))["response"]
    item_id = done["output"][0]["id"]
    full = done["output"][0]["content"][0]["transcript"]
    assert full == "You said: audio of 1.00 seconds."
    await client.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=500)
    truncated = await client.until("conversation.item.truncated")
    assert (truncated["item_id"], truncated["audio_end_ms"]) == (item_id, 500)
    await client.send("conversation.item.retrieve", item_id=item_id)
    heard = (await client.until("conversation.item.retrieved"))["item"]["content"][0]["transcript"]
    assert heard and full.startswith(heard) and len(heard) < len(full), heard

    event_id = await client.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=5000)
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("invalid_value", "audio_end_ms", event_id)


async def test_an_early_reply_can_still_be_truncated_after_many_later_ones(connect):
    """The API truncates any assistant audio item still in the conversation, however many replies came since."""
    client = await connect()
    await client.update_session(**MANUAL)
    replies: list[dict] = []
    for turn in range(25):
        await client.say_text(f"turn {turn}")
        replies.append((await client.until("response.done", timeout=30))["response"]["output"][0])
    first = replies[0]
    await client.send("conversation.item.truncate", item_id=first["id"], content_index=0, audio_end_ms=0)
    truncated = await client.until("conversation.item.truncated")
    assert (truncated["item_id"], truncated["audio_end_ms"]) == (first["id"], 0)
    await client.send("conversation.item.retrieve", item_id=first["id"])
    assert (await client.until("conversation.item.retrieved"))["item"]["content"][0]["transcript"] == ""

    await client.send("conversation.item.delete", item_id=replies[1]["id"])
    await client.until("conversation.item.deleted")
    event_id = await client.send(
        "conversation.item.truncate", item_id=replies[1]["id"], content_index=0, audio_end_ms=0
    )
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == ("item_not_found", "item_id", event_id)


# --- cancelling ----------------------------------------------------------------


async def test_response_cancel_stops_a_long_response(connect):
    client = await connect()
    await client.update_session(output_modalities=["text"])
    await client.say_text("slow answer please")
    first = await client.until("response.output_text.delta")
    await client.send("response.cancel")
    events = await client.collect("response.done")
    done = events[-1]["response"]
    assert done["id"] == first["response_id"]
    assert done["status"] == "cancelled"
    assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    later = await client.drain(0.3)
    assert not [e for e in later if e.get("response_id") == first["response_id"]]
    deltas = [e for e in client.received if e["type"] == "response.output_text.delta"]
    assert len(deltas) < 100  # the fake's slow answer is over 200 words


async def test_speech_during_a_response_interrupts_it(connect):
    client = await connect()
    await client.update_session(**FAST_VAD)
    await client.say_text("slow story please")
    first = await client.until("response.output_audio.delta")
    await client.append(tone(0.4))
    await client.until("input_audio_buffer.speech_started")
    speech_at = len(client.received) - 1
    await client.append(silence(0.4))
    events = await client.collect(
        lambda e: e["type"] == "response.done" and e["response"]["id"] == first["response_id"]
    )
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["status_details"]["reason"] == "turn_detected"
    after = client.received[speech_at:]
    assert not [
        e for e in after if e["type"] == "response.output_audio.delta" and e["response_id"] == first["response_id"]
    ]
    await client.until("response.done")  # the new turn is answered
    assert client.received[-1]["response"]["status"] == "completed"


async def test_an_out_of_band_response_stays_out_of_the_conversation(connect):
    client = await connect()
    await client.send(
        "response.create",
        response={
            "conversation": "none",
            "output_modalities": ["text"],
            "metadata": {"purpose": "classify"},
            "input": [text_item("out of band words")],
        },
    )
    events = await client.collect("response.done")
    done = events[-1]["response"]
    assert done["conversation_id"] is None
    assert done["metadata"] == {"purpose": "classify"}
    assert done["output"][0]["content"][0]["text"] == "You said: out of band words."
    assert "conversation.item.added" not in types(events)
    await client.send("conversation.item.retrieve", item_id=done["output"][0]["id"])
    assert (await client.error())["code"] == "item_not_found"


async def test_a_second_response_while_one_is_active_is_refused(direct):
    client = await direct()
    await client.update_session(output_modalities=["text"])
    await client.say_text("slow and long")
    await client.until("response.created")
    event_id = await client.send("response.create")
    error = await client.error()
    assert (error["code"], error["event_id"]) == ("conversation_already_has_active_response", event_id)
    await client.send("response.cancel")
    assert (await client.until("response.done"))["response"]["status"] == "cancelled"


async def test_output_audio_buffer_clear_is_an_error_over_websocket(connect):
    client = await connect()
    event_id = await client.send("output_audio_buffer.clear")
    error = await client.error()
    assert error["event_id"] == event_id
    assert "WebRTC" in error["message"]


async def test_a_failing_language_model_gives_an_error_and_a_failed_response_and_the_session_goes_on(connect):
    client = await connect()
    await client.update_session(output_modalities=["text"])
    await client.send("conversation.item.create", item=text_item("fail this one"))
    event_id = await client.send("response.create")
    events = await client.collect("response.done")
    assert events[-1]["response"]["status"] == "failed"
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert errors and errors[0]["code"] == "response_failed"
    assert errors[0]["event_id"] == event_id  # the response.create it answers
    await client.say_text("then this one")
    done = (await client.until("response.done"))["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["text"] == "You said: then this one."


async def test_an_unknown_voice_is_refused(connect):
    client = await connect()
    event_id = await client.send(
        "session.update", session={"type": "realtime", "audio": {"output": {"voice": "no-such-voice"}}}
    )
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == (
        "invalid_value",
        "session.audio.output.voice",
        event_id,
    )
    event_id = await client.send("response.create", response={"audio": {"output": {"voice": "no-such-voice"}}})
    assert (await client.error())["event_id"] == event_id


# --- bad input -----------------------------------------------------------------

BAD_EVENTS = [
    pytest.param({"type": "session.nonsense"}, "invalid_value", "type", id="unknown-type"),
    pytest.param({"type": "conversation.item.retrieve"}, "missing_required_parameter", "item_id", id="missing-field"),
    pytest.param(
        {"type": "input_audio_buffer.append", "audio": "not base64!"}, "invalid_base64", "audio", id="bad-base64"
    ),
    pytest.param({"type": "conversation.item.delete", "item_id": 42}, "invalid_type", "item_id", id="wrong-type"),
    pytest.param(
        {"type": "session.update", "session": "audio please"}, "invalid_type", "session", id="wrong-type-session"
    ),
]


@pytest.mark.parametrize("event, code, param", BAD_EVENTS)
async def test_bad_input_gets_an_error_with_its_code_and_event_id_and_the_session_goes_on(direct, event, code, param):
    client = await direct()
    event_id = await client.send(event["type"], **{k: v for k, v in event.items() if k != "type"})
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == (code, param, event_id)
    assert error["type"] == "invalid_request_error"
    await client.say_text("still here", output_modalities=["text"])
    assert (await client.until("response.done"))["response"]["output"][0]["content"][0][
        "text"
    ] == "You said: still here."


async def test_invalid_json_gets_an_error_and_the_session_goes_on(direct):
    client = await direct()
    await client.send_raw('{"type": "response.create", ')
    error = await client.error()
    assert error["code"] == "invalid_json"
    assert error["event_id"] is None  # nothing could be read from it
    await client.say_text("still here", output_modalities=["text"])
    assert (await client.until("response.done"))["response"]["status"] == "completed"


# --- isolation -------------------------------------------------------------------


async def test_a_new_session_on_the_same_unit_never_hears_the_previous_sessions_audio(connect, loopback_pool):
    first = await connect()
    await first.update_session(**MANUAL)
    await first.append(tone(0.5))
    await first.send("input_audio_buffer.commit")  # transcribed, never answered
    await first.until("conversation.item.input_audio_transcription.completed")
    unit = next(u for u in loopback_pool.units if u.session_id == first.created["session"]["id"])
    await first.communicator.disconnect(timeout=10)

    second = await connect()
    assert unit.session_id == second.created["session"]["id"]  # the same unit again
    await second.say_text("hello sound")
    events = await second.collect("response.done")
    assert echo_ms(audio_bytes(events)) == 0  # only the fake TTS's own tone: nothing of the first session
