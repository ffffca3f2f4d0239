"""The OpenAI Agents SDK for Python (``agents.realtime``) against the server with its default models.

The agent turn a new user tries first: one function tool, the session's ``tool_choice`` left at
``"auto"``, a typed question. The model chooses the call, the SDK runs the tool and asks for the
next response, and the agent speaks an answer made of the tool's result, with nothing of the call in it.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner

from bench.tool_scoring import call_markup
from tests.support.server import LiveServer

pytestmark = pytest.mark.real_models

INSTRUCTIONS = "call the get_weather tool, then answer in one short sentence using its result"
QUESTION = "What is the weather like in Paris right now?"


async def run_agent(server: LiveServer, timeout_s: float) -> dict:
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The name of the city.
        """
        calls.append(city)
        return f"It is sunny and 21 degrees Celsius in {city}."

    agent = RealtimeAgent(name="Weather assistant", instructions=INSTRUCTIONS, tools=[get_weather])
    runner = RealtimeRunner(
        agent,
        config={"model_settings": {"output_modalities": ["audio"], "tool_choice": "auto", "turn_detection": None}},
    )
    report: dict = {"calls": calls, "audio_bytes": 0, "transcripts": [], "errors": [], "tool_ends": 0}
    session = await runner.run(model_config={"url": server.ws, "api_key": "sk-local-unused"})
    deadline = time.monotonic() + timeout_s
    async with session:
        await session.send_message(QUESTION)
        async for event in session:
            if time.monotonic() > deadline:
                report["errors"].append(f"timed out after {timeout_s} s")
                break
            if event.type == "tool_end":
                report["tool_ends"] += 1
            elif event.type == "audio" and calls:
                report["audio_bytes"] += len(event.audio.data)
            elif event.type == "error":
                report["errors"].append(str(event.error))
            elif event.type == "raw_model_event" and event.data.type == "raw_server_event":
                data = event.data.data
                if data.get("type") == "response.output_audio_transcript.done" and calls:
                    report["transcripts"].append(data["transcript"])
                if data.get("type") == "response.done" and calls and report["transcripts"]:
                    break
    return report


async def test_a_python_agents_sdk_voice_agent_with_auto_calls_its_tool_and_speaks_the_result(real_server):
    report = await asyncio.wait_for(run_agent(real_server, 300), 330)
    shown = json.dumps(report)
    assert report["calls"] and "paris" in report["calls"][0].lower(), shown
    assert report["tool_ends"] >= 1 and not report["errors"], shown
    answer = " ".join(report["transcripts"])
    assert report["audio_bytes"] > 0 and answer.strip(), shown
    assert not call_markup(answer, ["get_weather"]), shown
    assert "sunny" in answer.lower() or "21" in answer or "twenty" in answer.lower(), shown
