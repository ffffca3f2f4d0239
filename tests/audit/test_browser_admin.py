"""An operator in a real browser (headless Chromium): the session list, a transcript, and the live slot board."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.audit.clients import wait_for, ws_connect, ws_receive_until, ws_text_turn
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PASSWORD = "audit-browser-pw"


@pytest.fixture
def server(tmp_path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path, {"DJANGO_SUPERUSER_USERNAME": "admin", "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
                                   "DJANGO_SUPERUSER_EMAIL": "admin@example.com", "S2S_SLOT_BOARD_REFRESH_S": "0.5",
                                   "S2S_HEARTBEAT_S": "0.5"}).start(ready_timeout=120)
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


def test_an_operator_sees_sessions_a_transcript_and_the_live_slot_board(server: LiveServer, browser):
    with ws_connect(server.ws) as ws:
        finished = ws_receive_until(ws, "session.created")["session"]["id"]
        ws_text_turn(ws, "book a table for two")
    live = ws_connect(server.ws)
    try:
        held = ws_receive_until(live, "session.created")["session"]["id"]
        page = browser.new_page()
        page.set_default_timeout(15000)
        page.goto(f"{server.http}/admin/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")

        # The session list: both sessions, the finished one closed by the client, the other still active.
        def listed() -> bool:
            page.goto(f"{server.http}/admin/realtime/realtimesession/")
            text = page.inner_text("#result_list")
            return finished in text and held in text and "Client closed" in text and "Still active" in text

        wait_for(listed, timeout=15, interval=0.5, what="both sessions listed")

        # A session's transcript, in order.
        page.click(f"#result_list a:text-is('{finished}')")
        transcript = page.inner_text("#items-group")
        assert transcript.index("book a table for two") < transcript.index("You said: book a table for two.")
        assert "completed" in page.inner_text("#responses-group")

        # The slot board: the held session's unit is busy, then idle once the client leaves (live refresh).
        page.goto(f"{server.http}/admin/realtime/node/")
        busy = page.wait_for_selector(f"tr:has(.state-busy) td.session:has-text('{held}')")
        assert busy is not None
        assert page.locator("td.state .state-idle").count() == 1
        live.close()
        page.wait_for_function("document.querySelectorAll('td.state .state-busy').length === 0")
        assert page.locator("td.state .state-idle").count() == 2
    finally:
        live.close()
