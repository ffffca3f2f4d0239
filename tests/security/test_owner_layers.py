"""The owner rule below the routes (issue 49): what a client secret reaches, what a staff cookie may do, and what
revoking a key closes. Each test plays the attacker who found the hole against a real server with authentication
on, two API keys, a SIP listener and Redis (a revocation from another process, as the admin or a script sends it);
the pure rule is checked on its own first."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
import requests
import websockets

from realtime.access.owner import Caller, Owner
from realtime.live.followers import Followers
from realtime.live.transport import ServerEvent
from tests.security.test_owner_routes import UNKNOWN_CALL, UNKNOWN_SESSION, follow, probes, request, without_id
from tests.sip.conftest import SECRET, Webhook, sip_listener_env
from tests.support import services
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port
from tests.support.sip_phone import SipPhone
from tests.support.webrtc_client import WebRTCClient

T = TypeVar("T")
PASSWORD = "owner-layers-pw"  # noqa: S105 (a test server's staff users)
CONTROL_TIMEOUT_S = 1.0  # S2S_CALL_CONTROL_TIMEOUT_S: how long an unknown call's id takes to be a 404, with Redis

# --- the rule itself ---------------------------------------------------------------------------------------------

KEY, OTHER_KEY = 7, 8


def test_a_client_secret_reaches_only_the_session_it_opened_and_its_key_reaches_them_all():
    opened_by_secret = Owner(credential="hash-of-ek_1", api_key_id=KEY)
    opened_by_key = Owner(credential="hash-of-sk", api_key_id=KEY)
    its_secret = Caller("hash-of-ek_1", KEY, secret=True)
    another_secret_of_the_key = Caller("hash-of-ek_2", KEY, secret=True)
    the_key = Caller("hash-of-sk", KEY)
    assert opened_by_secret.may_reach(its_secret) and opened_by_secret.reads(its_secret)
    assert not opened_by_secret.may_reach(another_secret_of_the_key)
    assert not opened_by_secret.reads(another_secret_of_the_key)
    assert not opened_by_key.may_reach(its_secret) and not opened_by_key.reads(its_secret)
    assert opened_by_secret.may_reach(the_key) and opened_by_key.may_reach(the_key)
    assert not opened_by_key.may_reach(Caller("hash-of-other", OTHER_KEY))


def test_a_ringing_call_is_answered_by_an_api_key_and_never_by_a_client_secret():
    ringing = Owner(answerable=True)
    for action in ("accept", "reject", "hangup", "refer"):
        assert ringing.may_control(Caller("hash-of-sk", KEY), action), action
        assert not ringing.may_control(Caller("hash-of-ek", KEY, secret=True), action), action
    assert not ringing.may_control(Caller("hash-of-sk", KEY), "other")


def test_staff_means_the_admins_permission_not_is_staff():
    session = Owner(credential="hash-of-sk", api_key_id=KEY)
    assert not session.may_reach(Caller()) and not session.reads(Caller())
    assert session.may_reach(Caller(staff=True)) and not session.reads(Caller(staff=True))
    assert session.reads(Caller(reader=True)) and not session.may_reach(Caller(reader=True))


def test_a_supervisor_supervises_any_session_and_nobody_else_does():
    session = Owner(credential="hash-of-sk", api_key_id=KEY)
    assert session.supervises(Caller("hash-of-boss", OTHER_KEY, supervisor=True, name="key:boss"))
    assert session.supervises(Caller(supervisor=True, name="ann"))  # a user with supervise_live_session
    for stranger in (
        Caller("hash-of-sk", KEY),  # its own key, not a supervisor's
        Caller("hash-of-ek", KEY, secret=True),
        Caller("hash-of-other", OTHER_KEY),
        Caller(staff=True, reader=True),  # may end and read it, not listen to it
    ):
        assert not session.supervises(stranger), stranger
    assert Owner(open=True).supervises(Caller())  # authentication off: every session is open


def test_a_caller_crosses_processes_whole_and_one_that_does_not_say_is_taken_as_a_secret():
    for caller in (
        Caller("h", KEY),
        Caller("h", KEY, secret=True),
        Caller(staff=True, reader=True),
        Caller("h", KEY, supervisor=True, name="key:boss"),
    ):
        assert Caller.from_message(json.loads(json.dumps(caller.as_message()))) == caller
    older = Caller.from_message({"credential": "h", "api_key_id": KEY, "staff": False})
    assert older.secret and not Owner(api_key_id=KEY).may_reach(older)
    assert Caller.from_message({"api_key_id": True}).api_key_id is None
    assert Caller.from_message("not a dict") == Caller()


class Follower:
    """A FAKE follower transport: keeps what it is sent and how it was closed."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.closed: tuple[int, str] | None = None

    async def send_event(self, event: ServerEvent) -> None:
        self.events.append(event.type)

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class FollowedSession(Followers):
    """The followers of a session without the rest of one (a FAKE mailbox that records the groups joined)."""

    def __init__(self, owner: Owner) -> None:
        self.id, self.owner, self._followers, self.ended = "sess_test", owner, {}, False
        self.joined: list[str] = []
        self.mailbox = self  # type: ignore[assignment]

    async def join(self, group: str) -> None:
        self.joined.append(group)

    async def end_revoked(self) -> None:
        self.ended = True


async def test_revoking_a_key_closes_its_followers_and_ends_only_the_sessions_it_owns():
    session = FollowedSession(Owner(credential="hash-of-sk", api_key_id=KEY))
    own, others, staff = Follower(), Follower(), Follower()
    await session.follow(own, Caller("hash-of-sk", KEY))
    await session.follow(others, Caller("hash-of-sk2", OTHER_KEY))
    await session.follow(staff, Caller(staff=True))
    assert session.joined == ["s2s.key.7", "s2s.key.8"]  # the followers' keys: a revocation reaches them
    await session.key_revoked(OTHER_KEY)
    assert others.closed == (1008, "API key revoked") and others.events == ["error"]
    assert own.closed is None and staff.closed is None and not session.ended
    await session.key_revoked(KEY)
    assert session.ended  # the owner's key: the whole session ends (its end closes the rest)


# --- a real server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """Authentication on, Redis between processes, a SIP listener whose calls belong to the key "phones", and two
    staff users: "nobody" (is_staff, no permission) and "operator" (may end and read live sessions)."""
    sip_port = free_port()
    server = LiveServer(
        tmp_path_factory.mktemp("owner-layers"),
        env={
            "S2S_AUTH_REQUIRED": "1",
            "REDIS_URL": services.redis_url(),
            **sip_listener_env(sip_port),
            "S2S_SIP_OWNER_KEY": "phones",
            "S2S_CALL_CONTROL_TIMEOUT_S": str(CONTROL_TIMEOUT_S),
        },
    )
    server.start()
    server.sip_port = sip_port  # type: ignore[attr-defined]
    keys = {name: server.manage("create_api_key", name).stdout.strip() for name in ("alice", "bob", "phones")}
    keys["boss"] = server.manage("create_api_key", "boss", "--supervisor").stdout.strip()
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import Permission, User\n"
        f"User.objects.create_user('nobody', password='{PASSWORD}', is_staff=True)\n"
        f"operator = User.objects.create_user('operator', password='{PASSWORD}', is_staff=True)\n"
        "operator.user_permissions.set(Permission.objects.filter(codename__in="
        "['end_live_session', 'view_realtimesession']))\n"
        f"watcher = User.objects.create_user('watcher', password='{PASSWORD}', is_staff=True)\n"
        "watcher.user_permissions.set(Permission.objects.filter(codename='supervise_live_session'))\n",
    )
    yield server, keys
    server.stop()


def signed_in(server: LiveServer, username: str) -> requests.Session:
    """A browser session signed in to the admin as ``username`` (its cookies: sessionid, csrftoken)."""
    http = requests.Session()
    http.get(f"{server.http}/admin/login/", timeout=10).raise_for_status()
    answer = http.post(
        f"{server.http}/admin/login/?next=/admin/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        timeout=10,
    )
    assert "sessionid" in http.cookies, answer.text[:300]
    return http


async def timed(probe: Callable[..., T], *args: object) -> tuple[T, float]:
    """``probe(*args)`` in a thread, and how long it took to answer."""
    started = time.monotonic()
    answer = await asyncio.to_thread(probe, *args)
    return answer, time.monotonic() - started


def answer_text(answer: requests.Response, target: str) -> tuple[int, str]:
    """The status and the body, without the event id every answer draws anew and with the id taken out."""
    body = {key: value for key, value in (answer.json() if answer.content else {}).items() if key != "event_id"}
    return answer.status_code, json.dumps(body).replace(target, "ID")


async def test_a_client_secret_reaches_the_session_it_opened_and_no_other_of_its_key(live):
    server, keys = live
    mine, other = WebRTCClient(server.http), WebRTCClient(server.http)
    try:
        secret = await asyncio.to_thread(server.mint_client_secret, keys["alice"])
        assert (await mine.connect(token=secret)).status == 201
        own_call = mine.location.rsplit("/", 1)[1]
        own_session = (await mine.events.until("session.created"))["session"]["id"]
        assert (await other.connect(token=keys["alice"])).status == 201
        keys_call = other.location.rsplit("/", 1)[1]
        keys_session = (await other.events.until("session.created"))["session"]["id"]
        second = await asyncio.to_thread(server.mint_client_secret, keys["alice"])
        # Another browser's secret of the same key: both calls are as unknown to it as an id never issued.
        for token in (second, secret):
            for call_id, session_id in ((keys_call, keys_session), (own_call, own_session)):
                if token == secret and call_id == own_call:
                    continue
                for name, method in probes():
                    target, unknown = (
                        (session_id, UNKNOWN_SESSION) if name == "session_timings" else (call_id, UNKNOWN_CALL)
                    )
                    refused, took = await timed(request, server, name, target, token, method)
                    never, never_took = await timed(request, server, name, unknown, token, method)
                    assert refused == never and refused[0] == 404, (name, method)
                    if name != "session_timings" and method != "GET":  # a control: as long as an unknown id, until
                        # no node answered (before: a refusal came at once)
                        assert min(took, never_took) >= CONTROL_TIMEOUT_S * 0.9, (name, method, took, never_took)
                stranger = await follow(server, call_id, token)
                assert without_id(stranger, call_id) == without_id(
                    await follow(server, UNKNOWN_CALL, token), UNKNOWN_CALL
                )
        # The secret's own session (spent since it opened it): it follows and reads it; the key reaches both.
        assert (await follow(server, own_call, secret))["type"] == "session.created"
        assert (await asyncio.to_thread(request, server, "session_timings", own_session, secret))[0] == 200
        assert (await follow(server, own_call, keys["alice"]))["type"] == "session.created"
        assert (await follow(server, keys_call, keys["alice"]))["type"] == "session.created"
        assert (await mine.hang_up(token=secret)).status == 204
        assert (await other.hang_up(token=keys["alice"])).status == 204
    finally:
        await mine.close()
        await other.close()


async def test_a_staff_cookie_needs_the_admins_permission_and_a_csrf_token(live):
    server, keys = live
    call = WebRTCClient(server.http)
    try:
        assert (await call.connect(token=keys["alice"])).status == 201
        call_id = call.location.rsplit("/", 1)[1]
        session_id = (await call.events.until("session.created"))["session"]["id"]
        nobody = await asyncio.to_thread(signed_in, server, "nobody")
        token = {"X-CSRFToken": nobody.cookies["csrftoken"]}
        for method, path, unknown in (
            ("DELETE", f"/v1/realtime/calls/{call_id}", f"/v1/realtime/calls/{UNKNOWN_CALL}"),
            ("GET", f"/v1/realtime/sessions/{session_id}/timings", f"/v1/realtime/sessions/{UNKNOWN_SESSION}/timings"),
        ):
            tried = await asyncio.to_thread(nobody.request, method, server.http + path, headers=token, timeout=10)
            never = await asyncio.to_thread(nobody.request, method, server.http + unknown, headers=token, timeout=10)
            target = session_id if "sessions" in path else call_id
            other = UNKNOWN_SESSION if "sessions" in path else UNKNOWN_CALL
            assert tried.status_code == 404 and answer_text(tried, target) == answer_text(never, other), path
        operator = await asyncio.to_thread(signed_in, server, "operator")
        url = f"{server.http}/v1/realtime/calls/{call_id}"
        forged = await asyncio.to_thread(operator.delete, url, timeout=10)  # another page's request: no token
        assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf_failed"
        timings = f"{server.http}/v1/realtime/sessions/{session_id}/timings"
        assert (await asyncio.to_thread(operator.get, timings, timeout=10)).status_code == 200
        headers = {"X-CSRFToken": operator.cookies["csrftoken"]}
        assert (await asyncio.to_thread(operator.delete, url, headers=headers, timeout=10)).status_code == 204
    finally:
        await call.close()


async def test_only_a_supervisor_key_or_a_user_who_may_supervise_reaches_a_session_to_supervise(live):
    server, keys = live
    call = WebRTCClient(server.http)
    try:
        assert (await call.connect(token=keys["alice"])).status == 201
        call_id = call.location.rsplit("/", 1)[1]
        session_id = (await call.events.until("session.created"))["session"]["id"]
        alices = {"Authorization": f"Bearer {keys['alice']}"}
        for _ in range(50):  # a WebSocket session too, once the earlier tests' units have drained
            own = await websockets.connect(server.ws, additional_headers=alices)
            first = json.loads(await asyncio.wait_for(own.recv(), 10))
            if first["type"] == "session.created":
                break
            await own.close()
            await asyncio.sleep(0.2)
        async with own:
            socket_session = first["session"]["id"]
            secret = await asyncio.to_thread(server.mint_client_secret, keys["alice"])
            browsers = {}
            for user in ("nobody", "operator", "watcher"):
                cookies = await asyncio.to_thread(signed_in, server, user)
                browsers[user] = {"Cookie": f"sessionid={cookies.cookies['sessionid']}", "Origin": server.http}
            strangers = [
                (keys["bob"], None),
                (keys["alice"], None),  # the owner's own key, without the supervisor's flag
                (secret, None),
                ("", browsers["nobody"]),
                ("", browsers["operator"]),  # may end the session, not listen to it
                ("", {"Cookie": browsers["watcher"]["Cookie"]}),  # a cookie without a browser's Origin
            ]
            for target in (call_id, session_id, socket_session):
                for token, headers in strangers:
                    tried = await follow(server, target, token, "supervise", headers)
                    never = await follow(server, UNKNOWN_SESSION, token, "supervise", headers)
                    assert tried["close"] == 1008, (target, token[:10], headers)
                    assert without_id(tried, target) == without_id(never, UNKNOWN_SESSION)
                for token, headers in ((keys["boss"], None), ("", browsers["watcher"])):
                    seated = await follow(server, target, token, "supervise", headers)
                    assert seated["type"] == "session.created" and seated["close"] is None, (target, seated)
        assert (await call.hang_up(token=keys["alice"])).status == 204
    finally:
        await call.close()


async def test_a_client_secret_cannot_answer_a_ringing_webhook_call_that_any_api_key_may(tmp_path):
    """A call announced to the webhook, no owner key: any API key may answer it, a client secret of that very key
    finds it as an id never issued (before: a browser's secret accepted it, and owned it)."""
    hook, sip_port = Webhook(), free_port()
    server = LiveServer(
        tmp_path,
        env={
            "S2S_AUTH_REQUIRED": "1",
            **sip_listener_env(sip_port),
            "S2S_SIP_WEBHOOK_URL": hook.url,
            "S2S_SIP_WEBHOOK_SECRET": SECRET,
        },
    )
    phone = SipPhone()
    dialling: asyncio.Task[None] | None = None
    try:
        server.start()
        key = server.manage("create_api_key", "operator").stdout.strip()
        dialling = asyncio.create_task(phone.dial("127.0.0.1", sip_port))
        _, body = await asyncio.to_thread(hook.next, 15)
        call_id = json.loads(body)["data"]["call_id"]
        secret = await asyncio.to_thread(server.mint_client_secret, key)
        for name in ("call_accept", "call_reject", "call_refer", "call_hangup", "call"):
            tried = await asyncio.to_thread(request, server, name, call_id, secret)
            assert tried == await asyncio.to_thread(request, server, name, UNKNOWN_CALL, secret) and tried[0] == 404
        stranger = await follow(server, call_id, secret)
        assert without_id(stranger, call_id) == without_id(await follow(server, UNKNOWN_CALL, secret), UNKNOWN_CALL)
        assert (await asyncio.to_thread(request, server, "call_accept", call_id, key))[0] == 200
        await asyncio.wait_for(dialling, 30)
        assert (await asyncio.to_thread(request, server, "call", call_id, key))[0] == 204
    finally:
        if dialling is not None and not dialling.done():
            dialling.cancel()
        if phone.call is not None:
            await phone.hang_up()
        server.stop()
        hook.close()


async def test_revoking_the_key_closes_its_followers_on_a_live_phone_call(live):
    """Last in the module: it revokes the key the phone calls belong to."""
    server, keys = live
    phone = SipPhone()
    try:
        await phone.dial("127.0.0.1", server.sip_port)  # type: ignore[attr-defined]
        found = wait_for(lambda: re.findall(r"SIP call (rtc_\w+) answered", server.full_log()), 10, what="the call")
        call_id = found[-1]
        headers = {"Authorization": f"Bearer {keys['phones']}"}
        async with websockets.connect(f"{server.ws}?call_id={call_id}", additional_headers=headers) as follower:
            assert json.loads(await asyncio.wait_for(follower.recv(), 10))["type"] == "session.created"
            server.manage(
                "shell",
                "-c",
                "from django.utils import timezone\nfrom realtime.models import ApiKey\n"
                "key = ApiKey.objects.get(name='phones')\nkey.revoked_at = timezone.now()\nkey.save()\n",
            )
            with pytest.raises(websockets.ConnectionClosed):  # before: it stayed, and steered the call
                while True:
                    await asyncio.wait_for(follower.recv(), 15)
        wait_for(lambda: "its API key was revoked" in server.full_log(), 15, what="the call ended with its key")
    finally:
        if phone.call is not None:
            await phone.hang_up()
