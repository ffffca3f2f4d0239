"""The browser client over WebRTC in headless Chromium, with a WAV file as the microphone (loopback profile)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import ARTIFACTS, write_microphone_wav

pytestmark = pytest.mark.browser


def test_a_spoken_turn_goes_over_webrtc_by_default(loopback_server, open_page, tmp_path):
    wav = tmp_path / "question.wav"
    write_microphone_wav(wav, ["What is the capital of France?"], tail_s=5.0)
    client = open_page(loopback_server.http + "/", microphone=wav)
    page = client.page
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening' && window.s2sStats.microphone === 'on'", 20)
    assert client.stats()["transport"] == "webrtc"
    assert page.inner_text("#transport") == "via WebRTC"
    try:
        client.wait_for(
            "(window.s2sStats.events['output_audio_buffer.stopped'] || 0) >= 1"
            " && window.s2sStats.state === 'listening'",
            45,
        )
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "browser-webrtc-turn.png"), full_page=True)
    stats = client.stats()
    events = stats["events"]
    assert events["session.created"] == 1 and events["response.done"] >= 1
    assert events["output_audio_buffer.started"] >= 1
    assert "response.output_audio.delta" not in events  # the answer came on the audio track
    assert "input_audio_buffer.append" not in stats["sent"]  # so did the question
    user = page.locator("#chat li[data-role=user] .text").first.inner_text()
    assert user.startswith("audio of "), user  # the FAKE STT describes what it heard
    reply = page.locator("#chat li[data-role=assistant] .text").first.inner_text()
    assert reply.startswith("You said: audio of "), reply
    assert stats["playedSamples"] > 24000 * 0.5  # the echoed question, heard through the track
    latency = stats["latencies"][0]
    assert latency["kind"] == "voice" and latency["ms"] > 0
    assert "error" not in events
    assert client.errors == []


def test_speaking_over_the_answer_clears_it_on_the_server_and_truncates_it(loopback_server, open_page, tmp_path):
    wav = tmp_path / "two-questions.wav"
    write_microphone_wav(wav, ["What is the capital of France?", "Wait, tell me about Spain instead, please."])
    client = open_page(loopback_server.http + "/", microphone=wav)
    client.page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening' && window.s2sStats.microphone === 'on'", 20)
    client.wait_for(
        "(window.s2sStats.events['output_audio_buffer.cleared'] || 0) >= 1"
        " && (window.s2sStats.events['conversation.item.truncated'] || 0) >= 1",
        30,
    )
    stats = client.stats()
    cut = stats["truncations"][0]
    first_answer = client.page.locator("#chat li[data-role=assistant]").first
    assert first_answer.get_attribute("data-item-id") == cut["itemId"]
    assert first_answer.get_attribute("data-truncated") == "true"
    assert 100 < cut["audioEndMs"] < 1800  # some of the 2 s echo was played, not all of it
    assert "conversation.item.truncate" not in stats["sent"]  # the server knows what it played
    client.wait_for("document.querySelectorAll('#chat li[data-role=assistant]').length === 2", 30)
    assert "error" not in client.stats()["events"]
    assert client.errors == []


def test_without_webrtc_the_page_falls_back_to_the_websocket_and_says_so(loopback_server, open_page):
    client = open_page(loopback_server.http + "/")
    page = client.page
    page.evaluate("delete window.RTCPeerConnection")
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    stats = client.stats()
    assert stats["transport"] == "websocket" and stats["fallback"] == "this browser has no WebRTC"
    assert page.inner_text("#transport") == "via WebSocket"
    page.fill("#message", "hello over the socket")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 15)
    assert client.stats()["events"]["response.output_audio.delta"] >= 1
    assert client.errors == []
