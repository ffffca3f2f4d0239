"""Conformance with the OpenAI Realtime GA API where the SDK's types alone cannot tell (ordering, ids, limits).

Every event these tests receive is also validated against the openai SDK's types by the client
(tests/support/conformance.py). The pipeline is the FAKE loopback profile: its LM answers
"You said: <last user text>." and a user text starting with "slow" makes a long, slow answer.
"""

from __future__ import annotations

import base64

import pytest

from pipelines import audio
from tests.support.client import text_item, types
from tests.support.speech import silence, tone

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = {"output_modalities": ["text"]}


def item_added(events: list[dict], item_id: str) -> dict:
    return next(e for e in events if e["type"] == "conversation.item.added" and e["item"]["id"] == item_id)


async def create(client, text: str, item_id: str, previous: str | None = None) -> dict:
    fields = {"previous_item_id": previous} if previous is not None else {}
    await client.send("conversation.item.create", item={**text_item(text), "id": item_id}, **fields)
    return await client.until(lambda e: e["type"] == "conversation.item.added" and e["item"]["id"] == item_id)


# --- content parts, rate limits, order ------------------------------------------------


async def test_content_part_events_carry_part_types_text_and_audio_while_items_keep_output_types(connect):
    client = await connect()
    await client.say_text("hello", **TEXT)
    written = await client.collect("response.done")
    parts = [e["part"] for e in written if e["type"].startswith("response.content_part.")]
    assert parts == [{"type": "text", "text": ""}, {"type": "text", "text": "You said: hello."}]
    assert written[-1]["response"]["output"][0]["content"][0]["type"] == "output_text"
    await client.say_text("hello again")
    spoken = await client.collect("response.done")
    parts = [e["part"] for e in spoken if e["type"].startswith("response.content_part.")]
    assert [part["type"] for part in parts] == ["audio", "audio"]
    assert parts[1]["transcript"] == "You said: hello again."
    assert spoken[-1]["response"]["output"][0]["content"][0]["type"] == "output_audio"


async def test_the_assistant_item_is_added_to_the_conversation_after_the_responses_output_item(connect):
    client = await connect()
    await client.say_text("hello", **TEXT)
    kinds = types(await client.collect("response.done"))
    assert kinds[kinds.index("response.created") : kinds.index("response.content_part.added") + 1] == [
        "response.created",
        "rate_limits.updated",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
    ]


# --- previous_item_id -----------------------------------------------------------------


async def test_previous_item_id_of_created_items_is_their_real_predecessor_never_an_echoed_root(connect):
    client = await connect()
    first = await create(client, "one", "item_a", previous="root")
    assert first["previous_item_id"] is None  # first in the conversation
    second = await create(client, "two", "item_b")
    assert second["previous_item_id"] == "item_a"
    between = await create(client, "between", "item_c", previous="item_a")
    assert between["previous_item_id"] == "item_a"
    front = await create(client, "front", "item_d", previous="root")
    assert front["previous_item_id"] is None
    done = await client.until("conversation.item.done")
    assert done["previous_item_id"] is None
    last = await create(client, "last", "item_e")
    assert last["previous_item_id"] == "item_b"  # order: d, a, c, b, e
    await client.send("conversation.item.retrieve", item_id="item_c")
    assert (await client.until("conversation.item.retrieved"))["item"]["id"] == "item_c"


# --- response.create input -------------------------------------------------------------


async def test_an_in_band_response_with_input_answers_from_that_input_and_joins_the_conversation(connect):
    client = await connect()
    await create(client, "from the conversation", "item_conv")
    await client.send("response.create", response={**TEXT, "input": [text_item("from the input")]})
    events = await client.collect("response.done")
    done = events[-1]["response"]
    assert done["output"][0]["content"][0]["text"] == "You said: from the input."
    assert done["conversation_id"] is not None
    added = item_added(events, done["output"][0]["id"])
    assert added["previous_item_id"] == "item_conv"


async def test_an_empty_input_gives_the_response_an_empty_context(connect):
    client = await connect()
    await create(client, "something said before", "item_before")
    await client.send("response.create", response={**TEXT, "input": []})
    done = (await client.until("response.done"))["response"]
    assert done["output"][0]["content"][0]["text"] == "You said: ."  # the fake LM saw no user text


def clip_item(text: str, seconds: float) -> dict:
    pcm = base64.b64encode(audio.encode(tone(seconds), audio.PCM)).decode()
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}, {"type": "input_audio", "audio": pcm}],
    }


async def test_audio_in_a_responses_inline_input_is_transcribed_first_and_stays_out_of_the_conversation(connect):
    client = await connect()
    await client.send("response.create", response={**TEXT, "conversation": "none", "input": [clip_item("hi", 0.5)]})
    events = await client.collect("response.done")
    assert not [e for e in events if e["type"].startswith(("conversation.", "input_audio_buffer."))], types(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "You said: hi audio of 0.50 seconds."
    # The clip never joined the conversation, nor the language model's history of it.
    await client.send("response.create", response=TEXT)
    done = (await client.until("response.done"))["response"]
    assert done["output"][0]["content"][0]["text"] == "You said: ."


async def test_inline_audio_that_cannot_be_transcribed_fails_the_request_with_its_event_id(
    connect, broken_stt, monkeypatch
):
    client = await connect()
    event_id = await client.send("response.create", response={"conversation": "none", "input": [clip_item("", 0.3)]})
    error = await client.error()
    assert (error["code"], error["param"], error["event_id"]) == (
        "input_audio_transcription_failed",
        "response.input",
        event_id,
    )
    monkeypatch.undo()
    await client.say_text("still here", **TEXT)
    assert (await client.until("response.done"))["response"]["status"] == "completed"
    assert "response.created" not in types(
        client.received[: client.received.index(next(e for e in client.received if e["type"] == "error"))]
    )


async def test_an_out_of_band_response_may_run_while_a_conversation_response_is_in_progress(connect):
    client = await connect()
    await client.say_text("slow story", **TEXT)
    await client.until("response.created")
    await client.send(
        "response.create",
        response={**TEXT, "conversation": "none", "metadata": {"k": "side"}, "input": [text_item("side question")]},
    )
    refused_id = await client.send("response.create", response=TEXT)  # a second in-band one is still refused
    events = await client.collect(
        lambda e: e["type"] == "response.done" and e["response"]["metadata"] == {"k": "side"}, timeout=20
    )
    error = next(e["error"] for e in events if e["type"] == "error")
    assert (error["code"], error["event_id"]) == ("conversation_already_has_active_response", refused_id)
    side = events[-1]["response"]
    assert side["status"] == "completed" and side["conversation_id"] is None
    assert side["output"][0]["content"][0]["text"] == "You said: side question."
    # The unit has one language model: the side response ran after the conversation's one, which it never touched.
    main = next(e["response"] for e in events if e["type"] == "response.done" and e["response"]["id"] != side["id"])
    assert main["conversation_id"] is not None and "side" not in main["output"][0]["content"][0]["text"]


# --- max_output_tokens ------------------------------------------------------------------


async def test_response_max_output_tokens_shows_the_responses_own_value(connect):
    client = await connect()
    await client.update_session(max_output_tokens=50)
    await client.say_text("a b c d e f g h", max_output_tokens=3, **TEXT)
    events = await client.collect("response.done")
    created = next(e for e in events if e["type"] == "response.created")["response"]
    done = events[-1]["response"]
    assert created["max_output_tokens"] == done["max_output_tokens"] == 3
    assert (done["status"], done["status_details"]["reason"]) == ("incomplete", "max_output_tokens")
    await client.say_text("hello", **TEXT)
    assert (await client.until("response.done"))["response"]["max_output_tokens"] == 50


async def test_the_servers_own_token_cap_is_reported_as_incomplete_when_the_client_asked_for_inf(
    connect, loopback_pool
):
    cap = next(s.max_new_tokens for s in loopback_pool.units[0].stages() if hasattr(s, "max_new_tokens"))
    client = await connect()
    await client.say_text("slow long story", max_output_tokens="inf", **TEXT)
    done = (await client.until("response.done", timeout=30))["response"]
    assert done["max_output_tokens"] == "inf"
    assert (done["status"], done["status_details"]) == (
        "incomplete",
        {"type": "incomplete", "reason": "max_output_tokens"},
    )
    assert done["usage"]["output_tokens"] == cap


# --- invalid session values -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"tools": {"type": "function", "name": "x"}}, "session.tools"),
        ({"tools": ["not an object"]}, "session.tools[0]"),
        ({"audio": {"input": {"noise_reduction": {"type": "studio"}}}}, "session.audio.input.noise_reduction.type"),
        ({"colour": "blue"}, "session.colour"),
        ({"audio": {"input": {"format": {"type": "audio/pcm"}, "loudness": 3}}}, "session.audio.input.loudness"),
        ({"output_modalities": ["text", "audio"]}, "session.output_modalities"),
        ({"audio": {"input": {"transcription": {"model": "my-own-asr"}}}}, "session.audio.input.transcription.model"),
        ({"include": ["item.everything"]}, "session.include[0]"),
        (
            {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "threshold": 0.5}}}},
            "session.audio.input.turn_detection.threshold",
        ),
    ],
)
async def test_an_invalid_session_value_is_an_error_naming_it_and_the_session_is_unchanged(connect, session, param):
    client = await connect()
    before = client.created["session"]
    event_id = await client.send("session.update", session={"type": "realtime", "instructions": "Changed.", **session})
    error = await client.error()
    assert (error["param"], error["event_id"], error["type"]) == (param, event_id, "invalid_request_error")
    after = (await client.update_session())["session"]

    def settled(session: dict) -> dict:
        return {key: value for key, value in session.items() if key != "expires_at"}

    assert settled(after) == settled(before)


async def test_the_session_object_the_server_sent_may_be_sent_back_as_it_is(connect):
    client = await connect()
    session = client.created["session"]
    assert (await client.update_session(**session))["session"]["id"] == session["id"]


async def test_errors_raised_after_parsing_keep_the_clients_event_id(connect):
    client = await connect()
    for event_type, fields in [
        ("conversation.item.retrieve", {"item_id": "item_nope"}),
        ("conversation.item.delete", {"item_id": "item_nope"}),
        ("response.cancel", {}),
        ("conversation.item.truncate", {"item_id": "item_nope", "content_index": 0, "audio_end_ms": 0}),
        ("output_audio_buffer.clear", {}),
    ]:
        event_id = await client.send(event_type, **fields)
        error = await client.error()
        assert error["event_id"] == event_id, (event_type, error)


# --- audio and items -----------------------------------------------------------------------


async def test_timeout_triggered_names_an_item_that_is_then_added_to_the_conversation(connect):
    client = await connect()
    await client.update_session(
        audio={"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}}}, **TEXT
    )
    await client.say_text("hello")
    await client.until("response.done")
    events = await client.collect("response.done", timeout=10)
    kinds = types(events)
    triggered = events[kinds.index("input_audio_buffer.timeout_triggered")]
    committed = events[kinds.index("input_audio_buffer.committed")]
    assert committed["item_id"] == triggered["item_id"]
    added = item_added(events, triggered["item_id"])
    assert added["item"]["role"] == "user" and added["item"]["content"][0]["type"] == "input_audio"
    assert kinds.index("input_audio_buffer.timeout_triggered") < kinds.index("response.created")
    answer = events[-1]["response"]["output"][0]["id"]
    assert item_added(events, answer)["previous_item_id"] == triggered["item_id"]
    await client.send("conversation.item.retrieve", item_id=triggered["item_id"])
    assert (await client.until("conversation.item.retrieved"))["item"]["id"] == triggered["item_id"]


async def test_a_beta_client_gets_the_idle_timeouts_item_and_response_without_the_ga_only_event(connect):
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    await client.send(
        "session.update",
        session={"modalities": ["text"], "turn_detection": {"type": "server_vad", "idle_timeout_ms": 1000}},
    )
    await client.until("session.updated")
    await client.say_text("hello")
    await client.until("response.done")
    kinds = types(await client.collect("response.done", timeout=10))
    assert "input_audio_buffer.timeout_triggered" not in kinds
    assert (
        kinds.index("input_audio_buffer.committed")
        < kinds.index("conversation.item.created")
        < kinds.index("response.created")
    )


async def test_audio_in_conversation_item_create_reports_its_transcription_seconds(connect):
    client = await connect()
    pcm = base64.b64encode(audio.encode(tone(0.8), audio.PCM)).decode()
    await client.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": pcm}]},
    )
    completed = await client.until("conversation.item.input_audio_transcription.completed")
    assert completed["usage"] == {"type": "duration", "seconds": 0.8}


async def test_voice_and_model_are_fixed_once_the_assistant_has_spoken(connect):
    client = await connect()
    assert (await client.update_session(audio={"output": {"voice": "ash"}}, model="other-model"))["session"]["audio"][
        "output"
    ]["voice"] == "ash"
    await client.say_text("hello")
    await client.until("response.done")
    for session, param in [
        ({"audio": {"output": {"voice": "echo"}}}, "session.audio.output.voice"),
        ({"model": "yet-another"}, "session.model"),
    ]:
        event_id = await client.send("session.update", session={"type": "realtime", **session})
        error = await client.error()
        assert (error["param"], error["event_id"]) == (param, event_id)
    # The same voice again, and other settings, are still fine.
    session = (await client.update_session(audio={"output": {"voice": "ash"}}, instructions="Shorter."))["session"]
    assert (session["audio"]["output"]["voice"], session["model"]) == ("ash", "other-model")


async def test_a_text_only_conversation_may_still_change_its_voice(connect):
    client = await connect()
    await client.say_text("hello", **TEXT)
    await client.until("response.done")
    session = (await client.update_session(audio={"output": {"voice": "echo"}}))["session"]
    assert session["audio"]["output"]["voice"] == "echo"


async def test_the_beta_subprotocol_makes_a_beta_session_as_the_header_does(connect):
    client = await connect(subprotocols=["realtime", "openai-beta.realtime-v1"])
    assert client.beta and client.created["session"]["input_audio_format"] == "pcm16"
    await client.say_text("hello", modalities=["text"])
    assert "response.text.delta" in types(await client.collect("response.done"))


async def test_a_turn_with_server_vad_reports_the_turns_seconds(connect):
    client = await connect()
    await client.update_session(
        audio={"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}, **TEXT
    )
    await client.append(silence(0.3))
    await client.append(tone(1.0))
    await client.append(silence(0.5))
    completed = await client.until("conversation.item.input_audio_transcription.completed")
    assert 1.0 <= completed["usage"]["seconds"] <= 1.6
