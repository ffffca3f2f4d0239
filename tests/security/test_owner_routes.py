"""Every way into a live session asks the one owner rule (realtime.access.owner), and the routes are all known.

The static half walks Django's URL resolver and the WebSocket routes: a route missing from docs/security.md's
table, or one with a session's or call's id that does not go through ``owner.route``, fails. The live half
plays the attacker against a real server with authentication on: key B against key A's WebRTC call and against a
phone call nobody's key opened, on every owner-rule route the resolver lists, expecting exactly what an id that
was never issued gets.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import websockets
from django.urls import URLPattern, URLResolver, get_resolver

from realtime.transports.routing import websocket_urlpatterns
from tests.sip.conftest import sip_listener_env
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port
from tests.support.sip_phone import SipPhone
from tests.support.webrtc_client import WebRTCClient, post

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
ID_PARAMETER = re.compile(r"<(?:\w+:)?(\w*id)>")
UNKNOWN_CALL = "rtc_0000000000000000000000"
UNKNOWN_SESSION = "sess_0000000000000000000000"

# How the live half reaches each owner-rule route: (method, body). A route that reaches a session and has no
# probe here fails test_every_owner_rule_route_is_probed: the next route gets its attacker test by default.
PROBES = {
    "call": ("DELETE", b""),
    "call_hangup": ("POST", b""),
    "call_accept": ("POST", b"{}"),
    "call_reject": ("POST", b"{}"),
    "call_refer": ("POST", json.dumps({"target_uri": "sip:mallory@127.0.0.1"}).encode()),
    "session_timings": ("GET", None),
}
# The other methods of a route whose view answers more than one (``GET /v1/realtime/calls/{id}``: an outbound call's
# record; ``POST``: a hang-up, as ``DELETE``), probed alike.
OTHER_METHODS = {"call": ("GET", "POST")}


def probes() -> list[tuple[str, str | None]]:
    """(route name, method) of every probe; None: the route's method in PROBES."""
    others = [(name, method) for name, methods in OTHER_METHODS.items() for method in methods]
    return [(name, None) for name in PROBES] + others


def http_routes() -> list[tuple[str, object, str]]:
    """(route, view, name) of every URL pattern; an include (the admin) is one route of its own."""
    found = []
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            found.append((str(entry.pattern), None, "admin"))
        elif isinstance(entry, URLPattern):
            found.append((str(entry.pattern) or "/", entry.callback, entry.name or ""))
    return found


def documented_routes() -> set[str]:
    """The first column of the route table in docs/security.md ("Who may reach a session")."""
    section = SECURITY_DOC.read_text().split("## Who may reach a session", 1)[1].split("\n## ", 1)[0]
    return {match.group(1) for match in re.finditer(r"^\| `([^`]*)` \|", section, re.MULTILINE)}


def test_every_http_and_websocket_route_is_in_the_security_table():
    documented = documented_routes()
    routes = {route for route, _, _ in http_routes()} | {f"ws {entry.pattern}" for entry in websocket_urlpatterns}
    assert routes - documented == set(), "add these routes to docs/security.md's table of who may use them"
    assert documented - routes == set(), "docs/security.md names routes that no longer exist"


def test_every_route_with_a_session_or_call_id_goes_through_the_owner_rule():
    for route, view, _ in http_routes():
        if ID_PARAMETER.search(route):
            assert getattr(view, "owner_rule", False), f"{route}: decorate its view with realtime.access.owner.route"
    for entry in websocket_urlpatterns:
        consumer = getattr(entry.callback, "consumer_class", None)
        assert getattr(consumer, "owner_rule", False), f"ws {entry.pattern}: its consumer must follow the owner rule"


def test_every_owner_rule_route_is_probed():
    marked = {name for _, view, name in http_routes() if getattr(view, "owner_rule", False)}
    assert marked == set(PROBES), "give each owner-rule route a probe in PROBES (method, body)"


# --- the live half ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Authentication on, a SIP listener whose calls the default session answers, owned by the key "phones"."""
    sip_port = free_port()
    server = LiveServer(
        tmp_path_factory.mktemp("owners"),
        env={"S2S_AUTH_REQUIRED": "1", **sip_listener_env(sip_port), "S2S_SIP_OWNER_KEY": "phones"},
    )
    server.start()
    server.sip_port = sip_port  # type: ignore[attr-defined]
    keys = {name: server.manage("create_api_key", name).stdout.strip() for name in ("alice", "bob", "phones")}
    yield server, keys
    server.stop()


def request(server: LiveServer, name: str, call_or_session: str, token: str | None, method: str | None = None):
    """The probe of route ``name`` for an id, with a bearer token (``method``: another than its PROBES one, with no
    body): (status, the body with the id taken out)."""
    method, body = (method, None) if method else PROBES[name]
    path = {
        "call": f"/v1/realtime/calls/{call_or_session}",
        "call_hangup": f"/v1/realtime/calls/{call_or_session}/hangup",
        "call_accept": f"/v1/realtime/calls/{call_or_session}/accept",
        "call_reject": f"/v1/realtime/calls/{call_or_session}/reject",
        "call_refer": f"/v1/realtime/calls/{call_or_session}/refer",
        "session_timings": f"/v1/realtime/sessions/{call_or_session}/timings",
    }[name]
    answer = post(server.http + path, body or b"", "application/json" if body else "", token, method)
    text = answer.body.decode()
    if answer.status >= 400:  # the error, without the event id every answer draws anew
        text = json.dumps({key: value for key, value in json.loads(text).items() if key != "event_id"})
    return answer.status, text.replace(call_or_session, "ID")


async def follow(server: LiveServer, call_id: str, token: str, mode: str = "", headers: dict | None = None) -> dict:
    """The first event a ``?call_id=`` follower gets (``mode="supervise"``: a supervisor), and the close code (None:
    still open). ``headers`` instead of the token: a browser's (its cookie and Origin)."""
    url = f"{server.ws}?call_id={call_id}" + (f"&mode={mode}" if mode else "")
    headers = headers if headers is not None else {"Authorization": f"Bearer {token}"}
    async with websockets.connect(url, additional_headers=headers, open_timeout=10) as socket:
        first = json.loads(await asyncio.wait_for(socket.recv(), 10))
        try:
            await asyncio.wait_for(socket.recv(), 1.0)
        except websockets.ConnectionClosed as closed:
            return {**first, "close": closed.rcvd.code if closed.rcvd else None}
        except TimeoutError:
            pass
        return {**first, "close": None}


def without_id(event: dict, call_id: str) -> str:
    """The event as text, the call's id taken out (what tells the two apart, if anything does)."""
    return json.dumps({key: value for key, value in event.items() if key != "event_id"}).replace(call_id, "ID")


async def test_another_key_finds_no_trace_of_a_webrtc_call_on_any_route(live):
    server, keys = live
    call = WebRTCClient(server.http)
    try:
        assert (await call.connect(token=keys["alice"])).status == 201
        created = await call.events.until("session.created")
        call_id, session_id = call.location.rsplit("/", 1)[1], created["session"]["id"]
        for name, method in probes():
            target, unknown = (session_id, UNKNOWN_SESSION) if name == "session_timings" else (call_id, UNKNOWN_CALL)
            as_bob = await asyncio.to_thread(request, server, name, target, keys["bob"], method)
            assert as_bob == await asyncio.to_thread(request, server, name, unknown, keys["bob"], method), name
            assert as_bob[0] == 404, (name, method)
        stranger = await follow(server, call_id, keys["bob"])
        never_issued = await follow(server, UNKNOWN_CALL, keys["bob"])
        assert stranger["type"] == "error" and stranger["close"] == 1008
        assert without_id(stranger, call_id) == without_id(never_issued, UNKNOWN_CALL)
        # Supervising it (issue 51), by its call's id or its session's: Bob, and Alice too (her key is not a
        # supervisor's), find nothing there.
        for target in (call_id, session_id):
            for name in ("bob", "alice"):
                tried = await follow(server, target, keys[name], "supervise")
                never = await follow(server, UNKNOWN_CALL, keys[name], "supervise")
                assert tried["close"] == 1008 and without_id(tried, target) == without_id(never, UNKNOWN_CALL)
        # Bob's browser secret: refused like Bob, and not spent by the refusal.
        secret = await asyncio.to_thread(server.mint_client_secret, keys["bob"])
        assert (await follow(server, call_id, secret))["error"]["code"] == "call_not_found"
        async with websockets.connect(server.ws, subprotocols=["realtime", f"openai-insecure-api-key.{secret}"]) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created"
        # The owner follows, reads the timings, and hangs up; a secret Alice minted for a browser may not (it reaches
        # only the session it opens: tests/security/test_owner_layers.py).
        assert (await follow(server, call_id, keys["alice"]))["type"] == "session.created"
        alices_secret = await asyncio.to_thread(server.mint_client_secret, keys["alice"])
        assert (await follow(server, call_id, alices_secret))["error"]["code"] == "call_not_found"
        assert (await asyncio.to_thread(request, server, "session_timings", session_id, keys["alice"]))[0] == 200
        assert (await call.hang_up(token=keys["alice"])).status == 204
        # Ended, its record still belongs to Alice alone.
        assert (await asyncio.to_thread(request, server, "session_timings", session_id, keys["bob"]))[0] == 404
        assert (await asyncio.to_thread(request, server, "session_timings", session_id, keys["alice"]))[0] == 200
    finally:
        await call.close()


async def test_a_phone_call_answered_by_the_default_session_belongs_to_the_owner_key_alone(live):
    server, keys = live
    phone = SipPhone()
    try:
        await phone.dial("127.0.0.1", server.sip_port)  # type: ignore[attr-defined]
        found = wait_for(lambda: re.findall(r"SIP call (rtc_\w+) answered", server.full_log()), 10, what="the call")
        call_id = found[-1]
        for name in ("call", "call_hangup", "call_refer", "call_accept"):
            as_bob = await asyncio.to_thread(request, server, name, call_id, keys["bob"])
            assert as_bob == await asyncio.to_thread(request, server, name, UNKNOWN_CALL, keys["bob"]), name
        assert (await follow(server, call_id, keys["bob"]))["error"]["code"] == "call_not_found"
        assert (await follow(server, call_id, keys["phones"]))["type"] == "session.created"
        assert (await asyncio.to_thread(request, server, "call", call_id, keys["phones"]))[0] == 204
    finally:
        if phone.call is not None:
            await phone.hang_up()
