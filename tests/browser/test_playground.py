"""The client page as a voice playground, in headless Chromium against a live loopback server (FAKE stages).

Each test leaves screenshots in artifacts/ (gitignored) to look at.
"""

from __future__ import annotations

import json
import time

import pytest
from websockets.sync.client import connect as ws_connect

from pipelines.config import EngineConfig
from tests.browser.conftest import ARTIFACTS, write_microphone_wav
from tests.support.conformance import decode
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"client-{name}.png"), full_page=True)


def sent_events(page) -> list[dict]:
    """Every JSON event the page sends on its WebSocket (recorded from the moment this is called).

    The page talks WebRTC by default; tests that read its events pin ``?transport=websocket``.
    """
    frames: list[dict] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: frames.append(json.loads(payload))))
    return frames


@pytest.fixture
def loopback_server(tmp_path):
    server = LiveServer(tmp_path).start(ready_timeout=120)
    yield server
    server.stop()


def test_the_first_screen_explains_itself_and_an_example_prompt_connects_and_asks(loopback_server, open_page):
    client = open_page(loopback_server.http + "/")
    page = client.page
    assert "runs entirely on this server" in page.inner_text("#intro")
    assert page.is_visible("#intro .hint")
    examples = page.locator(".example")
    assert examples.count() == 3
    shot(page, "first-screen-1280")

    first = examples.first.inner_text()
    examples.first.click()  # not connected yet: the page connects, then asks
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 20)
    assert page.is_hidden("#intro") and page.is_hidden(".hint")
    assert page.locator("#chat li[data-role=user]").first.inner_text().endswith(first)
    assert page.locator("#chat li[data-role=assistant] .text").first.inner_text().startswith(f"You said: {first}")
    shot(page, "example-answered-1280")
    assert client.errors == []


def test_it_is_usable_at_390_px_wide(loopback_server, open_page):
    client = open_page(loopback_server.http + "/", viewport=PHONE)
    page = client.page
    shot(page, "first-screen-390")
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    assert page.is_hidden(".hint")  # the "Press Connect" hint goes once connected
    page.fill("#message", "a reply on a phone")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 15)
    page.click("#settings summary")
    page.click("#event-log summary")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    for selector in ("#connect", "#send", "#message", "#voice", "#turn-detection", "#clear", "#export", "#mute"):
        box = page.locator(selector).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], selector
    shot(page, "conversation-390")
    assert client.errors == []


def test_settings_list_the_installed_voices_offer_semantic_vad_fade_and_leave_the_transcript_alone(
    loopback_server, open_page
):
    client = open_page(loopback_server.http + "/?transport=websocket")
    page = client.page
    frames = sent_events(page)
    # One voice model is loaded by default: one choice, not ten aliases of it (and the Kokoro voices installed).
    options = page.locator("#voice option")
    assert options.count() == 1 + len(EngineConfig().kokoro_names)
    assert options.first.get_attribute("value") == "alloy"
    assert options.first.text_content().startswith("Default voice")

    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    page.fill("#message", "hello")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 15)
    before = page.locator("#chat").bounding_box()
    page.click("#settings summary")
    after = page.locator("#chat").bounding_box()
    assert after["height"] == before["height"] and after["width"] == before["width"]

    page.select_option("#turn-detection", "semantic_vad")
    assert page.is_hidden("#silence") and page.is_visible("#eagerness")
    page.select_option("#eagerness", "high")
    page.click("#settings-form button[type=submit]")
    client.wait_for("window.s2sStats.events['session.updated'] >= 1", 10)
    update = [f for f in frames if f["type"] == "session.update"][-1]
    assert update["session"]["audio"]["input"]["turn_detection"] == {"type": "semantic_vad", "eagerness": "high"}
    assert page.inner_text("#settings-status") == "Settings applied."
    assert page.input_value("#turn-detection") == "semantic_vad" and page.input_value("#eagerness") == "high"
    shot(page, "settings-open-1280")
    client.wait_for("document.getElementById('settings-status').textContent === ''", 6)  # it fades away

    page.select_option("#turn-detection", "server_vad")
    page.fill("#silence", "650")
    page.click("#settings-form button[type=submit]")
    client.wait_for("window.s2sStats.events['session.updated'] >= 2", 10)
    update = [f for f in frames if f["type"] == "session.update"][-1]
    detection = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 650}
    assert update["session"]["audio"]["input"]["turn_detection"] == detection
    assert client.errors == []


def test_a_full_pool_is_said_once_and_retried_with_a_countdown_until_a_slot_frees(tmp_path, open_page):
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "1"}).start(ready_timeout=120)
    try:
        holder = ws_connect(server.ws, subprotocols=["realtime"], open_timeout=10)
        assert decode(holder.recv(timeout=10))["type"] == "session.created"
        client = open_page(server.http + "/")
        page = client.page
        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'busy'", 15)
        said = page.inner_text("#status-text")
        assert said == "All slots are busy. Trying again every 5 s." and page.is_hidden("#alert")
        assert page.inner_text("#retry-in").startswith("next try in")
        shot(page, "busy-countdown")
        client.wait_for("window.s2sStats.retries >= 1 && window.s2sStats.state === 'busy'", 15)
        holder.close()
        client.wait_for("window.s2sStats.state === 'listening'", 30)
        stats = client.stats()
        assert stats["errors"] == ["All slots are busy. Trying again every 5 s."]  # said once, not per try
        assert page.is_hidden("#alert")
        assert client.errors == [] and client.failed == []  # no call refused with 429 either
    finally:
        server.stop()


def test_a_spoken_turn_shows_the_indicators_one_latency_with_the_server_breakdown_and_the_event_log(
    loopback_server, open_page, tmp_path
):
    wav = tmp_path / "question.wav"
    write_microphone_wav(wav, ["What is the weather like in Paris today?"], tail_s=4.0)
    # The page's own end-of-speech clock is the capture worklet's, on the WebSocket transport.
    client = open_page(loopback_server.http + "/?transport=websocket", microphone=wav)
    page = client.page
    page.click("#connect")
    client.wait_for("window.s2sStats.indicated.user >= 1", 20)
    assert page.is_visible("#you-speaking")
    shot(page, "you-are-speaking")
    client.wait_for("window.s2sStats.indicated.assistant >= 1", 20)
    shot(page, "assistant-speaking")
    client.wait_for("window.s2sStats.latencies.length === 1 && window.s2sStats.latencies[0].server !== null", 20)
    latency = client.stats()["latencies"][0]
    server = latency["server"]
    assert latency["kind"] == "voice"
    assert server["voice_to_voice_ms"] is not None and server["stt_ms"] is not None
    # The same quantity measured at both ends: the page's adds the network and the jitter buffer.
    assert latency["ms"] >= server["voice_to_voice_ms"] - 50
    assert latency["ms"] < server["voice_to_voice_ms"] + 1500
    summary = page.inner_text("#latency-summary")
    assert f"{latency['ms']} ms from the end of your speech to the first audio" in summary
    breakdown = page.inner_text("#latency-breakdown")
    assert breakdown.startswith(f"server {server['voice_to_voice_ms']} ms: STT {server['stt_ms']} ms")
    assert f"LM first token {server['lm_first_token_ms']} ms" in breakdown
    assert f"TTS first audio {server['tts_first_audio_ms']} ms" in breakdown

    assert page.is_hidden("#events")  # the log starts collapsed
    page.click("#event-log summary")
    log = page.inner_text("#events")
    assert "input_audio_buffer.append ×" in log and "input_audio_buffer.speech_stopped" in log
    page.locator("#events li[data-type='session.created'] summary").click()
    client.wait_for(
        "document.querySelector(\"#events li[data-type='session.created'] pre\")"
        ".textContent.includes('session.created')",
        5,
    )
    client.wait_for("window.s2sStats.state === 'listening'", 20)
    shot(page, "spoken-turn-with-log")
    assert client.errors == []


def test_mute_push_to_talk_and_the_microphone_picker(loopback_server, open_page, tmp_path):
    wav = tmp_path / "ptt.wav"
    write_microphone_wav(wav, ["Please read me the news."], lead_s=1.5, tail_s=6.0)
    client = open_page(loopback_server.http + "/?transport=websocket", microphone=wav)
    page = client.page
    frames = sent_events(page)
    page.click("#connect")
    client.wait_for("window.s2sStats.microphone === 'on' && window.s2sStats.microphones.length >= 1", 15)
    picker = page.locator("#microphone-select")
    assert picker.is_enabled() and picker.locator("option").count() >= 1
    assert picker.input_value() == client.stats()["microphoneInUse"]

    page.click("#mute")
    assert page.get_attribute("#mute", "aria-pressed") == "true"
    time.sleep(0.3)
    muted_at = client.stats()["sentSamples"]
    time.sleep(0.6)
    assert client.stats()["sentSamples"] == muted_at  # nothing leaves a muted microphone
    page.click("#mute")

    page.check("#ptt")
    client.wait_for("window.s2sStats.events['session.updated'] >= 1", 10)
    update = [f for f in frames if f["type"] == "session.update"][-1]
    assert update["session"]["audio"]["input"]["turn_detection"] is None
    idle_at = client.stats()["sentSamples"]
    time.sleep(0.5)
    assert client.stats()["sentSamples"] == idle_at  # push-to-talk: only while the button is held
    talk = page.locator("#talk")
    talk.hover()
    page.mouse.down()
    client.wait_for("document.getElementById('app').dataset.userSpeaking === 'true'", 5)
    shot(page, "push-to-talk-held")
    time.sleep(2.5)
    page.mouse.up()
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 30)
    types = [f["type"] for f in frames]
    assert types.count("input_audio_buffer.commit") == 1 and "response.create" in types
    assert client.stats()["latencies"][0]["kind"] == "voice"
    assert page.locator("#chat li[data-role=assistant]").count() == 1
    assert client.errors == []


def test_clear_export_and_answers_cut_short_are_marked(loopback_server, open_page):
    client = open_page(loopback_server.http + "/")
    page = client.page
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    page.fill("#message", "first question here")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.events['response.done'] === 1 && window.s2sStats.state === 'listening'", 15)

    page.click("#settings summary")
    page.fill("#max-tokens", "1")
    page.click("#settings-form button[type=submit]")
    client.wait_for("window.s2sStats.events['session.updated'] >= 1", 10)
    page.fill("#message", "a long second question that gets a short answer")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.events['response.done'] === 2", 15)
    cut = page.locator("#chat li[data-role=assistant]").last
    assert cut.get_attribute("data-status") == "incomplete"
    assert "cut short: the answer reached its length limit" in cut.inner_text()
    shot(page, "incomplete-marked")

    with page.expect_download() as download:
        page.click("#export")
    text = download.value.path().read_text()
    assert download.value.suggested_filename.startswith("conversation-")
    assert "You: first question here\n\nAssistant: You said: first question here." in text
    assert "[" in text and "cut short" in text

    page.click("#clear")
    client.wait_for("(window.s2sStats.events['conversation.item.deleted'] || 0) === 4", 10)
    assert page.locator("#chat li").count() == 0 and page.is_visible("#intro")
    assert client.stats()["sent"]["conversation.item.delete"] == 4
    assert client.errors == []
