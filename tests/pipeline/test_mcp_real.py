"""MCP tools end to end with the real default models and the official openai SDK's realtime client.

A real MCP server (the SDK's ``MCPServer`` on loopback) is offered to a live server whose
``S2S_MCP_ALLOWED_URLS`` lets it reach that server; the default LM calls its tool, this server
runs the call on the MCP server, and the answer follows in the same response.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conformance import decode
from tests.support.mcp_server import serve
from tests.support.server import LiveServer

pytestmark = pytest.mark.real_models

AGENTS_SDK = Path(__file__).resolve().parents[1] / "browser" / "agents_sdk"


@pytest.fixture(scope="module")
def mcp_live(tmp_path_factory) -> Iterator[tuple[LiveServer, str]]:
    with serve() as base:
        server = LiveServer(
            tmp_path_factory.mktemp("mcp_real"),
            env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1", "S2S_MCP_ALLOWED_URLS": base + "/mcp"},
        )
        server.start(ready_timeout=900)
        try:
            yield server, base
        finally:
            server.stop()


async def next_event(connection, seen: list):
    """The SDK connection's next event, first validated against the SDK's types (the SDK itself only constructs)."""
    raw = await connection.recv_bytes()
    decode(raw)
    seen.append(event := connection.parse_event(raw))
    return event


async def test_the_default_model_calls_an_mcp_tool_that_runs_on_the_mcp_server_and_answers_from_it(mcp_live):
    from openai import AsyncOpenAI

    server, base = mcp_live
    client = AsyncOpenAI(api_key="test-key", base_url=f"http://127.0.0.1:{server.port}/v1")
    events = []
    async with asyncio.timeout(300), client.realtime.connect(model="gpt-realtime") as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "tools": [
                    {
                        "type": "mcp",
                        "server_label": "weather",
                        "server_url": base + "/mcp",
                        "allowed_tools": ["get_weather"],
                        "require_approval": "never",
                    }
                ],
            }
        )
        while True:  # the listing, then the question
            event = await next_event(connection, events)
            if event.type in ("mcp_list_tools.completed", "mcp_list_tools.failed"):
                break
        assert event.type == "mcp_list_tools.completed", events
        await connection.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "What is the weather like in Paris right now?"}],
            }
        )
        # The default LM is small: the first response must call a tool (after the call it answers freely).
        await connection.response.create(response={"tool_choice": "required"})
        while True:
            event = await next_event(connection, events)
            if event.type == "error":
                raise AssertionError(event.error)
            if event.type == "response.done":
                break
    response = event.response
    assert response.status == "completed", response
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_call", "message"], response.output
    call, message = response.output
    assert (call.server_label, call.name, call.error) == ("weather", "get_weather", None)
    assert json.loads(call.arguments)["city"].lower() == "paris"
    assert call.output == "The weather in Paris is sunny, 21 degrees."  # the MCP server's answer
    seen = [e.type for e in events]
    assert seen.index("response.mcp_call.completed") < seen.index("response.output_audio.delta")
    transcript = message.content[0].transcript.lower()
    assert "sunny" in transcript or "21" in transcript or "twenty" in transcript, transcript


async def test_an_agents_sdk_voice_agent_with_a_hosted_mcp_tool_speaks_the_mcp_servers_answer(mcp_live):
    """The Agents SDK for JavaScript (its Python realtime agents take function tools only): ``hostedMcpTool``."""
    server, base = mcp_live
    assert shutil.which("node") and shutil.which("npm"), "node and npm are needed (apt-get install npm)"
    if not (AGENTS_SDK / "node_modules" / "@openai" / "agents-realtime").is_dir():
        npm_ci = ["npm", "ci", "--no-audit", "--no-fund"]
        await asyncio.to_thread(subprocess.run, npm_ci, cwd=AGENTS_SDK, check=True, timeout=600)
    command = ["node", str(AGENTS_SDK / "agent_with_mcp.mjs"), server.ws, base + "/mcp", "240000"]
    result = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=300)
    lines = result.stdout.strip().splitlines()
    assert lines, f"the agent printed nothing (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1])
    shown = json.dumps({k: v for k, v in report.items() if k != "eventTypes"})
    assert result.returncode == 0 and not report["errors"], shown
    (call,) = report["mcpCalls"]
    assert (call["name"], call["output"]) == ("get_weather", "The weather in Paris is sunny, 21 degrees."), shown
    types = report["eventTypes"]
    assert types.index("response.mcp_call.completed") < types.index("response.output_audio.delta")
