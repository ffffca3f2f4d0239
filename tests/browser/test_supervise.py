"""Supervising a live session from the admin (issue 51), with real parts: the REAL default pipeline, a caller on a
raw WebSocket speaking Piper's speech, and the supervisor in headless Chromium with a WAV file as microphone.

A staff user with "supervise live sessions" reaches the session from the slot board, listens (the caller's words
appear on the page, both sides' audio is played), whispers (listed on the page, never in a caller's event), takes
over (the caller receives the supervisor's voice as output audio) and hands back (the agent answers again); the
session's page then lists who did what. A staff user without the permission sees the page as before, and their
supervise socket gets what an unknown session id gets."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.admin.utils import quote

from tests.browser.axe import serious, with_axe
from tests.browser.conftest import ARTIFACTS, BASE_ARGS, chromium_path, write_microphone_wav
from tests.support.polling import wait_for
from tests.support.server import LiveServer
from tests.support.speech import pcm16_chunks, silence, spelled_alike, spoken

pytestmark = [pytest.mark.browser, pytest.mark.real_models]

PASSWORD = "supervise-pw"
QUESTION = "What colour is the sky on a clear day?"
AGAIN = "And what colour is the grass?"
NOTE = "Offer the caller a callback tomorrow morning."
SUPERVISOR_WORDS = "Hello, this is the supervisor speaking. I will take it from here."
TAIL_S = 2.0  # the microphone's silence after the words
USERS = """
from django.contrib.auth.models import Permission, User
def make(name, *codenames):
    user = User.objects.create_user(name, password={password!r}, is_staff=True)
    found = Permission.objects.filter(content_type__app_label="realtime", codename__in=codenames)
    assert found.count() == len(codenames), sorted(found.values_list("codename", flat=True))
    user.user_permissions.set(found)
make("supervisor", "view_realtimesession", "view_node", "supervise_live_session")
make("auditor", "view_realtimesession", "view_node", "end_live_session")
"""
PROBE = """async (url) => await new Promise((resolve) => {
  const got = [];
  const socket = new WebSocket(url, ["realtime"]);
  socket.onmessage = (message) => got.push(message.data);
  socket.onclose = (close) => resolve({code: close.code, reason: close.reason, got, open: false});
  setTimeout(() => {
    resolve({code: null, reason: "", got, open: socket.readyState === WebSocket.OPEN});
    socket.close();
  }, 5000);
})"""


class Caller:
    """A stock Realtime client on a raw WebSocket: speaks at real-time pace and keeps every event it receives."""

    def __init__(self, url: str, key: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(
            url, subprotocols=["realtime"], additional_headers={"Authorization": f"Bearer {key}"}, max_size=None
        )
        self.events: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        created = self.wait(lambda e: e["type"] == "session.created", 30, "session.created")
        self.session_id: str = created["session"]["id"]

    def _read(self) -> None:
        try:
            for message in self.ws:
                self.events.append(json.loads(message))
        except Exception:  # the socket closed: the events so far stay
            return

    def wait(self, match: Any, timeout: float, what: str, since: int = 0) -> dict[str, Any]:
        return wait_for(lambda: next((e for e in self.events[since:] if match(e)), None), timeout, what=what)

    def say(self, text: str) -> None:
        for chunk in pcm16_chunks(np.concatenate([spoken(text), silence(1.5)])):
            self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            time.sleep(0.02)

    def audio_s(self, since: int) -> tuple[float, float]:
        """Seconds of output audio received since event ``since``, and its RMS level (0..1)."""
        data = b"".join(
            base64.b64decode(e["delta"]) for e in self.events[since:] if e["type"] == "response.output_audio.delta"
        )
        samples = np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768
        return len(samples) / 24000, float(np.sqrt(np.mean(samples**2))) if len(samples) else 0.0

    def close(self) -> None:
        self.ws.close()
        self.reader.join(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = LiveServer(
        tmp_path_factory.mktemp("supervise"),
        {
            "S2S_PIPELINE": "real",
            "S2S_POOL_SIZE": "1",
            "S2S_AUTH_REQUIRED": "1",  # with authentication off every session is open to anyone, supervisors too
            "S2S_SLOT_BOARD_REFRESH_S": "0.5",
            "S2S_HEARTBEAT_S": "0.5",
        },
    ).start(ready_timeout=300)  # loads and warms the real models
    made = live.manage("shell", "-c", USERS.format(password=PASSWORD))
    assert made.returncode == 0, made.stderr  # names the missing permission, if it is
    yield live
    live.stop()


@pytest.fixture(scope="module")
def key(server) -> str:
    """The caller's API key (authentication is on)."""
    return server.manage("create_api_key", "caller").stdout.strip()


@pytest.fixture(scope="module")
def microphone_s(tmp_path_factory) -> tuple[Path, float]:
    """A WAV of SUPERVISOR_WORDS, and how many seconds it lasts."""
    wav = tmp_path_factory.mktemp("microphone") / "supervisor.wav"
    return wav, write_microphone_wav(wav, [SUPERVISOR_WORDS], lead_s=0.5, tail_s=TAIL_S)


@pytest.fixture(scope="module")
def browser(server, microphone_s) -> Iterator[Any]:
    """Chromium whose microphone says SUPERVISOR_WORDS once, from when a page first opens it."""
    from playwright.sync_api import sync_playwright

    wav, _ = microphone_s
    microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
    ]
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=chromium_path(), args=BASE_ARGS + microphone)
        yield chromium
        chromium.close()


def signed_in(browser, server: LiveServer, name: str, failed: list[str]) -> Any:
    page = with_axe(browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
    page.set_default_timeout(20000)
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.on("pageerror", lambda error: failed.append(f"page error: {error}"))
    page.goto(f"{server.http}/admin/login/")
    page.fill("#id_username", name)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def state(page) -> str:
    return page.inner_text("#supervise-state")


def test_a_supervisor_hears_the_caller_whispers_takes_over_and_hands_back(server, key, browser, microphone_s):
    failed: list[str] = []
    page = signed_in(browser, server, "supervisor", failed)
    caller = Caller(server.ws, key)
    try:
        page.goto(f"{server.http}/admin/realtime/node/")  # reached from the slot board
        row = page.locator(f"tr:has(td.session:has-text('{caller.session_id}'))")
        row.get_by_role("link", name="Supervise", exact=True).click()
        page.wait_for_selector("#supervise")
        assert serious(page) == []
        page.get_by_role("button", name="Listen", exact=True).click()
        page.wait_for_function("() => window.s2sSupervise.state === 'listening'")
        assert state(page).startswith("Listening")

        caller.say(QUESTION)  # heard and transcribed on the page; the agent's answer heard too
        answered = caller.wait(lambda e: e["type"] == "response.done", 90, "the agent's answer")
        page.wait_for_function("() => document.querySelector('#supervise-transcript p.agent span')?.textContent")
        heard = page.locator("#supervise-transcript p.caller").first.inner_text()
        assert heard.startswith("Caller: ") and spelled_alike(heard.removeprefix("Caller: "), QUESTION) >= 0.6, heard
        assert page.locator("#supervise-transcript p.agent").first.inner_text().startswith("Agent: ")
        played = page.evaluate("window.s2sSupervise")
        assert played["callerMs"] > 1500 and played["agentMs"] > 300, played  # both sides were played
        assert answered["response"]["status"] == "completed", answered

        whisper = page.get_by_label("Whisper", exact=True)
        whisper.fill(NOTE)
        whisper.press("Enter")
        page.wait_for_selector(f"#supervise-whispers li:has-text('{NOTE}')")
        assert whisper.input_value() == ""
        assert serious(page) == []  # with both sides' words and a note on the page

        mark = len(caller.events)
        page.get_by_role("button", name="Take over").click()
        page.wait_for_function("() => window.s2sSupervise.state === 'taken_over'")
        assert re.fullmatch(r"Taken over by .*supervisor.*", state(page)), state(page)
        seconds, level = wait_for(
            lambda: (got := caller.audio_s(mark))[0] > 2.0 and got, 30, what="the supervisor's voice at the caller"
        )
        assert level > 0.01, f"the caller received {seconds:.1f} s of silence"
        said_ms = (microphone_s[1] - TAIL_S + 0.5) * 1000  # the whole phrase and half a second after it
        page.wait_for_function(f"() => window.s2sSupervise.sentMs > {said_ms}")

        page.get_by_role("button", name="Hand back").click()
        page.wait_for_function("() => window.s2sSupervise.state === 'handed_back'")
        assert state(page).startswith("Handed back")
        words = page.locator("#supervise-transcript p.supervisor").all_inner_texts()  # as the agent now knows them
        assert spelled_alike(" ".join(words).replace("Supervisor: ", ""), SUPERVISOR_WORDS) >= 0.6, words
        mark = len(caller.events)
        caller.say(AGAIN)  # the agent answers again
        again = caller.wait(lambda e: e["type"] == "response.done", 90, "an answer after hand-back", since=mark)
        assert again["response"]["status"] == "completed", again
        assert caller.audio_s(mark)[0] > 0.5
        assert NOTE not in json.dumps(caller.events), "the whisper reached the caller"
        assert page.is_hidden("#supervise-error"), page.inner_text("#supervise-error")  # nothing went wrong
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "admin-supervise.png"), full_page=True)
        page.close()  # leaving the page ends listening; the call goes on

        record = signed_in(browser, server, "supervisor", failed)  # the session's page lists who did what

        def listened() -> list[str] | None:
            record.goto(f"{server.http}/admin/realtime/realtimesession/{quote(caller.session_id)}/change/")
            rows = record.locator("#supervision tbody tr").all_inner_texts()
            over = any("listened" in row and not row.rstrip().endswith("still going on") for row in rows)
            return rows if over else None

        rows = wait_for(listened, 20, interval=1, what="the listen's end in the records")
        assert "Still active" in record.inner_text("#facts")  # the listen ended with the page, not with the call
        for kind in ("listened", "whispered", "took over", "handed back"):  # realtime.supervision_models
            assert any(kind in row.lower() and "supervisor" in row for row in rows), (kind, rows)
        assert any(NOTE in row for row in rows), rows
        record.close()
    finally:
        if not page.is_closed():
            page.close()
        caller.close()
    assert failed == []


def test_staff_without_the_permission_see_no_controls_and_their_socket_gets_what_an_unknown_id_gets(
    server, key, browser
):
    failed: list[str] = []
    page = signed_in(browser, server, "auditor", failed)
    caller = Caller(server.ws, key)
    try:
        page.goto(f"{server.http}/admin/realtime/node/")
        page.wait_for_selector(f"td.session:has-text('{caller.session_id}')")
        assert page.get_by_role("link", name="Supervise", exact=True).count() == 0
        page.goto(f"{server.http}/admin/realtime/realtimesession/")
        assert page.get_by_role("link", name="Supervise", exact=True).count() == 0
        page.goto(f"{server.http}/admin/realtime/realtimesession/{quote(caller.session_id)}/change/")
        assert page.is_visible("#live") and page.is_visible("#end-session")  # the page as before
        assert page.locator("#supervise").count() == 0
        assert page.get_by_role("button", name="Listen", exact=True).count() == 0

        unknown = caller.session_id[:-4] + "zzzz"
        answers = {}
        for name, session_id in (("live", caller.session_id), ("unknown", unknown)):
            url = f"{server.ws}?call_id={session_id}&mode=supervise"
            answer = page.evaluate(PROBE, url)
            events = [json.loads(text.replace(session_id, "ID")) for text in answer["got"]]
            answer["got"] = [{k: v for k, v in event.items() if k != "event_id"} for event in events]  # each new
            answers[name] = answer
        assert answers["live"] == answers["unknown"], answers
        assert answers["live"]["code"] is not None, answers  # closed, as for a session that does not exist
    finally:
        page.close()
        caller.close()
    assert failed == []
