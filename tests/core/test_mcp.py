"""MCP tools over the Realtime protocol, against a real MCP server (the SDK's ``MCPServer`` on loopback).

The pipeline is the FAKE loopback profile: its LM calls NAME when the user says ``call NAME {json}``
and, after a tool result, answers "The tool said: <result>."; the MCP server and the session's MCP
client are real. Every server event is validated against the openai SDK's types by the client.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from realtime.protocol.mcp.config import McpPolicy
from tests.support.mcp_server import free_port, serve

pytestmark = pytest.mark.django_db(transaction=True)

ALL_TOOLS = ["get_weather", "set_alarm", "explode", "nap", "flood"]
PARIS = "The weather in Paris is sunny, 21 degrees."


@pytest.fixture(scope="module")
def mcp_base():
    with serve() as base:
        yield base


@pytest.fixture
def mcp_on(settings, mcp_base):
    # Time to spare on a busy machine: the server formats a raising tool's traceback before it answers (the timeout
    # test sets its own limit).
    settings.S2S_MCP = McpPolicy((mcp_base + "/mcp",), timeout_s=10.0, max_response_bytes=8192)
    return mcp_base


def server(base: str, **fields) -> dict:
    return {"type": "mcp", "server_label": "weather", "server_url": base + "/mcp", **fields}


def types(events: list[dict]) -> list[str]:
    """Event types with runs of the same type shown once."""
    names = [e["type"] for e in events]
    return [t for i, t in enumerate(names) if i == 0 or names[i - 1] != t]


async def offer(client, *tools: dict) -> list[dict]:
    """Offers the tools; returns the events up to the listing's end (its item's ``conversation.item.done``)."""
    await client.send("session.update", session={"type": "realtime", "tools": list(tools)})
    return await client.collect(
        lambda e: e["type"] == "conversation.item.done" and e["item"]["type"] == "mcp_list_tools", timeout=10
    )


async def turn(client, text: str) -> list[dict]:
    await client.say_text(text)
    return await client.collect("response.done", timeout=15)


def listed(events: list[dict]) -> list[str]:
    return [tool["name"] for tool in events[-1]["item"]["tools"]]


# --- the policy -----------------------------------------------------------------------------


async def test_mcp_is_off_by_default_and_the_error_says_how_to_turn_it_on(connect):
    client = await connect()
    await client.send("session.update", session={"type": "realtime", "tools": [server("http://127.0.0.1:9")]})
    error = await client.error()
    assert error["param"] == "session.tools[0].server_url"
    assert "MCP tools are off" in error["message"] and "S2S_MCP_ALLOWED_URLS" in error["message"]
    await client.update_session(instructions="still here")  # the session goes on


async def test_a_server_url_outside_the_allowed_prefixes_is_refused_with_its_param(connect, mcp_on):
    client = await connect()
    tools = [{"type": "function", "name": "f"}, server("http://127.0.0.2:9")]
    await client.send("session.update", session={"type": "realtime", "tools": tools})
    error = await client.error()
    assert error["param"] == "session.tools[1].server_url"
    for url in (
        mcp_on + "/mcpx",
        mcp_on.replace("127.0.0.1", "localhost") + "/mcp",
        "http://u:p@" + mcp_on[7:] + "/mcp",
    ):
        tools = [{**server(mcp_on), "server_url": url}]
        await client.send("session.update", session={"type": "realtime", "tools": tools})
        assert (await client.error())["param"] == "session.tools[0].server_url", url


async def test_a_connector_id_is_refused_since_no_connectors_exist(connect, mcp_on):
    client = await connect()
    await client.send(
        "session.update",
        session={
            "type": "realtime",
            "tools": [{"type": "mcp", "server_label": "mail", "connector_id": "connector_gmail"}],
        },
    )
    error = await client.error()
    assert error["param"] == "session.tools[0].connector_id" and "connectors" in error["message"]


# --- listing --------------------------------------------------------------------------------


async def test_offering_a_server_lists_its_tools_as_an_mcp_list_tools_item(connect, mcp_on):
    client = await connect()
    events = await offer(client, server(mcp_on))
    assert types(events) == [
        "session.updated",
        "conversation.item.added",
        "mcp_list_tools.in_progress",
        "mcp_list_tools.completed",
        "conversation.item.done",
    ]
    item_id = events[1]["item"]["id"]
    assert events[1]["item"] == {"id": item_id, "type": "mcp_list_tools", "server_label": "weather", "tools": []}
    assert events[2]["item_id"] == events[3]["item_id"] == item_id
    assert listed(events) == ALL_TOOLS
    weather = events[-1]["item"]["tools"][0]
    assert weather["input_schema"]["properties"]["city"]["type"] == "string"
    assert weather["annotations"]["readOnlyHint"] is True
    tools = events[0]["session"]["tools"]
    assert tools == [{k: v for k, v in server(mcp_on).items()}]  # echoed as offered


@pytest.mark.parametrize(
    "allowed, names",
    [
        (["get_weather", "nap", "missing"], ["get_weather", "nap"]),
        ({"tool_names": ["set_alarm"]}, ["set_alarm"]),
        ({"read_only": True}, ["get_weather"]),
    ],
)
async def test_allowed_tools_filters_what_is_listed(connect, mcp_on, allowed, names):
    client = await connect()
    assert listed(await offer(client, server(mcp_on, allowed_tools=allowed))) == names


async def test_an_unreachable_server_fails_its_listing_and_the_session_goes_on(connect, settings):
    dead = f"http://127.0.0.1:{free_port()}"
    settings.S2S_MCP = McpPolicy((dead,), timeout_s=2.0)
    client = await connect()
    events = await offer(client, server(dead))
    assert types(events) == [
        "session.updated",
        "conversation.item.added",
        "mcp_list_tools.in_progress",
        "mcp_list_tools.failed",
        "error",
        "conversation.item.done",
    ]
    error = events[-2]["error"]
    assert error["code"] == "mcp_list_tools_failed" and "weather" in error["message"]
    await client.say_text("hello")
    done = await client.until("response.done", timeout=15)
    assert done["response"]["status"] == "completed"


async def test_a_redirect_to_a_server_outside_the_list_is_not_followed(connect, settings, mcp_base):
    settings.S2S_MCP = McpPolicy((mcp_base,), timeout_s=2.0)
    client = await connect()
    events = await offer(client, {**server(mcp_base), "server_url": mcp_base + "/moved"})
    error = next(e for e in events if e["type"] == "error")["error"]
    assert "redirect" in error["message"] and "127.0.0.2" in error["message"]


# --- calls ----------------------------------------------------------------------------------


async def test_a_call_runs_on_the_server_and_the_answer_follows_in_the_same_response(connect, mcp_on):
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    events = await turn(client, 'call get_weather {"city": "Paris"}')
    start = next(i for i, e in enumerate(events) if e["type"] == "response.created")
    call_events = [
        e
        for e in events[start:]
        if "mcp" in e["type"] or e["type"].startswith("response.output_item") or e["type"] == "response.done"
    ]
    assert types(call_events) == [
        "response.output_item.added",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.done",
    ]
    added = call_events[0]["item"]
    assert {k: added[k] for k in ("type", "server_label", "name", "arguments", "output")} == {
        "type": "mcp_call",
        "server_label": "weather",
        "name": "get_weather",
        "arguments": "",
        "output": None,
    }
    done = of_type(events, "response.mcp_call_arguments.done")[0]
    assert json.loads(done["arguments"]) == {"city": "Paris"} and done["item_id"] == added["id"]
    item = of_type(call_events, "response.output_item.done")[0]["item"]
    assert (item["output"], item["error"]) == (PARIS, None)
    response = events[-1]["response"]
    assert response["status"] == "completed"
    assert [o["type"] for o in response["output"]] == ["mcp_call", "message"]
    assert response["output"][1]["content"][0]["transcript"] == f"The tool said: {PARIS}."
    await client.send("conversation.item.retrieve", item_id=added["id"])
    assert (await client.until("conversation.item.retrieved"))["item"] == item


async def test_a_tool_that_raises_fails_its_call_and_the_model_still_answers(connect, mcp_on):
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    events = await turn(client, "call explode")
    assert "response.mcp_call.failed" in types(events) and "response.mcp_call.completed" not in types(events)
    error = of_type(events, "error")[0]["error"]
    assert error["code"] == "mcp_call_failed" and "explode" in error["message"]
    item = of_type(events, "response.output_item.done")[0]["item"]
    assert item["output"] is None and item["error"]["type"] == "tool_execution_error"
    response = events[-1]["response"]
    assert response["status"] == "completed"
    assert response["output"][1]["content"][0]["transcript"].startswith("The tool said: Error:")
    assert (await turn(client, "hello"))[-1]["response"]["status"] == "completed"  # the session goes on


async def test_a_slow_tool_fails_at_the_time_limit_and_a_large_answer_at_the_size_limit(connect, mcp_on, settings):
    settings.S2S_MCP = McpPolicy((mcp_on + "/mcp",), timeout_s=3.0, max_response_bytes=8192)
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    events = await turn(client, 'call nap {"seconds": 5}')
    item = of_type(events, "response.output_item.done")[0]["item"]
    assert item["error"]["type"] == "http_error" and "S2S_MCP_TIMEOUT_S" in item["error"]["message"]
    events = await turn(client, 'call flood {"size": 100000}')
    item = of_type(events, "response.output_item.done")[0]["item"]
    assert item["error"]["code"] == 413 and "S2S_MCP_MAX_RESPONSE_BYTES" in item["error"]["message"]
    assert events[-1]["response"]["status"] == "completed"


# --- approvals ------------------------------------------------------------------------------


async def request_approval(client, base: str, **fields) -> dict:
    await offer(client, server(base, **fields))
    events = await turn(client, 'call get_weather {"city": "Paris"}')
    assert not [e for e in events if e["type"].startswith("response.mcp_call")]
    output = events[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["mcp_approval_request"]
    return output[0]


async def test_approval_is_asked_by_default_and_an_approved_call_runs_in_the_next_response(connect, mcp_on):
    client = await connect()
    request = await request_approval(client, mcp_on)
    assert (request["server_label"], request["name"], json.loads(request["arguments"])) == (
        "weather",
        "get_weather",
        {"city": "Paris"},
    )
    await client.send(
        "conversation.item.create",
        item={"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True},
    )
    added = await client.until("conversation.item.added")
    assert added["item"]["type"] == "mcp_approval_response" and added["item"]["approve"] is True
    await client.send("response.create")
    events = await client.collect("response.done", timeout=15)
    assert "response.mcp_call.completed" in types(events)
    output = events[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["mcp_call", "message"]
    assert (output[0]["approval_request_id"], output[0]["output"]) == (request["id"], PARIS)
    assert output[1]["content"][0]["transcript"] == f"The tool said: {PARIS}."


async def test_a_denied_call_does_not_run_and_the_model_is_told(connect, mcp_on):
    client = await connect()
    request = await request_approval(client, mcp_on, require_approval={"always": {"tool_names": ["get_weather"]}})
    await client.send(
        "conversation.item.create",
        item={
            "type": "mcp_approval_response",
            "approval_request_id": request["id"],
            "approve": False,
            "reason": "not now",
        },
    )
    await client.until("conversation.item.added")
    await client.send("response.create")
    events = await client.collect("response.done", timeout=15)
    assert not [e for e in events if "mcp" in e["type"]]
    transcript = events[-1]["response"]["output"][0]["content"][0]["transcript"]
    assert "declined" in transcript and "not now" in transcript


async def test_an_approval_filter_lets_named_tools_run_without_asking(connect, mcp_on):
    client = await connect()
    await offer(client, server(mcp_on, require_approval={"never": {"tool_names": ["get_weather"]}}))
    events = await turn(client, 'call get_weather {"city": "Oslo"}')
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["mcp_call", "message"]
    events = await turn(client, 'call set_alarm {"time": "7:00"}')
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["mcp_approval_request"]


async def test_an_answer_to_an_unknown_approval_request_is_refused(connect, mcp_on):
    client = await connect()
    await client.send(
        "conversation.item.create",
        item={"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True},
    )
    error = await client.error()
    assert error["param"] == "item.approval_request_id"


def of_type(events: list[dict], *names: str) -> list[dict]:
    return [e for e in events if e["type"] in names]


async def test_a_response_may_offer_its_own_server_whose_tools_are_listed_before_it_starts(connect, mcp_on):
    client = await connect()
    await client.send(
        "conversation.item.create",
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": 'call get_weather {"city": "Paris"}'}],
        },
    )
    await client.send(
        "response.create", response={"tools": [server(mcp_on, require_approval="never", allowed_tools=["get_weather"])]}
    )
    events = await client.collect("response.done", timeout=15)
    assert types(events).index("mcp_list_tools.completed") < types(events).index("response.created")
    output = events[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["mcp_call", "message"] and output[0]["output"] == PARIS
    await client.update_session(instructions="later")
    events = await turn(client, 'call get_weather {"city": "Paris"}')  # the session itself offers no MCP tools
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message"]


async def test_a_session_that_ends_during_a_call_gives_its_unit_back_and_the_next_session_is_clean(
    connect, mcp_on, settings, loopback_pool
):
    settings.S2S_MCP = McpPolicy((mcp_on + "/mcp",), timeout_s=10.0)
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    await client.say_text('call nap {"seconds": 5}')
    await client.until("response.mcp_call.in_progress", timeout=10)
    await client.communicator.disconnect()
    for _ in range(100):  # bounded: 10 s
        if loopback_pool.free_units() == 2:
            break
        await asyncio.sleep(0.1)
    assert loopback_pool.free_units() == 2
    client = await connect()
    events = await turn(client, "hello")
    assert not [e for e in events if "mcp" in e["type"]]
    assert events[-1]["response"]["output"][0]["content"][0]["transcript"] == "You said: hello."


async def test_a_server_taken_out_of_the_tools_takes_its_tools_with_it(connect, mcp_on):
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    updated = await client.update_session(tools=[])
    assert updated["session"]["tools"] == []
    events = await turn(client, 'call get_weather {"city": "Paris"}')
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message"]
    assert not [e for e in events if "mcp" in e["type"]]


async def test_one_sessions_mcp_tools_never_reach_another_session(connect, mcp_on):
    first, second = await connect(), await connect()
    await offer(first, server(mcp_on, require_approval="never"))
    events = await turn(second, 'call get_weather {"city": "Paris"}')
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message"]
    assert not [e for e in events if "mcp" in e["type"]]
    events = await turn(first, 'call get_weather {"city": "Paris"}')
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["mcp_call", "message"]


async def test_cancelling_a_response_stops_its_running_call_at_once(connect, mcp_on, settings):
    settings.S2S_MCP = McpPolicy((mcp_on + "/mcp",), timeout_s=10.0)
    client = await connect()
    await offer(client, server(mcp_on, require_approval="never"))
    await client.say_text('call nap {"seconds": 8}')
    progress = await client.until("response.mcp_call.in_progress", timeout=10)
    started = asyncio.get_running_loop().time()
    await client.send("response.cancel")
    done = await client.until("response.done", timeout=5)
    assert asyncio.get_running_loop().time() - started < 3
    assert (done["response"]["status"], done["response"]["status_details"]["reason"]) == (
        "cancelled",
        "client_cancelled",
    )
    assert done["response"]["output"][0]["id"] == progress["item_id"]
    assert (await turn(client, "hello"))[-1]["response"]["status"] == "completed"
