"""axe-core on every page a person meets: the client page (before Connect, connected with a conversation, waiting
out a full pool; in Translate mode, translating and with a refused target) and the admin's pages (the session list,
a session's report, the slot board with a live session, the API keys and client secrets, the prompts, the refusals;
at a laptop's and a 360 px phone's width), none with a violation of serious or critical
impact, nor the minor ones issue 50 found (``aria-allowed-role``, ``empty-table-header``). One live loopback server
(FAKE stages) for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.admin.utils import quote

from tests.audit.clients import ws_connect, ws_receive_until, ws_text_turn
from tests.browser.axe import violations, with_axe
from tests.browser.conftest import BASE_ARGS, chromium_path, write_microphone_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

PASSWORD = "axe-pw"
ALSO_MINOR = ("aria-allowed-role", "empty-table-header")  # found once (issue 50): kept out too


def problems(page, where: str) -> list[str]:
    found = violations(page)
    return [
        f"{where}: {v['id']} ({v['impact']}) {v['help']} at {[n['target'] for n in v['nodes']]}"
        for v in found
        if v["impact"] in ("serious", "critical") or v["id"] in ALSO_MINOR
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = LiveServer(
        tmp_path_factory.mktemp("axe"),
        {
            "DJANGO_SUPERUSER_USERNAME": "admin",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
            "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
            "S2S_SLOT_BOARD_REFRESH_S": "0.5",
            "S2S_HEARTBEAT_S": "0.5",
        },
    ).start(ready_timeout=120)
    live.manage("createsuperuser", "--noinput")
    live.manage("create_api_key", "ops")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser(server) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=BASE_ARGS)
        yield chromium
        chromium.close()


def all_free(server: LiveServer) -> None:
    wait_for(lambda: server.get("/readyz")[0] == 200, timeout=20, what="every unit free again")


def new_page(browser, width: int = 1280):
    context = with_axe(browser.new_context(viewport={"width": width, "height": 800}))
    page = context.new_page()
    page.set_default_timeout(15000)
    return page


def signed_in(browser, server: LiveServer, width: int = 1280):
    page = new_page(browser, width)
    page.goto(f"{server.http}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


@pytest.mark.parametrize("width", [1280, 390])
def test_the_client_page_has_no_serious_axe_violation_before_during_and_while_the_pool_is_full(server, browser, width):
    page = new_page(browser, width)
    page.goto(f"{server.http}/?transport=websocket")
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'")
    page.click("#settings summary")
    page.click("#event-log summary")
    found = problems(page, "not connected")

    page.click("#connect")
    page.wait_for_function("() => window.s2sStats.state === 'listening'")
    page.fill("#message", "Hello there")
    page.press("#message", "Enter")
    page.wait_for_function("() => window.s2sStats.playedSamples > 0 && window.s2sStats.state === 'listening'")
    page.wait_for_selector("#chat li.assistant")
    found += problems(page, "connected")
    page.click("#connect")
    page.wait_for_function("() => window.s2sStats.state === 'disconnected'")
    all_free(server)

    holders = [ws_connect(server.ws) for _ in range(2)]
    try:
        for ws in holders:
            ws_receive_until(ws, "session.created")
        page.click("#connect")
        page.wait_for_function("() => window.s2sStats.state === 'busy'")
        found += problems(page, "pool full")
    finally:
        for ws in holders:
            ws.close()
    page.wait_for_function("() => window.s2sStats.state === 'listening'")  # a new session, under a divider
    page.wait_for_selector("#chat li.divider")
    found += problems(page, "second session")
    page.click("#connect")
    page.wait_for_function("() => window.s2sStats.state === 'disconnected'")
    all_free(server)
    assert not found, "\n".join(found)
    page.context.close()


@pytest.mark.parametrize("width", [1280, 360])
def test_the_admin_pages_have_no_serious_axe_violation(server, browser, width):
    with ws_connect(server.ws) as ws:
        done = ws_receive_until(ws, "session.created")["session"]["id"]
        ws_text_turn(ws, "What is the capital of France?")
    all_free(server)
    page = signed_in(browser, server, width)
    found = problems(page, "admin index")
    for name, path in (
        ("session list", "/admin/realtime/realtimesession/"),
        ("session report", f"/admin/realtime/realtimesession/{quote(done)}/change/"),
        ("api keys", "/admin/realtime/apikey/"),
        ("new api key", "/admin/realtime/apikey/add/"),
        ("api key", "/admin/realtime/apikey/1/change/"),
        ("client secrets", "/admin/realtime/clientsecret/"),
        ("prompts", "/admin/realtime/prompt/"),
        ("new prompt", "/admin/realtime/prompt/add/"),
        ("refusals", "/admin/realtime/refusalcount/"),
    ):
        page.goto(server.http + path)
        found += problems(page, name)

    with ws_connect(server.ws) as ws:
        live = ws_receive_until(ws, "session.created")["session"]["id"]
        page.goto(f"{server.http}/admin/realtime/node/")
        page.wait_for_selector(f"tr:has(td.session:has-text('{live}')) button.end-session")
        found += problems(page, "slot board")
        page.goto(f"{server.http}/admin/realtime/realtimesession/{quote(live)}/change/")
        found += problems(page, "live session")
    all_free(server)
    assert not found, "\n".join(found)
    page.context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_translate_mode_has_no_serious_axe_violation_before_while_translating_and_with_a_refused_target(
    server, browser, tmp_path, width
):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["The cat is in the house."], tail_s=4.0)
    microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
    ]
    # a browser of its own, from the module's Playwright: this one's microphone is a WAV file
    chromium = browser.browser_type.launch(executable_path=chromium_path(), args=BASE_ARGS + microphone)
    try:
        page = with_axe(chromium.new_context(viewport={"width": width, "height": 800})).new_page()
        page.set_default_timeout(15000)
        page.goto(server.http + "/")
        page.wait_for_function("() => document.getElementById('translate').dataset.ready === 'true'")
        page.get_by_role("radio", name="Translate").check()
        found = problems(page, "translate mode")
        page.click("#translate-start")
        page.wait_for_function("() => window.s2sTranslation.translation.length > 0")
        found += problems(page, "translating")
        page.evaluate("""() => { const o = document.createElement('option'); o.value = 'de'; o.textContent = 'German';
                         document.getElementById('target-language').append(o); }""")
        page.select_option("#target-language", "de")
        page.get_by_role("alert").wait_for(state="visible")
        found += problems(page, "a refused target")
        page.click("#translate-start")
        page.wait_for_function("() => window.s2sTranslation.state === 'off'")
    finally:
        chromium.close()
    all_free(server)
    assert not found, "\n".join(found)
