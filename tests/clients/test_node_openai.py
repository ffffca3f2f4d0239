"""OpenAI's Node SDK (``openai``, pinned in tests/clients/package-lock.json) as its users run it: a base URL, a
key, and one of its Realtime classes, which always dial ``wss://``. node trusts the test's certificate
authority through ``NODE_EXTRA_CA_CERTS``, and nothing else about the client changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "openai_node.mjs"


@pytest.fixture(scope="module")
def node() -> list[str]:
    """node with the pinned SDK (``make node-deps`` installs it; here too, from the lock file, when missing)."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm are needed (apt-get install npm)"
    if not (HERE / "node_modules" / "openai").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True, timeout=600)
    major = int(subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip("v\n").split(".")[0])
    # OpenAIRealtimeWebSocket uses the global WebSocket, which node 20 keeps behind a flag (22 has it on).
    return ["node", *(["--experimental-websocket"] if major < 22 else [])]


@pytest.mark.parametrize(
    "kind, answer_event",
    [
        ("ga", "response.output_text.delta"),  # OpenAIRealtimeWS (openai/realtime/ws)
        ("beta", "response.text.delta"),  # OpenAIRealtimeWS of openai/beta/realtime/ws, OpenAI-Beta: realtime=v1
        ("websocket", "response.output_text.delta"),  # OpenAIRealtimeWebSocket: the key in a subprotocol
    ],
)
def test_the_node_sdk_realtime_class_answers_a_typed_turn_over_wss(
    node, kind, answer_event, tls_server, api_key, certs
):
    result = subprocess.run(
        [*node, str(SCRIPT), kind, f"{tls_server.http}/v1", api_key],
        cwd=HERE,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": str(certs.ca)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = result.stdout.strip().splitlines()
    assert lines, f"node printed nothing (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert result.returncode == 0 and not report["errors"], report
    assert report["url"].startswith(f"wss://127.0.0.1:{tls_server.port}/v1/realtime?model="), report
    assert report["types"][0] == "session.created" and answer_event in report["types"], report
    assert report["status"] == "completed" and "hello over tls" in report["text"], report
