"""The client page keeps what a person set, offers every setting the server has (applied at once while connected),
opens the microphone only when asked, and marks each new session, at 1280x800 and 390x844, in headless Chromium
against a live loopback server (FAKE stages)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pipelines.config import DEFAULT_INSTRUCTIONS, SPEED_RANGE
from realtime.protocol.session.keys import NOISE_REDUCTION_TYPES
from tests.browser.conftest import ARTIFACTS, write_microphone_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}
BANANA = "Always answer with the single word banana."
EXTRA_VOICE = "nova"


def shot(page, name: str, size: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"client-{name}-{size}.png"), full_page=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    # A second voice model named: the page must offer it (the loopback stages never load it).
    # Kokoro's voices off: the page is to offer exactly the voices this server names.
    env = {"S2S_TTS_VOICES": f"{EXTRA_VOICE}=/voices/en_GB-nova-medium.onnx", "S2S_KOKORO_VOICES": "off"}
    live = LiveServer(tmp_path_factory.mktemp("keeps"), env).start(ready_timeout=120)
    yield live
    live.stop()


def all_free(server: LiveServer) -> None:
    wait_for(lambda: server.get("/readyz")[0] == 200, timeout=20, what="every unit free again")


def sent_events(page) -> list[dict]:
    frames: list[dict] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: frames.append(json.loads(payload))))
    return frames


def updates(frames: list[dict]) -> list[dict]:
    return [frame["session"] for frame in frames if frame["type"] == "session.update"]


def connect(client) -> None:
    client.page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)


def disconnect(client) -> None:
    client.page.click("#connect")
    client.wait_for("window.s2sStats.state === 'disconnected'", 10)


@pytest.mark.parametrize("size", SIZES)
def test_settings_applied_in_a_call_stay_for_the_next_sessions_and_reloads_until_reset(server, open_page, size):
    client = open_page(server.http + "/?transport=websocket", viewport=SIZES[size])
    page = client.page
    frames = sent_events(page)
    assert page.is_hidden("#settings-mark")
    connect(client)
    page.click("#settings summary")
    page.fill("#instructions", BANANA)
    page.fill("#silence", "700")
    page.locator("#speed").fill("1.25")
    page.click("#settings-form button[type=submit]")
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 1", 10)
    assert page.inner_text("#settings-status") == "Settings applied."
    echo = page.inner_text("#settings-echo")  # what the server says it now runs, in words
    assert "speed 1.25×" in echo and "server VAD, 700 ms pause" in echo
    assert page.is_visible("#settings-mark") and page.is_visible("#reset-settings")
    shot(page, "settings-kept", size)

    disconnect(client)  # a new session: opened with what was applied, said so
    connect(client)
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 2", 10)
    again = updates(frames)[-1]
    assert again["instructions"] == BANANA and again["audio"]["output"]["speed"] == 1.25
    detection = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 700}
    assert again["audio"]["input"]["turn_detection"] == detection and again["audio"]["input"]["noise_reduction"] is None
    assert "700 ms pause" in page.inner_text("#settings-echo")
    disconnect(client)

    page.reload()  # kept in this browser
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    page.click("#settings summary")
    assert page.input_value("#instructions") == BANANA
    assert page.input_value("#silence") == "700" and page.input_value("#speed") == "1.25"
    assert page.is_visible("#settings-saved") and page.is_visible("#settings-mark")
    connect(client)
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 1", 10)
    assert updates(frames)[-1]["instructions"] == BANANA

    page.click("#reset-settings")  # back to the server's defaults, for this session and the next
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 2", 10)
    reset = updates(frames)[-1]
    assert reset["instructions"] == DEFAULT_INSTRUCTIONS and reset["audio"]["output"]["speed"] == 1
    assert reset["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 500
    assert page.input_value("#instructions") == DEFAULT_INSTRUCTIONS and page.input_value("#silence") == "500"
    assert page.is_hidden("#settings-mark")
    disconnect(client)
    page.reload()
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    assert page.input_value("#instructions") == DEFAULT_INSTRUCTIONS and page.is_hidden("#settings-mark")
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    assert client.errors == []
    all_free(server)


@pytest.mark.parametrize("size", SIZES)
def test_voice_and_speed_are_offered_as_the_server_has_them_and_echoed(server, open_page, size):
    client = open_page(server.http + "/?transport=websocket", viewport=SIZES[size])
    page = client.page
    frames = sent_events(page)
    page.click("#settings summary")
    voices = page.locator("#voice option")
    assert [voices.nth(i).get_attribute("value") for i in range(voices.count())] == ["alloy", EXTRA_VOICE]
    assert "alloy" in page.inner_text("#voice-help") and "shimmer" in page.inner_text("#voice-help")
    speed = page.locator("#speed")
    assert speed.is_visible()
    low, high = SPEED_RANGE
    assert (float(speed.get_attribute("min")), float(speed.get_attribute("max"))) == (low, high)
    assert speed.input_value() == "1" and page.inner_text("#speed-value") == "1.00×"

    connect(client)
    page.select_option("#voice", EXTRA_VOICE)
    speed.fill(str(low))
    assert page.inner_text("#speed-value") == f"{low:.2f}×"
    page.click("#settings-form button[type=submit]")
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 1", 10)
    assert updates(frames)[-1]["audio"]["output"] == {"voice": EXTRA_VOICE, "speed": low}
    echo = page.locator("#settings-echo")
    assert echo.get_attribute("data-voice") == EXTRA_VOICE and float(echo.get_attribute("data-speed")) == low
    assert page.input_value("#voice") == EXTRA_VOICE
    box = speed.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= SIZES[size]["width"]
    disconnect(client)
    page.click("#reset-settings")
    assert client.errors == []
    all_free(server)


@pytest.mark.parametrize("size", SIZES)
def test_typing_before_connect_connects_and_each_new_session_is_marked_in_the_chat(server, open_page, size):
    client = open_page(server.http + "/", viewport=SIZES[size])  # WebRTC, the page's default
    page = client.page
    page.fill("#message", "hello before connecting")
    page.press("#message", "Enter")  # not connected: it connects, then sends, as the examples do
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 20)
    assert client.stats()["errors"] == [] and page.is_hidden("#alert")
    assert page.locator("#chat li[data-role=user]").first.inner_text().endswith("hello before connecting")
    assert page.input_value("#message") == ""
    disconnect(client)

    page.fill("#message", "and after a reconnect")
    page.click("#send")
    client.wait_for("document.querySelectorAll('#chat li[data-role=assistant]').length === 2", 20)
    client.wait_for("window.s2sStats.state === 'listening'", 20)
    roles = page.eval_on_selector_all("#chat > li", "items => items.map((li) => li.dataset.role)")
    assert roles == ["user", "assistant", "divider", "user", "assistant"]
    divider = page.locator("#chat li.divider")
    assert divider.is_visible() and "does not remember" in divider.inner_text()
    shot(page, "new-session-divider", size)
    with page.expect_download() as download:
        page.click("#export")
    assert "--- New session" in download.value.path().read_text()

    deleted = client.stats()["events"].get("conversation.item.deleted", 0)
    page.click("#clear")  # the server holds only this session's two items: only they are deleted
    client.wait_for(f"(window.s2sStats.events['conversation.item.deleted'] || 0) === {deleted + 2}", 10)
    assert client.stats()["sent"]["conversation.item.delete"] == 2
    assert "error" not in client.stats()["events"] and page.locator("#chat li").count() == 0
    disconnect(client)
    assert client.errors == []
    all_free(server)


CONTRAST = """(selector) => {
  const luminance = (color) => {
    const [r, g, b] = color.match(/[\\d.]+/g).slice(0, 3).map((v) => {
      const c = Number(v) / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const element = document.querySelector(selector);
  const style = getComputedStyle(element);
  const page = getComputedStyle(document.documentElement).backgroundColor;
  const [a, b] = [luminance(style.outlineColor), luminance(page)].sort((x, y) => y - x);
  return {style: style.outlineStyle, width: parseFloat(style.outlineWidth), ratio: (a + 0.05) / (b + 0.05)};
}"""

# The selected microphone's name against the room the picker gives it (its arrow takes about 24 px).
NAME_FITS = """() => {
  const select = document.getElementById('microphone-select');
  const style = getComputedStyle(select);
  const context = document.createElement('canvas').getContext('2d');
  context.font = style.font;
  const text = context.measureText(select.options[select.selectedIndex].text).width;
  const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 24;
  return {text, room, name: select.options[select.selectedIndex].text};
}"""


@pytest.mark.parametrize("size", SIZES)
def test_the_focus_ring_stands_out_from_the_page_and_the_microphone_name_is_whole(server, open_page, size, tmp_path):
    wav = tmp_path / "quiet.wav"
    write_microphone_wav(wav, [], lead_s=0.5, tail_s=2.0)
    client = open_page(server.http + "/", microphone=wav, viewport=SIZES[size])
    page = client.page
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "connect":
            break
    ring = page.evaluate(CONTRAST, "#connect")
    assert ring["style"] != "none" and ring["width"] >= 2
    assert ring["ratio"] >= 3, f"the focus ring is {ring['ratio']:.1f}:1 against the page"
    page.keyboard.press("Enter")
    client.wait_for("window.s2sStats.microphone === 'on' && window.s2sStats.microphones.length >= 1", 15)
    fits = page.evaluate(NAME_FITS)
    assert fits["text"] <= fits["room"], f"{fits['name']!r} is cut: {fits['text']:.0f} px in {fits['room']:.0f}"
    shot(page, "microphone-picker", size)
    disconnect(client)
    assert client.errors == []
    all_free(server)


@pytest.mark.parametrize("transport", ["webrtc", "websocket"])
def test_typing_before_connect_leaves_the_microphone_closed_until_asked(server, open_page, tmp_path, transport):
    """Issue 50: a message typed before Connect opened the microphone too, which then cut the typed answer off."""
    wav = tmp_path / "talk.wav"
    write_microphone_wav(wav, ["What is the capital of France?"], lead_s=0.3, tail_s=2.0)
    client = open_page(f"{server.http}/?transport={transport}", microphone=wav, viewport=SIZES["1280"])
    page = client.page
    page.fill("#message", "a typed question")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 20)
    stats = client.stats()
    assert stats["transport"] == transport and stats["microphone"] == "off" and stats["sentSamples"] == 0
    assert stats["truncations"] == [] and page.locator("#chat li[data-status]").count() == 0  # answered whole
    assert page.inner_text("#status-text") == "Ready: type a message"
    assert page.is_visible("#microphone-on")
    page.click("#microphone-on")  # asked: now it opens
    client.wait_for("window.s2sStats.microphone === 'on'", 10)
    assert page.is_hidden("#microphone-on")
    if transport == "websocket":
        client.wait_for("window.s2sStats.sentSamples > 0", 10)
    disconnect(client)
    assert client.errors == []
    all_free(server)


def test_every_tuning_is_offered_and_a_change_applies_at_once_while_connected_or_is_marked_unapplied(server, open_page):
    """Issue 50: a setting did nothing until Apply, with no sign of it; noise reduction, the VAD's threshold and
    padding and the connection were not offered."""
    client = open_page(server.http + "/", viewport=SIZES["1280"])
    page = client.page
    frames = sent_events(page)
    page.click("#settings summary")
    noise = page.eval_on_selector_all("#noise-reduction option", "options => options.map((o) => o.value)")
    assert noise == ["", *NOISE_REDUCTION_TYPES]
    assert page.input_value("#threshold") == "0.5" and page.input_value("#prefix-padding") == "300"
    assert page.input_value("#connection") == "webrtc" and page.input_value("#eagerness") == "auto"

    page.select_option("#noise-reduction", "far_field")  # not connected: marked, kept for the session to come
    client.wait_for("document.getElementById('settings-status').textContent.includes('when you connect')", 5)
    assert page.is_visible("#settings-pending")
    page.select_option("#connection", "websocket")
    connect(client)
    assert client.stats()["transport"] == "websocket"
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 1", 10)
    assert page.get_attribute("#settings-echo", "data-noise-reduction") == "far_field"
    assert page.is_hidden("#settings-pending")

    page.locator("#speed").fill("0.75")  # no Apply pressed: the change alone goes out
    client.wait_for("document.getElementById('settings-echo').dataset.speed === '0.75'", 10)
    page.fill("#threshold", "0.7")
    assert page.is_visible("#settings-pending")  # typed, not yet sent
    page.fill("#prefix-padding", "200")
    page.press("#prefix-padding", "Enter")  # Enter submits the form: applied now
    client.wait_for("document.getElementById('settings-echo').textContent.includes('200 ms kept before speech')", 10)
    detection = updates(frames)[-1]["audio"]["input"]["turn_detection"]
    assert detection == {"type": "server_vad", "threshold": 0.7, "prefix_padding_ms": 200, "silence_duration_ms": 500}
    assert "threshold 0.7" in page.inner_text("#settings-echo") and page.is_hidden("#settings-pending")
    page.select_option("#turn-detection", "semantic_vad")
    page.select_option("#eagerness", "low")
    client.wait_for("document.getElementById('settings-echo').textContent.includes('low eagerness')", 10)

    page.select_option("#connection", "webrtc")  # cannot change under a live session: said so
    help_text = page.locator("#connection-help")
    assert help_text.get_attribute("data-pending") == "true" and "Not applied yet" in help_text.inner_text()
    disconnect(client)
    assert help_text.get_attribute("data-pending") == "false"
    page.reload()  # kept: the connection and the settings
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    assert page.input_value("#connection") == "webrtc" and page.input_value("#noise-reduction") == "far_field"
    page.click("#settings summary")
    page.click("#reset-settings")
    assert page.input_value("#noise-reduction") == "" and page.is_hidden("#settings-pending")
    assert client.errors == []
    all_free(server)
