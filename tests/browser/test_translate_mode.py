"""The page's Translate mode (issue 55) in headless Chromium: the mode switch, the target languages the server
offers, a translation session over WebRTC and over the WebSocket with its two live transcripts and its speech
played, a refused target and a full pool said in an alert, Stop giving the unit back, and choosing Translate
ending the agent's session. The loopback profile here (its FAKE translator says how long each phrase was, in
English "audio of", its source transcript "audio de"); Spanish speech translated by the real models is
``test_translate_mode_real.py``."""

from __future__ import annotations

import pytest

from pipelines.translation import target_languages
from tests.audit.clients import ws_connect, ws_receive_until
from tests.browser.conftest import write_microphone_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer

pytestmark = pytest.mark.browser

TRANSLATED = "window.s2sTranslation.translation.length > 0 && window.s2sTranslation.playedSamples > 0"


def translate_mode(client, target: str = "en") -> None:
    page = client.page
    assert not page.is_visible("#translate") and page.is_visible("#connect")  # the page opens on the agent
    page.get_by_role("radio", name="Translate").check()
    assert page.is_visible("#translate") and not page.is_visible("#connect")
    page.get_by_label("Target language").select_option(target)


def all_free(server) -> None:
    wait_for(lambda: server.get("/readyz")[0] == 200, timeout=20, what="every unit free again")


@pytest.mark.parametrize("transport", ["webrtc", "websocket"])
def test_translate_mode_shows_source_and_translation_plays_it_and_stop_frees_the_unit(
    loopback_server, open_page, tmp_path, transport
):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["The cat is in the house."], tail_s=4.0)
    client = open_page(f"{loopback_server.http}/?transport={transport}", microphone=wav)
    page = client.page
    page.click("#connect")  # the agent's session first: choosing Translate ends it
    client.wait_for("window.s2sStats.state === 'listening'", 20)
    offered = page.eval_on_selector_all("#target-language option", "options => options.map(o => o.value)")
    assert offered == list(target_languages()) and offered[0] == "en", offered
    translate_mode(client)
    client.wait_for("window.s2sStats.state === 'disconnected'", 10)
    all_free(loopback_server)
    page.click("#translate-start")
    client.wait_for(TRANSLATED, 30)
    stats = page.evaluate("window.s2sTranslation")
    assert stats["transport"] == transport and stats["language"] == "en", stats
    assert page.inner_text("#translation-text").startswith("audio of "), stats
    assert page.inner_text("#source-text").startswith("audio de "), stats
    assert page.inner_text("#translate-status").startswith("Translating into English"), stats
    assert page.get_by_role("heading", name="Source").is_visible()
    assert page.get_by_role("heading", name="Translation").is_visible()
    assert loopback_server.get("/readyz")[0] == 200  # one unit of two taken: still ready

    page.click("#translate-start")  # Stop translating
    client.wait_for("window.s2sTranslation.state === 'off'", 10)
    assert page.inner_text("#translate-start") == "Start translating"
    all_free(loopback_server)
    assert not stats["errors"] and client.errors == [], (stats, client.errors)


def test_a_target_the_server_refuses_is_said_politely_and_the_session_goes_on(loopback_server, open_page, tmp_path):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["Hello."], tail_s=2.0)
    client = open_page(f"{loopback_server.http}/?transport=webrtc", microphone=wav)
    page = client.page
    translate_mode(client)
    page.click("#translate-start")
    client.wait_for("window.s2sTranslation.state === 'translating'", 20)
    # a language no voice here speaks, as a stale page or a hand-edited one would ask for it
    page.evaluate("""() => { const o = document.createElement('option'); o.value = 'de'; o.textContent = 'German';
                     document.getElementById('target-language').append(o); }""")
    page.get_by_label("Target language").select_option("de")
    alert = page.get_by_role("alert")
    alert.wait_for(state="visible", timeout=10000)
    text = alert.inner_text()
    assert text.startswith("That target language is not available:") and "en" in text, text
    assert page.input_value("#target-language") == "en"  # back on the language the session still runs with
    assert page.evaluate("window.s2sTranslation.state") == "translating"
    assert page.evaluate("window.s2sTranslation.sent['session.update']") == 1
    page.get_by_role("radio", name="Talk to the agent").check()  # leaving the mode ends the translation
    client.wait_for("window.s2sTranslation.state === 'off'", 10)
    assert page.is_visible("#connect") and not page.is_visible("#translate")
    all_free(loopback_server)


PASSWORD = "browser-test-password-1"


@pytest.fixture
def auth_server(tmp_path):
    server = LiveServer(tmp_path, env={"S2S_AUTH_REQUIRED": "1", "DJANGO_SUPERUSER_PASSWORD": PASSWORD})
    server.start(ready_timeout=120)
    server.manage("createsuperuser", "--noinput", "--username", "staff", "--email", "staff@example.com")
    yield server
    server.stop()


def test_with_authentication_on_translate_mode_uses_a_secret_minted_for_a_translation(auth_server, open_page, tmp_path):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["The cat is in the house."], tail_s=4.0)
    client = open_page(auth_server.http + "/", microphone=wav)
    page = client.page
    translate_mode(client)
    page.click("#translate-start")  # not signed in: nothing opened, the page says what to do
    assert "sign in" in page.get_by_role("alert").inner_text()
    assert page.evaluate("window.s2sTranslation.clientSecret") is None

    page.click("#sign-in a")
    page.fill("#id_username", "staff")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(auth_server.http + "/", timeout=10000)
    page.wait_for_function("() => document.getElementById('app').dataset.ready === 'true'", timeout=10000)
    asked: list[str] = []
    page.on("request", lambda request: request.method == "POST" and asked.append(request.url))
    translate_mode(client)
    page.click("#translate-start")
    client.wait_for(TRANSLATED, 30)
    assert page.evaluate("window.s2sTranslation.clientSecret") == "used"
    assert auth_server.http + "/v1/realtime/translations/client_secrets" in asked, asked
    assert auth_server.http + "/v1/realtime/client_secrets" not in asked, asked  # the agent's secrets: not here
    page.click("#translate-start")
    client.wait_for("window.s2sTranslation.state === 'off'", 10)
    # Django's admin login page has no favicon link: Chromium's 404 for /favicon.ico there is not this page's.
    assert [e for e in client.errors if not e.endswith(f"on {auth_server.http}/admin/login/?next=/)")] == []


def test_a_full_pool_is_said_in_an_alert_and_nothing_is_offered(loopback_server, open_page, tmp_path):
    wav = tmp_path / "speech.wav"
    write_microphone_wav(wav, ["Hello."], tail_s=2.0)
    client = open_page(f"{loopback_server.http}/?transport=webrtc", microphone=wav)
    page = client.page
    translate_mode(client)
    holders = [ws_connect(loopback_server.ws) for _ in range(2)]  # both units taken
    try:
        for ws in holders:
            ws_receive_until(ws, "session.created")
        page.click("#translate-start")
        client.wait_for("window.s2sTranslation.state === 'error'", 10)
        assert page.get_by_role("alert").inner_text().startswith("Every unit of this server is busy"), client.errors
        assert page.inner_text("#translate-start") == "Start translating"
    finally:
        for ws in holders:
            ws.close()
    all_free(loopback_server)
    assert client.errors == [] and client.failed == []  # asked /v1/realtime/slots first: no refused offer
