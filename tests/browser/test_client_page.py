"""The browser client against a live server with the loopback profile (FAKE stages), in headless Chromium."""

from __future__ import annotations

import time

import pytest
from websockets.sync.client import connect as ws_connect

from tests.browser.conftest import write_microphone_wav
from tests.support.conformance import decode
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}


# Not named ``live_server``: pytest-django's autouse helper takes a fixture of that name for its own.
@pytest.fixture
def loopback_server(tmp_path):
    server = LiveServer(tmp_path).start(ready_timeout=120)
    yield server
    server.stop()


@pytest.fixture
def single_slot_server(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_POOL_SIZE": "1"}).start(ready_timeout=120)
    yield server
    server.stop()


def test_a_typed_message_gets_a_spoken_reply_by_keyboard_on_a_phone_without_a_microphone(loopback_server, open_page):
    client = open_page(loopback_server.http + "/", viewport=PHONE)
    page = client.page
    for _ in range(10):  # the Connect button is the first stop of the focus order
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "connect":
            break
    assert page.evaluate("document.activeElement.id") == "connect"
    page.keyboard.press("Enter")
    client.wait_for("window.s2sStats.state === 'listening' && window.s2sStats.microphone === 'unavailable'", 15)
    assert "You can still type" in page.inner_text("#notice")
    assert page.inner_text("#status-text") == "Ready: type a message"

    page.focus("#message")
    page.keyboard.type("hello from the keyboard")
    page.keyboard.press("Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 15)

    assistant = page.locator("#chat li[data-role=assistant]").last
    assert assistant.locator(".text").inner_text() == "You said: hello from the keyboard."
    assert page.locator("#chat li[data-role=user]").last.inner_text().endswith("hello from the keyboard")
    stats = client.stats()
    assert stats["sent"]["conversation.item.create"] == 1 and stats["sent"]["response.create"] == 1
    assert stats["latencies"] and stats["latencies"][0]["kind"] == "text" and stats["latencies"][0]["ms"] > 0
    assert "message to audio" in assistant.inner_text()
    # phone-sized: nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert client.errors == []


def test_settings_go_out_as_a_ga_session_update(loopback_server, open_page):
    client = open_page(loopback_server.http + "/")
    page = client.page
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    page.click("#settings summary")
    page.fill("#instructions", "Answer like a pirate.")
    page.select_option("#voice", index=0)
    page.fill("#silence", "750")
    page.click("#settings-form button[type=submit]")
    client.wait_for("window.s2sStats.events['session.updated'] === 1", 10)
    assert page.inner_text("#settings-status") == "Settings applied."
    # the form shows what the server echoed back
    assert page.input_value("#voice") == "alloy"
    assert page.input_value("#silence") == "750"
    assert page.input_value("#instructions") == "Answer like a pirate."

    page.fill("#silence", "20")  # outside 100..3000: the form refuses it, nothing is sent
    page.click("#settings-form button[type=submit]")
    assert page.evaluate("document.getElementById('silence').validity.rangeUnderflow")
    assert client.stats()["sent"]["session.update"] == 1
    assert client.errors == []


def test_it_shows_the_busy_state_when_every_slot_is_taken_and_connects_on_retry(single_slot_server, open_page):
    holder = ws_connect(single_slot_server.ws, subprotocols=["realtime"], open_timeout=10)
    try:
        assert decode(holder.recv(timeout=10))["type"] == "session.created"
        client = open_page(single_slot_server.http + "/")
        page = client.page
        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'busy'", 15)
        assert page.is_hidden("#alert")  # one message, in the status line
        assert page.inner_text("#status-text") == "All slots are busy. Trying again every 5 s."
        assert page.inner_text("#retry-in").startswith("next try in")
        # said once, politely: over a countdown and a retry nothing in a live region changes, and the countdown
        # is in none (a role=alert changing each second was read out each second)
        page.evaluate("""() => { window.liveChanges = 0;
          const observer = new MutationObserver(() => { window.liveChanges += 1; });
          for (const live of document.querySelectorAll('[aria-live], [role=alert], [role=status]'))
            observer.observe(live, {subtree: true, childList: true, characterData: true}); }""")
        client.wait_for("window.s2sStats.retries >= 1 && window.s2sStats.state === 'busy'", 15)
        assert page.evaluate("window.liveChanges") == 0
        assert page.evaluate("document.getElementById('retry-in').closest('[aria-live], [role]') === null")
        assert page.inner_text("#connect") == "Try again now"  # without waiting for the countdown
        assert "error" not in client.stats()["events"]  # the page asked /v1/realtime/slots: no offer was refused
    finally:
        holder.close()

    deadline = time.monotonic() + 20  # the server frees the slot once the holder's session is released
    while time.monotonic() < deadline and single_slot_server.get("/readyz")[0] != 200:
        time.sleep(0.1)
    # "Try again" at once; checked and clicked in one go, as the countdown may be retrying right now
    page.evaluate("window.s2sStats.state === 'busy' && document.getElementById('connect').click()")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    assert page.is_hidden("#alert")
    assert client.errors == [] and client.failed == []  # no call refused with 429 either


def test_speaking_over_the_answer_stops_playback_and_truncates_to_what_was_heard(loopback_server, open_page, tmp_path):
    # The FAKE loopback voice echoes the first question (about 2 s of audio); the second
    # question starts 1 s after the first ends, while that echo is playing.
    wav = tmp_path / "two-questions.wav"
    write_microphone_wav(wav, ["What is the capital of France?", "Wait, tell me about Spain instead, please."])
    # Over the WebSocket the page plays the answer and truncates it (tests/browser/test_webrtc.py: the server does)
    client = open_page(loopback_server.http + "/?transport=websocket", microphone=wav)
    client.page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening' && window.s2sStats.microphone === 'on'", 15)
    assert client.stats()["transport"] == "websocket"
    client.wait_for("(window.s2sStats.events['conversation.item.truncated'] || 0) >= 1", 30)

    stats = client.stats()
    cut = stats["truncations"][0]
    first_answer = client.page.locator("#chat li[data-role=assistant]").first
    assert first_answer.get_attribute("data-item-id") == cut["itemId"]
    assert first_answer.get_attribute("data-truncated") == "true"
    # heard some of the echo, not all of it (the echo is as long as the question, about 2 s)
    assert 100 < cut["audioEndMs"] < 1800
    assert stats["sent"]["conversation.item.truncate"] == 1
    assert stats["playedSamples"] >= cut["audioEndMs"] * 24
    # the second question still gets its answer
    client.wait_for("document.querySelectorAll('#chat li[data-role=assistant]').length === 2", 30)
    assert stats["sentSamples"] > 0 and "error" not in stats["events"]
    assert client.errors == []
