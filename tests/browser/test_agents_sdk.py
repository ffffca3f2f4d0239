"""OpenAI's JS Agents SDK (@openai/agents-realtime, from npm) in Chromium over its WebRTC transport, against us.

The SDK's own browser bundle is loaded into a page of the server (same origin), given an
``ek_`` client secret minted with an API key, as a browser app would be, and a fake
microphone playing a WAV file. It must connect, hear the question, play the answer,
be interrupted, and hang up, freeing the unit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.browser.conftest import write_microphone_wav
from tests.support.server import LiveServer
from tests.support.services import IN_CI
from tests.webrtc.conftest import free_units

pytestmark = pytest.mark.browser

PACKAGE = Path(__file__).resolve().parent / "agents_sdk"
BUNDLE = PACKAGE / "node_modules/@openai/agents-realtime/dist/bundle/openai-realtime-agents.umd.js"

CONNECT = """async ([secret, baseUrl]) => {
  const { RealtimeAgent, RealtimeSession, OpenAIRealtimeWebRTC } = window.OpenAIAgentsRealtime;
  window.sdk = { events: [], errors: [], history: [] };
  const agent = new RealtimeAgent({ name: "Assistant", instructions: "Answer briefly." });
  const transport = new OpenAIRealtimeWebRTC({ baseUrl });
  const session = new RealtimeSession(agent, { transport, model: "gpt-realtime" });
  transport.on("*", (event) => window.sdk.events.push(event.type));
  session.on("error", (error) => window.sdk.errors.push(
    String((error && error.error && error.error.message) || error)));
  session.on("history_updated", (history) => { window.sdk.history = JSON.parse(JSON.stringify(history)); });
  window.sdk.session = session;
  window.sdk.transport = transport;
  await session.connect({ apiKey: secret });
  return { status: transport.status, callId: transport.callId };
}"""


def sdk_bundle() -> Path:
    """Installs the pinned SDK from npm once (package-lock.json); skips locally without npm, fails in CI."""
    if not BUNDLE.exists():
        npm = shutil.which("npm")
        if npm is None:
            if IN_CI:
                pytest.fail("npm is not installed (apt-get install npm)")
            pytest.skip("npm is not installed")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True, timeout=600, capture_output=True
        )
    return BUNDLE


@pytest.fixture
def secured(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_AUTH_REQUIRED": "1"}).start()
    key = server.manage("create_api_key", "agents sdk").stdout.strip()
    yield server, key
    server.stop()


def test_the_js_agents_sdk_talks_to_this_server_over_its_webrtc_transport(secured, open_page, tmp_path):
    bundle = sdk_bundle()
    server, key = secured
    wav = tmp_path / "question.wav"
    write_microphone_wav(wav, ["What is the capital of France?"], lead_s=2.0, tail_s=8.0)
    client = open_page(server.http + "/", microphone=wav)
    page = client.page
    # the page's CSP allows scripts of its own origin only: the bundle is served as one of them
    page.route(
        f"{server.http}/agents-sdk.umd.js",
        lambda route: route.fulfill(path=str(bundle), content_type="application/javascript"),
    )
    page.add_script_tag(url=f"{server.http}/agents-sdk.umd.js")
    secret = server.mint_client_secret(key)
    opened = page.evaluate(CONNECT, [secret, f"{server.http}/v1/realtime/calls"])
    assert opened["status"] == "connected" and opened["callId"].startswith("rtc_")
    client.wait_for("window.sdk.events.includes('output_audio_buffer.stopped')", 45)
    events = page.evaluate("window.sdk.events")
    for expected in (
        "session.created",
        "session.updated",
        "input_audio_buffer.speech_started",
        "conversation.item.input_audio_transcription.completed",
        "response.done",
        "output_audio_buffer.started",
    ):
        assert expected in events, (expected, events)
    assert "response.output_audio.delta" not in events
    assert page.evaluate("window.sdk.errors") == []
    history = page.evaluate("window.sdk.history")
    roles = [item.get("role") for item in history if item.get("type") == "message"]
    assert roles[:2] == ["user", "assistant"], history
    assistant = next(item for item in history if item.get("role") == "assistant")
    assert "You said: audio of" in json.dumps(assistant)  # the FAKE LM's reply to the FAKE STT's transcript

    # the spent secret opens nothing more
    again = page.evaluate(
        """async ([secret, url]) => (await fetch(url, { method: "POST", body: "v=0",
        headers: { "Content-Type": "application/sdp", Authorization: `Bearer ${secret}` } })).status""",
        [secret, f"{server.http}/v1/realtime/calls"],
    )
    assert again == 401

    # the SDK's interrupt() sends output_audio_buffer.clear (and response.cancel when one is active)
    page.evaluate("window.sdk.session.interrupt()")
    client.wait_for("window.sdk.events.includes('output_audio_buffer.cleared')", 10)
    assert free_units(server, key) == 1
    page.evaluate("window.sdk.session.close()")
    deadline = time.monotonic() + 15
    while free_units(server, key) != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert free_units(server, key) == 2
    assert [error for error in client.errors if "status of 401" not in error] == []
