"""An operator in a real browser (headless Chromium): the session list, a session's report with its recordings,
and the live slot board, against a live loopback server. Screenshots go to artifacts/.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from django.contrib.admin.utils import quote

from tests.audit.clients import wait_for, ws_connect, ws_receive_until, ws_text_turn
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spoken

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
PASSWORD = "audit-browser-pw"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
DESKTOP = {"width": 1280, "height": 900}


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"admin-{name}.png"), full_page=True)


@pytest.fixture
def server(tmp_path) -> Iterator[LiveServer]:
    server = LiveServer(
        tmp_path,
        {
            "DJANGO_SUPERUSER_USERNAME": "admin",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
            "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
            "S2S_SLOT_BOARD_REFRESH_S": "0.5",
            "S2S_HEARTBEAT_S": "0.5",
            "S2S_RECORD_AUDIO": "1",
            "S2S_MEDIA_ROOT": str(tmp_path / "media"),
        },
    ).start(ready_timeout=120)
    server.manage("createsuperuser", "--noinput")
    yield server
    server.stop()


@pytest.fixture
def browser() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def signed_in(browser, server: LiveServer, failed: list[str]):
    """A 1280 px page signed in as the superuser; every HTTP answer >= 400 is noted in ``failed``."""
    page = browser.new_page(viewport=DESKTOP)
    page.set_default_timeout(15000)
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto(f"{server.http}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def spoken_turns(server: LiveServer, phrases: list[str]) -> str:
    """One session with a spoken turn per phrase (server VAD); returns its id once it has ended."""
    with ws_connect(server.ws) as ws:
        session_id = ws_receive_until(ws, "session.created")["session"]["id"]
        for phrase in phrases:
            speech = np.concatenate([silence(0.4), spoken(phrase), silence(1.2)])
            for chunk in pcm16_chunks(speech, chunk_ms=40):
                ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            ws_receive_until(ws, "response.done", timeout=30)
    return session_id


def test_the_session_list_and_a_session_report_with_its_recordings(server: LiveServer, browser):
    session_id = spoken_turns(server, ["What time does the museum open?", "And how much is a ticket?"])
    failed: list[str] = []
    page = signed_in(browser, server, failed)

    def summarized() -> bool:
        page.goto(f"{server.http}/admin/realtime/realtimesession/")
        listed = page.locator(f"#result_list a[href*='/{quote(session_id)}/change/']").count() == 1
        return listed and " ms" in page.inner_text("#result_list tbody")

    wait_for(summarized, timeout=20, interval=0.5, what="the session listed with its p50")
    headers = [h.strip().lower() for h in page.locator("#result_list thead th").all_inner_texts() if h.strip()]
    assert headers == [
        "started",
        "duration",
        "user messages",
        "speech end to audio, p50",
        "end reason",
        "transport",
        "call",  # a phone call's direction and number; "–" for this WebSocket session
        "who",
    ]
    row = page.locator("#result_list tbody tr").first.inner_text()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row) and "Client closed" in row
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "session-list-1280")

    page.locator(f"#result_list a[href*='/{quote(session_id)}/change/']").click()
    page.wait_for_url(re.compile(f"/{quote(session_id)}/change/"))
    shot(page, "session-detail-1280")
    page.wait_for_selector("#transcript")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scroll at 1280
    facts = page.inner_text("#facts")
    assert re.search(r"Started\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", facts)
    summary = page.inner_text("#summary")
    assert re.search(r"End of speech to first audio\t2\t\d+\t", summary) and "latency_s" not in summary
    assert page.locator("#chart svg rect.bar").count() == 2
    answers = page.locator("#transcript tr.assistant")
    assert answers.count() == 2
    first_answer = answers.first.inner_text()
    assert "End of speech to first audio:" in first_answer and "Speech to text:" in first_answer
    assert re.search(r"LM first token: \d+ ms", first_answer) and re.search(r"\d\d:\d\d:\d\d", first_answer)

    players = page.locator("#transcript audio")
    assert players.count() == 4  # the user's and the assistant's audio of both turns
    durations = page.evaluate("""() => Promise.all([...document.querySelectorAll('#transcript audio')].map(a =>
        new Promise(done => { a.addEventListener('loadedmetadata', () => done(a.duration), {once: true});
                              a.addEventListener('error', () => done(-1), {once: true}); a.load(); })))""")
    assert all(d > 0.3 for d in durations), durations
    user_audio = page.locator("#transcript tr.user audio").first.get_attribute("src")
    assert page.request.get(f"{server.http}{user_audio}").headers["content-type"] == "audio/wav"
    shot(page, "session-detail-1280")
    assert failed == []


def test_the_slot_board_is_named_confirms_ending_and_the_user_is_told_an_administrator_ended_it(
    server: LiveServer, browser
):
    with ws_connect(server.ws) as ws:
        ws_receive_until(ws, "session.created")
        ws_text_turn(ws, "book a table for two")
    failed: list[str] = []
    page = signed_in(browser, server, failed)
    link = page.locator("a:text-is('Slot board')")
    assert link.count() == 1 and link.get_attribute("href") == "/admin/realtime/node/"
    shot(page, "index")

    user = browser.new_page(viewport={"width": 1280, "height": 800})
    user_errors: list[str] = []
    user.on("pageerror", lambda error: user_errors.append(str(error)))
    user.goto(f"{server.http}/")
    user.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    user.click("#connect")
    user.wait_for_function("() => window.s2sStats.state === 'listening'")
    held = user.evaluate("window.s2sStats.sessionId")

    link.click()
    page.wait_for_selector(f"tr:has(.state-busy) td.session:has-text('{held}')")
    assert page.is_hidden("#board-error")  # no empty red box
    box = page.locator("#board-error").bounding_box()
    assert box is None
    shot(page, "slot-board")

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("button.end-session")
    assert asked and held in asked[0]
    page.wait_for_timeout(1500)
    assert user.evaluate("window.s2sStats.state") == "listening"  # dismissed: the session goes on

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button.end-session")
    user.wait_for_function("() => window.s2sStats.state === 'error'")
    assert user.inner_text("#alert") == "An administrator ended this session."
    assert user.inner_text("#status-text") == "Ended by an administrator"
    shot(user, "client-ended-by-admin")
    page.wait_for_function("() => document.querySelectorAll('td.state .state-busy').length === 0")
    for path in ("/admin/", "/admin/realtime/realtimesession/", "/admin/realtime/node/"):
        page.goto(f"{server.http}{path}")
        icon = page.locator("link[rel=icon]").get_attribute("href")
        assert page.request.get(f"{server.http}{icon}").status == 200, path
    assert failed == [] and user_errors == []  # nothing on these pages answered 404
