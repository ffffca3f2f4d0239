"""Function calling over the Realtime protocol: tools in, ``function_call`` items out, results back in.

The pipeline is the FAKE loopback profile: its LM calls NAME when the user says
``call NAME {json}`` (or any offered tool when the tool choice requires one) and,
after a tool result, answers "The tool said: <result>."; its TTS plays a tone per word.
Every event is validated against the openai SDK's types by the client.
"""

from __future__ import annotations

import json

import pytest

from tests.support.client import text_item

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
}
CALL_EVENTS = (
    "response.created",
    "response.output_item.added",
    "conversation.item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "conversation.item.done",
    "response.done",
)


def of_type(events: list[dict], *types: str) -> list[dict]:
    return [e for e in events if e["type"] in types]


def squeeze(types: list[str]) -> list[str]:
    """Event types with runs of the same type (the argument deltas) shown once."""
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


async def call_turn(client, text: str, **response) -> list[dict]:
    """Says ``text`` and returns everything up to its ``response.done``."""
    await client.say_text(text, **response)
    return await client.collect("response.done", timeout=15)


async def test_a_call_streams_as_a_function_call_item_with_one_call_id_and_output_index(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    events = await call_turn(client, 'call get_weather {"city": "Paris"}')
    user_id = next(e["item"]["id"] for e in events if e["type"] == "conversation.item.added")
    calls = [
        e
        for e in events
        if e["type"] in CALL_EVENTS and not (e["type"].startswith("conversation.item") and e["item"]["id"] == user_id)
    ]
    assert squeeze([e["type"] for e in calls]) == list(CALL_EVENTS)

    added = calls[1]["item"]
    assert {k: added[k] for k in ("type", "status", "name", "arguments")} == {
        "type": "function_call",
        "status": "in_progress",
        "name": "get_weather",
        "arguments": "",
    }
    assert added["call_id"].startswith("call_")
    assert calls[2]["previous_item_id"] == user_id
    deltas = of_type(calls, "response.function_call_arguments.delta")
    done = of_type(calls, "response.function_call_arguments.done")[0]
    assert json.loads("".join(d["delta"] for d in deltas)) == json.loads(done["arguments"]) == {"city": "Paris"}
    for event in deltas + [done]:
        assert (event["item_id"], event["call_id"], event["output_index"]) == (added["id"], added["call_id"], 0)
    assert done["name"] == "get_weather"
    final = of_type(calls, "response.output_item.done")[0]
    assert final["output_index"] == 0
    assert final["item"] == {**added, "status": "completed", "arguments": done["arguments"]}
    assert of_type(calls, "conversation.item.done")[0]["item"] == final["item"]
    response = calls[-1]["response"]
    assert (response["status"], response["output"]) == ("completed", [final["item"]])

    await client.send("conversation.item.retrieve", item_id=added["id"])
    assert (await client.until("conversation.item.retrieved"))["item"] == final["item"]


async def test_a_response_that_only_calls_a_tool_speaks_nothing_and_has_no_message(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER], tool_choice="required")
    events = await call_turn(client, "What is the weather like in Oslo?")
    assert not of_type(
        events,
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.content_part.added",
        "response.output_text.delta",
    )
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["function_call"]
    assert not [e for e in of_type(events, "conversation.item.added") if e["item"].get("role") == "assistant"]
    # nothing was spoken, so the voice may still change (the API fixes it once assistant audio exists)
    updated = await client.update_session(audio={"output": {"voice": "ash"}})
    assert updated["session"]["audio"]["output"]["voice"] == "ash"


async def test_a_function_call_output_and_response_create_give_a_spoken_answer_that_reads_the_result(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    events = await call_turn(client, 'call get_weather {"city": "Paris"}')
    call = events[-1]["response"]["output"][0]

    await client.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": call["call_id"], "output": "sunny and 21 degrees"},
    )
    added = await client.until("conversation.item.added")
    assert added["previous_item_id"] == call["id"]
    assert {k: added["item"][k] for k in ("type", "call_id", "output", "status")} == {
        "type": "function_call_output",
        "call_id": call["call_id"],
        "output": "sunny and 21 degrees",
        "status": "completed",
    }
    await client.send("response.create")
    answer = await client.collect("response.done", timeout=15)
    response = answer[-1]["response"]
    assert response["status"] == "completed"
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["transcript"] == "The tool said: sunny and 21 degrees."
    assert of_type(answer, "response.output_audio.delta")
    assert [e["item"]["type"] for e in of_type(answer, "response.output_item.added")] == ["message"]


async def test_a_client_created_function_call_joins_the_history_the_model_reads(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    await client.send("conversation.item.create", item=text_item("How warm is Rome?"))
    await client.until("conversation.item.done")
    call = {
        "type": "function_call",
        "id": "item_client_call",
        "call_id": "call_client_1",
        "name": "get_weather",
        "arguments": '{"city": "Rome"}',
    }
    await client.send("conversation.item.create", item=call)
    added = (await client.until("conversation.item.added"))["item"]
    assert added == {**call, "object": "realtime.item", "status": "completed"}
    await client.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_client_1", "output": "sunny, 25 C"},
    )
    await client.until("conversation.item.done")
    await client.send("response.create", response={"output_modalities": ["text"]})
    done = (await client.until("response.done", timeout=15))["response"]
    assert done["output"][0]["content"][0]["text"] == "The tool said: sunny, 25 C."

    await client.send("conversation.item.create", item={"type": "function_call", "arguments": "{}"})
    assert (await client.error())["param"] == "item.name"
    await client.send("conversation.item.create", item={"type": "function_call_output", "output": "x"})
    assert (await client.error())["param"] == "item.call_id"


async def test_calls_and_results_given_in_a_responses_input_are_its_context(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    await client.send(
        "response.create",
        response={
            "conversation": "none",
            "output_modalities": ["text"],
            "input": [
                text_item("How warm is Rome?"),
                {
                    "type": "function_call",
                    "call_id": "call_inline",
                    "name": "get_weather",
                    "arguments": '{"city": "Rome"}',
                },
                {"type": "function_call_output", "call_id": "call_inline", "output": "cloudy"},
            ],
        },
    )
    done = (await client.until("response.done", timeout=15))["response"]
    assert done["output"][0]["content"][0]["text"] == "The tool said: cloudy."


@pytest.mark.parametrize(
    ("session", "param"),
    [
        (
            {"tools": [WEATHER, {**TIME, "parameters": {"type": "object", "properties": {"zone": {"type": 7}}}}]},
            "session.tools[1].parameters",
        ),
        ({"tools": [WEATHER, {**TIME, "parameters": {"type": "array"}}]}, "session.tools[1].parameters"),
        ({"tools": [WEATHER, WEATHER]}, "session.tools[1].name"),
        ({"tools": [{**WEATHER, "name": "get weather!"}]}, "session.tools[0].name"),
        (
            {"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://example.com"}]},
            "session.tools[0].server_url",
        ),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_time"}}, "session.tool_choice.name"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "session.tool_choice"),
        ({"tools": [], "tool_choice": "required"}, "session.tool_choice"),
    ],
)
async def test_a_bad_tool_or_tool_choice_is_an_error_naming_it_and_the_session_is_unchanged(connect, session, param):
    client = await connect()
    before = (await client.update_session(tools=[TIME], tool_choice="auto"))["session"]
    event_id = await client.send("session.update", session={"type": "realtime", "instructions": "Changed.", **session})
    error = await client.error()
    assert (error["param"], error["event_id"], error["type"]) == (param, event_id, "invalid_request_error")
    after = (await client.update_session())["session"]
    assert (after["tools"], after["tool_choice"], after["instructions"]) == (
        before["tools"],
        "auto",
        before["instructions"],
    )


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ({"tool_choice": {"type": "function", "name": "get_time"}}, "response.tool_choice.name"),
        ({"tools": [{**TIME, "parameters": {"type": "object", "required": "zone"}}]}, "response.tools[0].parameters"),
        ({"tools": "get_time"}, "response.tools"),
    ],
)
async def test_a_bad_tool_or_tool_choice_of_a_response_is_an_error_and_no_response_starts(connect, response, param):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    event_id = await client.send("response.create", response=response)
    error = await client.error()
    assert (error["param"], error["event_id"]) == (param, event_id)
    assert not of_type(await client.drain(), "response.created")


async def test_tools_of_a_response_override_the_sessions_for_that_response_only(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER], tool_choice="required")
    events = await call_turn(
        client,
        "What time is it in Tokyo?",
        tools=[TIME],
        tool_choice={"type": "function", "name": "get_time"},
        output_modalities=["text"],
    )
    assert [(i["type"], i["name"]) for i in events[-1]["response"]["output"]] == [("function_call", "get_time")]

    events = await call_turn(client, "Just talk to me.", tool_choice="none", output_modalities=["text"])
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["message"]
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "You said: Just talk to me.."

    events = await call_turn(client, "And the weather?", output_modalities=["text"])
    assert [(i["type"], i["name"]) for i in events[-1]["response"]["output"]] == [("function_call", "get_weather")]
    session = (await client.update_session())["session"]
    assert (session["tools"], session["tool_choice"]) == ([WEATHER], "required")


async def test_a_call_cut_by_the_token_limit_is_incomplete_and_never_done(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    events = await call_turn(client, 'call get_weather {"city": "Paris"}', max_output_tokens=4)
    assert not of_type(events, "response.function_call_arguments.done")
    response = events[-1]["response"]
    assert (response["status"], response["status_details"]["reason"]) == ("incomplete", "max_output_tokens")
    assert [(i["type"], i["status"]) for i in response["output"]] == [("function_call", "incomplete")]
    # the cut call is not in what the model reads: the next answer reads the user's text
    await client.say_text("Hello again.", output_modalities=["text"], tool_choice="none")
    done = (await client.until("response.done", timeout=15))["response"]
    assert done["output"][0]["content"][0]["text"] == "You said: Hello again.."


async def test_a_beta_client_gets_tools_echoed_in_beta_shapes_and_the_call_events(connect):
    client = await connect(headers=[(b"openai-beta", b"realtime=v1")])
    await client.send(
        "session.update", session={"tools": [WEATHER], "tool_choice": "get_weather", "modalities": ["text"]}
    )
    session = (await client.until("session.updated"))["session"]
    assert (session["tools"], session["tool_choice"]) == ([WEATHER], "get_weather")
    events = await call_turn(client, "Weather in Lima?")
    done = of_type(events, "response.function_call_arguments.done")[0]
    assert (done["name"], json.loads(done["arguments"])) == ("get_weather", {})
    assert of_type(events, "conversation.item.created")[-1]["item"]["type"] == "function_call"


async def test_parallel_tool_calls_make_several_calls_in_one_response_and_false_makes_one(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER, TIME])
    two = 'call get_weather {"city": "Paris"}; call get_time {"zone": "Europe/Paris"}'
    done = (await call_turn(client, two))[-1]["response"]
    assert [(item["type"], item["name"]) for item in done["output"]] == [
        ("function_call", "get_weather"),
        ("function_call", "get_time"),
    ]
    assert len({item["call_id"] for item in done["output"]}) == 2

    updated = await client.update_session(parallel_tool_calls=False)
    assert updated["session"]["parallel_tool_calls"] is False
    done = (await call_turn(client, two))[-1]["response"]
    assert [item["name"] for item in done["output"]] == ["get_weather"]
    done = (await call_turn(client, two, parallel_tool_calls=True))[-1]["response"]  # the response's own choice
    assert [item["name"] for item in done["output"]] == ["get_weather", "get_time"]

    event_id = await client.send("session.update", session={"type": "realtime", "parallel_tool_calls": "yes"})
    error = await client.error()
    assert (error["param"], error["event_id"]) == ("session.parallel_tool_calls", event_id)


async def test_a_function_call_output_for_a_call_the_conversation_lacks_is_an_error_and_nothing_is_added(connect):
    client = await connect()
    await client.update_session(tools=[WEATHER])
    event_id = await client.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_nobody_made", "output": "sunny"},
    )
    error = await client.error()
    assert (error["param"], error["event_id"], error["code"]) == ("item.call_id", event_id, "invalid_value")
    assert "call_nobody_made" in error["message"]
    assert not of_type(await client.drain(), "conversation.item.added")

    call = (await call_turn(client, 'call get_weather {"city": "Paris"}'))[-1]["response"]["output"][0]
    await client.send(
        "conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    )
    added = await client.until("conversation.item.added")
    assert added["item"]["call_id"] == call["call_id"]
