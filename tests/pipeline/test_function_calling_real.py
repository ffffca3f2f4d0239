"""Function calling end to end with the real default models: the openai-shaped protocol and the Agents SDK.

The default LM is small; a ``tool_choice`` naming the function makes the call
certain, and the constrained decoder makes its arguments follow the schema.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from bench.tool_scoring import call_markup
from tests.pipeline.conftest import Turn, ask_in_text, collect, connect
from tests.support.server import LiveServer

pytestmark = pytest.mark.real_models

AGENTS_SDK = Path(__file__).resolve().parents[1] / "browser" / "agents_sdk"
BOOK_TABLE = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table at the restaurant.",
    "parameters": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "party_size", "time"],
        "properties": {
            "name": {"type": "string", "description": "The guest's name"},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
            "time": {"type": "string", "description": "The time, for example 19:00"},
        },
    },
}


def of_type(turn: Turn, kind: str) -> list[dict]:
    return [e for e in turn.events if e["type"] == kind]


async def test_a_named_tool_choice_gets_schema_valid_arguments_and_the_result_is_spoken(real_server):
    ws = await connect(real_server)
    try:
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": [BOOK_TABLE]}}))
        await collect(ws, Turn(), "session.updated", timeout=20)
        turn = await ask_in_text(
            ws,
            "Please book a table for four people at seven tonight, the name is Lee.",
            timeout=240,
            response={"tool_choice": {"type": "function", "name": "book_table"}},
        )
        done = turn.first("response.done")["response"]
        assert done["status"] == "completed", done
        assert [item["type"] for item in done["output"]] == ["function_call"], done["output"]
        call = done["output"][0]
        assert call["name"] == "book_table"
        arguments = json.loads(call["arguments"])
        jsonschema.validate(arguments, BOOK_TABLE["parameters"])
        assert turn.first("response.function_call_arguments.done")["arguments"] == call["arguments"]
        assert not of_type(turn, "response.output_audio.delta")  # the call is not spoken

        await ws.send(
            json.dumps(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "function_call_output",
                        "call_id": call["call_id"],
                        "output": json.dumps({"booked": True, "table": 12, **arguments}),
                    },
                }
            )
        )
        await ws.send(json.dumps({"type": "response.create"}))
        answer = await collect(ws, Turn(), "response.done", timeout=240)
    finally:
        await ws.close()
    response = answer.first("response.done")["response"]
    assert response["status"] in ("completed", "incomplete"), response
    message = next(item for item in response["output"] if item["type"] == "message")
    assert message["content"][0]["transcript"].strip()
    assert of_type(answer, "response.output_audio.delta")


@pytest.fixture(scope="module")
def agents_sdk() -> Path:
    """The pinned Agents SDK (tests/browser/agents_sdk/package-lock.json), installed by ``make test`` or here."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm are needed (apt-get install npm)"
    if not (AGENTS_SDK / "node_modules" / "@openai" / "agents-realtime").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=AGENTS_SDK, check=True, timeout=600)
    return AGENTS_SDK / "agent_with_tool.mjs"


def run_agent(script: Path, server: LiveServer, timeout_s: int) -> dict:
    result = subprocess.run(
        ["node", str(script), server.ws, str(timeout_s * 1000)], capture_output=True, text=True, timeout=timeout_s + 30
    )
    lines = result.stdout.strip().splitlines()
    assert lines, f"the agent printed nothing (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1])
    report["returncode"] = result.returncode
    return report


async def test_a_js_agents_sdk_voice_agent_with_auto_runs_its_tool_and_speaks_the_answer(real_server, agents_sdk):
    report = await asyncio.to_thread(run_agent, agents_sdk, real_server, 300)
    shown = json.dumps({k: v for k, v in report.items() if k != "eventTypes"})
    assert report["calls"] and all(set(call) == {"city"} and call["city"].strip() for call in report["calls"]), shown
    assert "paris" in report["calls"][0]["city"].lower(), shown
    assert report["audioBytes"] > 0 and report["transcript"].strip(), shown
    assert not call_markup(report["transcript"], ["get_weather"]), shown  # the answer, not the call, is spoken
    assert not report["errors"] and report["returncode"] == 0, shown
    types = report["eventTypes"]
    assert types.index("response.function_call_arguments.done") < types.index("response.output_audio.delta")


def docs_example(heading: str) -> str:
    """The first Python block after ``heading`` in docs/clients.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "clients.md").read_text()
    after = text[text.index(heading) :]
    start = after.index("```python\n") + len("```python\n")
    return after[start : after.index("```\n", start)]


def test_the_documented_voice_agent_with_tools_runs_as_written(real_server, tmp_path):
    code = docs_example("## A voice agent with tools")
    assert "127.0.0.1:8000" in code
    script = tmp_path / "voice_agent.py"
    script.write_text(code.replace("127.0.0.1:8000", f"127.0.0.1:{real_server.port}"))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("calling get_weather({'city': ") for line in lines), result.stdout
    assert any(line.startswith("assistant: ") and line[len("assistant: ") :].strip() for line in lines), result.stdout
    assert float(lines[-1].split()[0]) > 0, result.stdout
