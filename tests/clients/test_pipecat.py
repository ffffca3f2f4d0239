"""pipecat's ``OpenAIRealtimeLLMService`` (pipecat-ai, pinned in tests/clients/pipecat/requirements.txt) as a
pipecat bot runs it, over ``wss://``: its own virtual environment (``make pipecat-deps``; pipecat-ai wants
protobuf<7, the server protobuf 7), ``base_url`` and a key, Python trusting the test's certificate authority
through ``SSL_CERT_FILE``. tests/clients/pipecat/turns.py runs a tool turn and a spoken turn through a pipeline
and reports what pipecat saw; the loopback profile answers, the protocol is what is tested."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.server import ROOT

SCRIPT = Path(__file__).resolve().parent / "pipecat" / "turns.py"
PYTHON = ROOT / ".venv-pipecat" / "bin" / "python"
# Python's warnings as its default filters show them (the script's own deprecated calls, a coroutine never
# awaited; not pipecat's internal deprecations, which its users never see either)
PYTHON_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ", re.MULTILINE)


@pytest.fixture(scope="module")
def pipecat_python() -> Path:
    """.venv-pipecat's interpreter, built by make from the pinned requirements when missing or stale."""
    subprocess.run(["make", "--no-print-directory", "pipecat-deps"], cwd=ROOT, check=True, timeout=900)
    return PYTHON


def test_pipecat_realtime_service_does_a_tool_turn_and_a_spoken_turn_over_wss(
    pipecat_python, tls_server, api_key, certs
):
    result = subprocess.run(
        [str(pipecat_python), str(SCRIPT), tls_server.ws],
        env={**os.environ, "OPENAI_API_KEY": api_key, "SSL_CERT_FILE": str(certs.ca)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = result.stdout.strip().splitlines()
    assert lines, f"the pipecat client printed nothing (exit {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(lines[-1])
    problems = report["log_problems"] + report["error_frames"] + PYTHON_WARNING.findall(result.stderr)
    assert result.returncode == 0 and "exception" not in report, (report, result.stderr[-3000:])
    assert not problems, problems

    # the tool turn: the function called with the model's arguments, its result read back, typed and spoken
    assert report["calls"] == [{"name": "get_weather", "arguments": {"city": "Paris"}}], report
    call, answer = report["tool"]
    assert call == {"text": "", "audio_s": 0.0}, report
    assert "sunny in Paris" in answer["text"] and answer["audio_s"] > 0.1, report

    # the spoken turn: the server's VAD ended it, its transcript reached the context, the reply was spoken
    spoken = report["spoken"]
    assert spoken["text"].startswith("You said: audio of") and spoken["audio_s"] > 0.5, report
    assert len(report["user_turns"]) == 1 and report["user_turns"][0].startswith("audio of"), report

    # the context pipecat kept: the question, the call, its result, both answers and the spoken turn
    roles = [message["role"] for message in report["context"]]
    assert sorted(roles) == ["assistant", "assistant", "assistant", "tool", "user", "user"], report["context"]
    tool_call = next(message for message in report["context"] if message.get("tool_calls"))
    assert json.loads(tool_call["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
