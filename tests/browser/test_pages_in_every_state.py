"""Every page at 1280x800 and 390x844 in headless Chromium, and the client page in the states a person meets.

One live loopback server (FAKE stages) serves the whole module: the client page, the session list, a session's
report and the slot board are opened signed in as an operator at both sizes, with a screenshot of each in
artifacts/ (``page-<name>-<width>.png``). No page may scroll sideways; the client page logs no console error
through a whole session on either transport, its hang-up and a full pool included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from django.contrib.admin.utils import quote

from pipelines.config import DEFAULT_INSTRUCTIONS
from tests.audit.clients import ws_connect, ws_receive_until, ws_text_turn
from tests.browser.conftest import ARTIFACTS, BASE_ARGS, BrowserPage, chromium_path, write_microphone_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, tone

pytestmark = pytest.mark.browser

PASSWORD = "pages-pw"
SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}
FITS = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"


def shot(page, name: str, width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"page-{name}-{width}.png"), full_page=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = LiveServer(
        tmp_path_factory.mktemp("pages"),
        {
            "DJANGO_SUPERUSER_USERNAME": "admin",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
            "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
            "S2S_SLOT_BOARD_REFRESH_S": "0.5",
            "S2S_HEARTBEAT_S": "0.5",
        },
    ).start(ready_timeout=120)
    live.manage("createsuperuser", "--noinput")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser(server) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=BASE_ARGS)
        yield chromium
        chromium.close()


def wait_all_free(server: LiveServer) -> None:
    wait_for(lambda: server.get("/readyz")[0] == 200, timeout=20, what="every unit free again")


@pytest.fixture(scope="module")
def recorded_session(server: LiveServer) -> str:
    """A finished session: three typed and three spoken messages, each answered, then a reply cancelled at once."""
    with ws_connect(server.ws) as ws:
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]
        for text in ("What time is it in Lisbon?", "And in Tokyo?", "Thanks, that helps."):
            ws_text_turn(ws, text)
        for _ in range(3):
            for chunk in pcm16_chunks(np.concatenate([tone(0.6), silence(0.9)])):
                ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            ws_receive_until(ws, "response.done", timeout=15)
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "slow answer please"}]}
        ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        ws.send(json.dumps({"type": "response.create"}))
        ws_receive_until(ws, "response.created")
        ws.send(json.dumps({"type": "response.cancel"}))
        assert ws_receive_until(ws, "response.done", timeout=15)["response"]["status"] == "cancelled"
    wait_all_free(server)
    return session_id


def operator(browser, server: LiveServer, size: str, failed: list[str]):
    page = browser.new_page(viewport=SIZES[size])
    page.set_default_timeout(15000)
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto(f"{server.http}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and (b["y"] < a["y"] + a["height"])
    )


@pytest.mark.parametrize("size", SIZES)
def test_every_page_fits_the_screen_at_both_sizes(server, browser, recorded_session, size):
    failed: list[str] = []
    page = operator(browser, server, size, failed)
    width = SIZES[size]["width"]
    wide: list[str] = []

    page.goto(f"{server.http}/")
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    page.click("#settings summary")
    page.click("#event-log summary")
    shot(page, "client", size)
    if not page.evaluate(FITS):
        wide.append(f"client page {page.evaluate('document.documentElement.scrollWidth')} px")

    sessions = f"{server.http}/admin/realtime/realtimesession/"
    wait_for(
        lambda: page.goto(sessions) and " ms" in page.inner_text("#result_list"),
        timeout=20,
        interval=0.5,
        what="the session listed with its p50",
    )
    shot(page, "session-list", size)
    if not page.evaluate(FITS):
        wide.append(f"session list {page.evaluate('document.documentElement.scrollWidth')} px")
    if size == "1280":  # a phone may scroll the list's table inside its box, as the admin does
        results = page.locator(".results")
        inner, shown = results.evaluate("box => [box.scrollWidth, box.clientWidth]")
        assert inner <= shown, f"the list scrolls sideways ({inner} px in {shown}): WHO is out of sight"

    page.goto(f"{server.http}/admin/realtime/realtimesession/{quote(recorded_session)}/change/")
    page.wait_for_selector("#transcript")
    shot(page, "session-detail", size)
    if not page.evaluate(FITS):
        wide.append(f"session detail {page.evaluate('document.documentElement.scrollWidth')} px")
    said = [box["width"] for box in (c.bounding_box() for c in page.locator("#transcript td.said").all()) if box]
    assert said and min(said) >= min(300, width * 0.6), f"'What was said' is squeezed to {min(said)} px"
    heading = page.locator("#transcript thead th")
    if heading.first.is_visible():  # the phone shows each turn as a card, without a header row
        boxes = [h.bounding_box() for h in heading.all()]
        assert not any(overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]), "headers overlap"
    table, chart = page.locator("#summary table").bounding_box(), page.locator("#chart svg").bounding_box()
    assert not overlap(table, chart), "the latency table runs under the chart"
    label = page.locator("#chart svg text").first.bounding_box()
    assert label["height"] >= 11, f"the chart's labels are {label['height']:.1f} px high"

    with ws_connect(server.ws) as ws:  # a live session: its row has an End session button
        held = ws_receive_until(ws, "session.created")["session"]["id"]
        page.goto(f"{server.http}/admin/realtime/node/")
        page.wait_for_selector(f"tr:has(td.session:has-text('{held}')) button.end-session")
        shot(page, "slot-board", size)
        if not page.evaluate(FITS):
            wide.append(f"slot board {page.evaluate('document.documentElement.scrollWidth')} px")
        # measured in one go: the board renders itself again every refresh
        within = page.evaluate(
            """(width) => [...document.querySelectorAll('button.end-session')].map((button) => {
                 const box = button.getBoundingClientRect(); return box.left >= 0 && box.right <= width; })""",
            width,
        )
        assert within and all(within), "End session is off the screen"
    wait_all_free(server)
    assert wide == [], f"wider than the {width} px screen: {wide}"
    assert failed == []
    page.close()


def test_the_session_report_says_which_models_answered_and_counts_every_message(server, browser, recorded_session):
    failed: list[str] = []
    page = operator(browser, server, "1280", failed)
    page.goto(f"{server.http}/admin/realtime/realtimesession/")
    headers = [h.strip().lower() for h in page.locator("#result_list thead th").all_inner_texts() if h.strip()]
    assert "user messages" in headers and "turns" not in headers
    row = page.locator(f"#result_list tr:has(a[href*='/{quote(recorded_session)}/change/'])")
    assert row.locator("td.field-user_messages").inner_text() == "7"  # the cancelled request is a message too

    page.goto(f"{server.http}/admin/realtime/realtimesession/{quote(recorded_session)}/change/")
    facts = page.inner_text("#facts")
    assert "FAKE loopback stages" in facts and "the client asked for gpt-realtime" in facts
    assert "7 from the user (3 spoken) · 7 answers" in facts
    cancelled = page.locator("#transcript tr.assistant").last
    assert "(cancelled before it said anything)" in cancelled.inner_text()
    assert "(nothing transcribed)" not in page.inner_text("#transcript")
    assert failed == []
    page.close()


def test_the_slot_board_says_full_when_no_unit_is_free_as_readyz_does(server, browser):
    failed: list[str] = []
    page = operator(browser, server, "1280", failed)
    page.goto(f"{server.http}/admin/realtime/node/")
    page.wait_for_selector(".node h2:has-text('ready')")
    holders = [ws_connect(server.ws) for _ in range(2)]
    try:
        for ws in holders:
            ws_receive_until(ws, "session.created")
        assert server.get("/readyz")[0] == 503
        page.wait_for_selector(".node h2:has-text('full')")
        assert "0 free of 2" in page.inner_text(".node .meta")
    finally:
        for ws in holders:
            ws.close()
    page.wait_for_selector(".node h2:has-text('ready')")
    wait_all_free(server)
    assert failed == []
    page.close()


# --- the client page ------------------------------------------------------------------------


@pytest.fixture
def open_page(browser) -> Iterator[object]:
    """The client page in a fresh context of the module's Chromium (without a microphone), or of one whose
    microphone plays a WAV file; watched as conftest's pages are."""
    contexts, launched = [], []

    def opener(url: str, viewport: dict, microphone: Path | None = None) -> BrowserPage:
        chromium = browser
        if microphone is not None:
            fake = ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
            fake.append(f"--use-file-for-fake-audio-capture={microphone}%noloop")
            chromium = browser.browser_type.launch(executable_path=chromium_path(), args=BASE_ARGS + fake)
            launched.append(chromium)
        context = chromium.new_context(viewport=viewport)
        contexts.append(context)
        page = context.new_page()
        watched = BrowserPage(page)
        page.on("console", lambda m: m.type == "error" and watched.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
        page.on("response", lambda r: r.status >= 400 and watched.failed.append(f"{r.status} {r.url}"))
        page.goto(url)
        page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'", timeout=10000)
        return watched

    yield opener
    for context in contexts:
        context.close()
    for chromium in launched:
        chromium.close()


@pytest.mark.parametrize("size", SIZES)
def test_the_settings_show_the_server_defaults_before_connecting_and_apply_keeps_them(server, open_page, size):
    client = open_page(server.http + "/?transport=websocket", SIZES[size])
    page = client.page
    page.click("#settings summary")
    assert page.input_value("#instructions") == DEFAULT_INSTRUCTIONS
    assert page.input_value("#silence") == "500" and page.input_value("#turn-detection") == "server_vad"
    assert page.input_value("#voice") == "alloy"
    page.click("#settings-form button[type=submit]")  # Apply before Connect
    assert page.inner_text("#settings-status") == "The settings will be applied when you connect."
    page.click("#connect")
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 1", 15)
    assert page.input_value("#instructions") == DEFAULT_INSTRUCTIONS  # what the server echoed back
    shot(page, "client-settings-applied", size)
    page.click("#connect")  # Disconnect
    client.wait_for("window.s2sStats.state === 'disconnected'", 10)
    assert page.inner_text("#status").strip() == "Not connected" and page.is_hidden("#transport")
    assert client.errors == []
    wait_all_free(server)


@pytest.mark.parametrize(("transport", "size"), [("webrtc", "390"), ("websocket", "1280")])
def test_a_full_pool_is_waited_out_without_an_error_can_be_stopped_and_a_session_hangs_up_cleanly(
    server, open_page, transport, size
):
    holders = [ws_connect(server.ws) for _ in range(2)]
    query = "" if transport == "webrtc" else "?transport=websocket"
    try:
        for ws in holders:
            ws_receive_until(ws, "session.created")
        client = open_page(f"{server.http}/{query}", SIZES[size])
        page = client.page
        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'busy'", 15)
        assert page.is_visible("#stop-retry") and page.inner_text("#connect") == "Try again now"
        shot(page, "client-busy", size)
        assert page.evaluate(FITS), "the busy page scrolls sideways"
        page.click("#stop-retry")
        assert client.stats()["state"] == "disconnected" and page.is_hidden("#alert")
        retries = client.stats()["retries"]
        time.sleep(6.5)  # longer than the countdown: nothing is tried any more
        assert client.stats()["retries"] == retries and client.stats()["state"] == "disconnected"
        assert "Stopped trying" in page.inner_text("#notice")

        page.click("#connect")
        client.wait_for("window.s2sStats.state === 'busy'", 15)
        client.wait_for("window.s2sStats.retries >= 1", 15)  # it retried by itself, still full
    finally:
        for ws in holders:
            ws.close()
    client.wait_for("window.s2sStats.state === 'listening'", 30)
    assert client.stats()["transport"] == transport
    page.fill("#message", "a question after the wait")
    page.press("#message", "Enter")
    client.wait_for("window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'", 20)
    page.click("#connect")  # hang up
    client.wait_for("window.s2sStats.state === 'disconnected'", 10)
    wait_all_free(server)
    time.sleep(0.5)  # the hang-up's answer has come
    assert client.failed == [], client.failed  # no 429 while full, no 404 for the DELETE
    assert client.errors == []
    assert page.inner_text("#status").strip() == "Not connected"
    log = server.full_log()  # the server does not cry wolf either
    assert "Traceback" not in log and "Task was destroyed" not in log and "Exception in thread" not in log


def test_push_to_talk_says_turn_detection_is_off_and_gives_the_choice_back(server, open_page):
    client = open_page(server.http + "/?transport=websocket", SIZES["1280"])
    page = client.page
    page.click("#settings summary")
    page.select_option("#turn-detection", "semantic_vad")
    page.click("#connect")
    client.wait_for("window.s2sStats.state === 'listening'", 15)
    page.check("#ptt")
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 2", 10)
    select = page.locator("#turn-detection")
    assert select.is_disabled() and select.locator("option:checked").inner_text() == "None: push to talk"
    assert page.is_hidden("#silence") and page.is_hidden("#eagerness")
    page.uncheck("#ptt")
    client.wait_for("(window.s2sStats.events['session.updated'] || 0) >= 3", 10)
    assert select.is_enabled() and select.input_value() == "semantic_vad"
    page.click("#connect")
    assert client.errors == []
    wait_all_free(server)


# Where a logged event's name wraps: only after a "." or "_" (".../transcriptio|n.completed" is a defect).
BREAKS = """() => {
  const bad = [];
  for (const summary of document.querySelectorAll('#events .event summary')) {
    const walker = document.createTreeWalker(summary, NodeFilter.SHOW_TEXT, {
      acceptNode: (node) => node.parentElement.closest('.count') ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
    });
    let previous = null, top = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++) {
        const range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        const rect = range.getBoundingClientRect();
        if (rect.height) {  // a space at the end of a line has none
          if (top !== null && rect.top > top + 2 && !'._ '.includes(previous)) bad.push(summary.textContent);
          top = rect.top;
        }
        previous = node.data[i];
      }
    }
  }
  return bad;
}"""


@pytest.mark.parametrize("size", SIZES)
def test_event_names_wrap_only_between_words_in_the_event_log(server, open_page, size, tmp_path):
    wav = tmp_path / "question.wav"
    write_microphone_wav(wav, ["What is the capital of France?"], tail_s=3.0)
    client = open_page(server.http + "/?transport=websocket", SIZES[size], microphone=wav)
    page = client.page
    page.click("#event-log summary")
    page.click("#connect")
    longest = "conversation.item.input_audio_transcription.completed"  # wider than the log at both sizes
    client.wait_for(f"(window.s2sStats.events['{longest}'] || 0) >= 1", 30)
    client.wait_for("window.s2sStats.state === 'listening' && window.s2sStats.playedSamples > 0", 30)
    assert page.locator(f"#events li[data-type='{longest}']").count() >= 1
    shot(page, "client-event-log", size)
    assert page.evaluate(BREAKS) == []
    page.click("#connect")
    assert client.errors == []
    wait_all_free(server)
