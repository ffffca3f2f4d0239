"""The agent places phone calls (issue 52): ``POST /v1/realtime/calls`` with ``{"sip": {"to": ...}}`` against a real
server (loopback profile, a pool of 2, authentication on), with real callees: baresip answering on its own, and raw
SIP responders on UDP sockets that answer busy, ring for ever, or must hear nothing at all."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator

import openai
import pytest
import websockets

from realtime.transports.sip import dialling
from realtime.transports.sip.config import SipConfigError, parse_proxy
from realtime.transports.sip.dialling import BadTarget
from realtime.transports.sip.outbound_views import next_hop
from tests.sip.conftest import SECRET, Webhook, free_units, loud_seconds, sip_server, sip_sessions, wait_free
from tests.sip.responder import TRUNK_PASSWORD, TRUNK_USER
from tests.sip.test_security import self_signed
from tests.support.polling import wait_for
from tests.support.server import LiveServer, free_port
from tests.support.services import missing
from tests.support.webrtc_client import Answer, post

UNKNOWN_CALL = "rtc_0000000000000000000000"


@pytest.fixture(scope="module")
def server(tmp_path_factory, webhook: Webhook) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("sip-outbound")
    cert, key = self_signed(directory)  # the TLS listener's, and the TLS callee's (trusted as its own CA)
    live = sip_server(
        directory,
        S2S_SIP_TLS_BIND=f"127.0.0.1:{free_port()}",
        S2S_SIP_TLS_CERT=str(cert),
        S2S_SIP_TLS_KEY=str(key),
        S2S_SIP_OUTBOUND_TLS_CA=str(cert),
        S2S_AUTH_REQUIRED="1",
        S2S_SIP_WEBHOOK_URL=webhook.url,
        S2S_SIP_WEBHOOK_SECRET=SECRET,
        S2S_SIP_OUTBOUND_ALLOW="sip:*@127.0.0.1:*,sip:*@localhost:*",
        S2S_SIP_RING_TIMEOUT_S="3",
        S2S_SIP_OUTBOUND_PER_MINUTE="100",
        S2S_SIP_OUTBOUND_PER_KEY="1",
        S2S_SIP_OUTBOUND_USER=TRUNK_USER,
        S2S_SIP_OUTBOUND_PASSWORD=TRUNK_PASSWORD,
    )
    live.keys = {  # type: ignore[attr-defined]
        name: live.manage("create_api_key", name).stdout.strip() for name in ("alice", "bob", "carol")
    }
    live.api_key = live.keys["alice"]  # type: ignore[attr-defined]
    live.phone_pem = directory / "phone.pem"  # type: ignore[attr-defined]
    live.phone_pem.write_bytes(cert.read_bytes() + key.read_bytes())  # type: ignore[attr-defined]
    yield live
    live.stop()


def key_of(server: LiveServer) -> str:
    """The key a test calls with unless it names another (``server.api_key``, as the module's fixture sets it)."""
    return server.api_key  # type: ignore[attr-defined]


def dial(server: LiveServer, sip: dict, token: str | None = None, session: dict | None = None) -> Answer:
    body = json.dumps({"sip": sip, **({"session": session} if session is not None else {})}).encode()
    return post(f"{server.http}/v1/realtime/calls", body, "application/json", token or key_of(server))


def record(server: LiveServer, call_id: str, token: str | None = None) -> tuple[int, dict]:
    answer = post(f"{server.http}/v1/realtime/calls/{call_id}", b"", "", token or key_of(server), "GET")
    return answer.status, json.loads(answer.body)


def hang_up(server: LiveServer, call_id: str, token: str | None = None) -> Answer:
    return post(f"{server.http}/v1/realtime/calls/{call_id}", b"", "", token or key_of(server), "DELETE")


def status_becomes(
    server: LiveServer, call_id: str, status: str, timeout: float = 15.0, token: str | None = None
) -> dict:
    def check() -> dict | None:
        found = record(server, call_id, token)[1]
        return found if found.get("status") == status else None

    return wait_for(check, timeout, what=f"the call {status}")


def audited(server: LiveServer, session_id: str, call_status: str) -> dict | None:
    """The audit's row of an outbound call's session once it says ``call_status``."""
    row = next((row for row in sip_sessions(server) if row["id"] == session_id), None)
    return row if row is not None and row["call_status"] == call_status else None


# --- the rules, before anything is dialled --------------------------------------------------------


@pytest.mark.parametrize(
    "sip, param",
    [
        ({"to": "sip:+1555@127.0.0.1:5060;transport=sctp"}, "sip.to"),
        ({"to": "sip:+1555@127.0.0.1:5060;maddr=10.0.0.1"}, "sip.to"),
        ({"to": "sips:+1555@127.0.0.1:5061;transport=udp"}, "sip.to"),
        ({"to": "sip:+1555@127.0.0.1", "from": "sip:me@127.0.0.1;transport=tcp"}, "sip.from"),
        ({"to": "sip:+1555@127.0.0.1:5060\r\nX-Evil: 1"}, "sip.to"),
        ({"to": "sip:+1555@127.0.0.1:5060?Subject=hi"}, "sip.to"),
        ({"to": "<sip:+1555@127.0.0.1:5060>"}, "sip.to"),
        ({"to": "tel:+15551234567"}, "sip.to"),
        ({"to": "sip:+1555@127.0.0.1", "from": "sip:me@127.0.0.1\r\nContact: <sip:evil@1.2.3.4>"}, "sip.from"),
        ({"to": "sip:+1555@127.0.0.1", "headers": {"Via": "SIP/2.0/UDP 1.2.3.4"}}, "sip.headers"),
        ({"to": "sip:+1555@127.0.0.1", "headers": {"X-Case": "a\r\nVia: SIP/2.0/UDP 1.2.3.4"}}, "sip.headers.X-Case"),
        ({"to": "sip:+1555@127.0.0.1", "headers": {"X-A\r\nVia": "x"}}, "sip.headers"),
    ],
)
def test_header_injection_through_to_from_and_headers_is_refused(sip, param):
    with pytest.raises(BadTarget) as refused:
        dialling.read({"sip": sip})
    assert (refused.value.status, refused.value.param) == (400, param)


def test_the_allow_list_is_a_glob_over_the_whole_uri_and_none_means_off():
    allowed = ("sip:+4420*@trunk.example", "sip:*@127.0.0.1:*")
    dialling.check_allowed("sip:+442071234567@trunk.example", allowed)
    dialling.check_allowed("sip:bob@127.0.0.1:5080", allowed)
    for target in ("sip:+15551234567@trunk.example", "sip:+442071234567@trunk.example.evil", "sip:bob@127.0.0.2:5"):
        with pytest.raises(BadTarget) as refused:
            dialling.check_allowed(target, allowed)
        refusal = (refused.value.status, refused.value.code, refused.value.param)
        assert refusal == (403, "outbound_not_allowed", "sip.to")
    with pytest.raises(BadTarget):
        dialling.check_allowed("sip:bob@127.0.0.1:5080", ())
    # Whom a URI calls, however it gets there: sips: and ;transport= change the way, not the number.
    dialling.check_allowed("sips:+442071234567@trunk.example;transport=tls", allowed)
    dialling.check_allowed("sip:bob@127.0.0.1:5080;transport=tcp", allowed)
    with pytest.raises(BadTarget):
        dialling.check_allowed("sips:+15551234567@trunk.example", allowed)


def test_final_answers_map_to_the_calls_status():
    assert [dialling.status_of(code) for code in (486, 600, 480, 408, 603, 404, 403, 503)] == [
        "busy",
        "busy",
        "no_answer",
        "no_answer",
        "rejected",
        "rejected",
        "rejected",
        "failed",
    ]


def test_targets_outside_the_allow_list_and_injections_are_refused_with_nothing_sent(server, responders):
    outside = responders("busy", host="127.0.0.2")  # allowed is 127.0.0.1 only
    inside = responders("busy")
    answer = dial(server, {"to": outside.uri})
    assert answer.status == 403
    error = json.loads(answer.body)["error"]
    assert (error["code"], error["param"]) == ("outbound_not_allowed", "sip.to")
    for sip in (
        {"to": inside.uri + ";maddr=127.0.0.2"},
        {"to": inside.uri + "\r\nX-Evil: 1"},
        {"to": inside.uri, "from": "sip:me@127.0.0.1\r\nVia: SIP/2.0/UDP 127.0.0.1:1"},
        {"to": inside.uri, "headers": {"Contact": "<sip:evil@127.0.0.1>"}},
        {"to": inside.uri, "headers": {"X-Ok": "a\r\nRoute: <sip:evil@127.0.0.1>"}},
    ):
        answer = dial(server, sip)
        assert answer.status == 400, (sip, answer.body)
    secret = post(f"{server.http}/v1/realtime/client_secrets", b"{}", "application/json", server.keys["alice"]).body
    answer = dial(server, {"to": inside.uri}, token=json.loads(secret)["value"])
    assert answer.status == 403  # a client secret cannot place calls
    assert post(f"{server.http}/v1/realtime/calls", b'{"sip": {"to": "x"}}', "application/json").status == 401
    time.sleep(0.5)
    assert outside.raw == [] and inside.raw == []
    assert free_units(server) == 2


# --- calls that are not answered ------------------------------------------------------------------


def test_a_busy_callee_ends_the_call_busy_with_its_486_and_frees_the_unit(server, responders):
    callee = responders("busy")
    answer = dial(server, {"to": callee.uri, "headers": {"X-Campaign": "reminders"}})
    assert answer.status == 201, answer.body
    placed = json.loads(answer.body)
    assert placed["status"] == "dialing" and placed["direction"] == "outbound"
    assert answer.headers["Location"] == f"/v1/realtime/calls/{placed['id']}"
    ended = status_becomes(server, placed["id"], "busy")
    assert ended["sip_code"] == 486 and ended["end_reason"] == "sip_486" and ended["ended_at"]
    invite = callee.requests[0]
    assert invite.headers.get_first("x-campaign") == "reminders"
    wait_for(lambda: "ACK" in callee.methods(), 5, what="the ACK of the 486")
    assert wait_free(server, 2) == 2
    # The audit: the direction, the dialled number masked as S2S_SIP_NUMBERS=masked says, how the call went.
    row = wait_for(lambda: audited(server, placed["session_id"], "busy"), 10, what="the audit's row of the call")
    assert (row["direction"], row["callee"], row["caller"]) == ("outbound", "********4567", "s2s")
    assert (row["call_end_reason"], row["sip_code"], row["end_reason"]) == ("sip_486", 486, "client_closed")


def posted_statuses(webhook: Webhook, call_id: str, until: str, timeout: float = 15.0) -> list[str]:
    """The statuses the webhook received for ``call_id``, in order, up to ``until``; each signature checked as the
    openai SDK checks OpenAI's (``client.webhooks.unwrap`` reads only the events it knows, so the signature alone)."""
    client = openai.OpenAI(api_key="unused", webhook_secret=SECRET)
    statuses: list[str] = []
    deadline = time.monotonic() + timeout
    while until not in statuses:
        headers, body = webhook.next(max(0.1, deadline - time.monotonic()))
        client.webhooks.verify_signature(body, headers)  # raises unless signed with the secret, within 5 minutes
        event = json.loads(body)
        if event["data"]["call_id"] == call_id:
            assert event["type"] == "realtime.call.status_changed" and event["data"]["direction"] == "outbound"
            statuses.append(event["data"]["status"])
    return statuses


def test_the_webhook_hears_each_status_change_signed_as_the_incoming_call_event(server, webhook, responders):
    callee = responders("ring")
    placed = json.loads(dial(server, {"to": callee.uri}).body)
    status_becomes(server, placed["id"], "ringing", 5)
    assert hang_up(server, placed["id"]).status == 204
    assert posted_statuses(webhook, placed["id"], "ended") == ["dialing", "ringing", "ended"]
    assert wait_free(server, 2) == 2


def test_a_callee_that_never_answers_is_cancelled_at_the_ring_timeout_as_no_answer(server, responders):
    callee = responders("ring")
    placed = json.loads(dial(server, {"to": callee.uri}).body)
    status_becomes(server, placed["id"], "ringing", 5)
    assert free_units(server) == 1  # held while it rings
    ended = status_becomes(server, placed["id"], "no_answer", 10)
    assert ended["end_reason"] == "ring_timeout"
    wait_for(lambda: {"CANCEL", "ACK"} <= set(callee.methods()), 5, what="the CANCEL, and the ACK of the 487")
    assert wait_free(server, 2) == 2


def test_delete_while_ringing_sends_cancel_and_a_full_pool_dials_nobody(server, responders):
    first, second, third = responders("ring"), responders("ring"), responders("ring")
    calls = [
        json.loads(dial(server, {"to": callee.uri}, server.keys[key]).body)["id"]
        for callee, key in ((first, "alice"), (second, "bob"))
    ]
    for call_id, key in zip(calls, ("alice", "bob"), strict=True):
        status_becomes(server, call_id, "ringing", 5, server.keys[key])
    full = dial(server, {"to": third.uri}, server.keys["carol"])
    assert full.status == 429 and json.loads(full.body)["error"]["code"] == "session_limit_reached"
    for call_id, key in zip(calls, ("alice", "bob"), strict=True):
        assert hang_up(server, call_id, server.keys[key]).status == 204
    wait_for(lambda: "CANCEL" in first.methods() and "CANCEL" in second.methods(), 5, what="the CANCELs")
    ended = record(server, calls[0])[1]
    assert (ended["status"], ended["end_reason"]) == ("ended", "cancelled")
    assert wait_free(server, 2) == 2
    assert third.raw == []


async def test_another_key_gets_404_on_get_delete_and_the_follow(server, responders):
    callee = responders("ring")
    placed = json.loads((await asyncio.to_thread(dial, server, {"to": callee.uri})).body)
    call_id, bob = placed["id"], server.keys["bob"]

    def as_bob(target: str) -> list[tuple[int, str]]:
        answers = [record(server, target, bob)]
        deleted = hang_up(server, target, bob)
        answers.append((deleted.status, json.loads(deleted.body)))
        return [(status, json.dumps(body["error"]).replace(target, "ID")) for status, body in answers]

    assert await asyncio.to_thread(as_bob, call_id) == await asyncio.to_thread(as_bob, UNKNOWN_CALL)
    assert (await asyncio.to_thread(record, server, call_id, bob))[0] == 404
    async with websockets.connect(
        f"{server.ws}?call_id={call_id}", additional_headers={"Authorization": f"Bearer {bob}"}, open_timeout=10
    ) as socket_:
        first = json.loads(await asyncio.wait_for(socket_.recv(), 10))
    assert first["type"] == "error"
    assert (await asyncio.to_thread(record, server, call_id))[1]["status"] == "ringing"  # still up for alice
    assert (await asyncio.to_thread(hang_up, server, call_id)).status == 204
    assert await asyncio.to_thread(wait_free, server, 2) == 2


# --- a real callee: baresip answers, the agent speaks first --------------------------------------------


async def test_baresip_answers_and_hears_the_agent_speak_first_after_response_create_on_the_sideband(server, phones):
    phone = phones(account=";answermode=auto")
    target = {"to": f"sip:phone@127.0.0.1:{phone.sip_port}"}
    answer = await asyncio.to_thread(dial, server, target, None, {"type": "realtime", "instructions": "Say hello."})
    assert answer.status == 201, answer.body
    call_id = json.loads(answer.body)["id"]
    sideband = openai.AsyncOpenAI(api_key=server.keys["alice"], base_url=f"{server.http}/v1", max_retries=0)
    async with sideband.realtime.connect(call_id=call_id) as connection:
        first = await asyncio.wait_for(connection.recv(), 10)
        assert first.type == "session.created"
        await asyncio.to_thread(status_becomes, server, call_id, "answered", 15)
        await connection.send({"type": "response.create"})
        seen: list[str] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and "output_audio_buffer.stopped" not in seen:
            event = await asyncio.wait_for(connection.recv(), max(0.1, deadline - time.monotonic()))
            seen.append(event.type)
    assert {"response.created", "output_audio_buffer.started", "output_audio_buffer.stopped"} <= set(seen), seen
    wait_for(lambda: loud_seconds(*phone.heard()) >= 0.5, 20, what="the agent's reply heard by the callee")
    answered = (await asyncio.to_thread(record, server, call_id))[1]
    assert answered["sip_code"] == 200 and answered["answered_at"]
    assert (await asyncio.to_thread(hang_up, server, call_id)).status == 204
    await asyncio.to_thread(wait_for, phone.hung_up, 10, what="the BYE at the callee")
    ended = (await asyncio.to_thread(record, server, call_id))[1]
    assert (ended["status"], ended["end_reason"]) == ("ended", "hung_up")
    assert await asyncio.to_thread(wait_free, server, 2) == 2


def test_a_key_holds_at_most_its_cap_of_calls_at_once_and_the_next_dials_nobody(server, responders):
    ringing, refused = responders("ring"), responders("ring")
    placed = json.loads(dial(server, {"to": ringing.uri}).body)
    status_becomes(server, placed["id"], "ringing", 5)
    over = dial(server, {"to": refused.uri})
    assert over.status == 429 and json.loads(over.body)["error"]["code"] == "rate_limit_exceeded"
    assert hang_up(server, placed["id"]).status == 204
    assert wait_free(server, 2) == 2
    assert refused.raw == []


def test_a_trunks_digest_challenge_is_answered_with_the_credentials_and_the_407_acked(server, responders):
    trunk = responders("challenge")
    placed = json.loads(dial(server, {"to": trunk.uri}).body)
    ended = status_becomes(server, placed["id"], "busy")  # 486 only to an INVITE whose credentials are right
    assert ended["sip_code"] == 486
    invites = [request for request in trunk.requests if request.method == "INVITE"]
    assert len(invites) == 2 and 'username="trunkuser"' in (invites[1].headers.get_first("proxy-authorization") or "")
    wait_for(lambda: trunk.methods().count("ACK") >= 2, 5, what="the ACKs of the 407 and the 486")
    assert wait_free(server, 2) == 2


def test_a_callee_that_hangs_up_ends_the_call_and_frees_the_unit(server, phones):
    phone = phones(account=";answermode=auto")
    placed = json.loads(dial(server, {"to": f"sip:phone@127.0.0.1:{phone.sip_port}"}).body)
    status_becomes(server, placed["id"], "answered", 15)
    phone.hang_up()
    ended = status_becomes(server, placed["id"], "ended", 10)
    assert ended["end_reason"] == "callee_hung_up"
    assert wait_free(server, 2) == 2


def test_a_tcp_target_is_called_over_tcp_answered_heard_and_hung_up(server, phones):
    phone = phones(account=";answermode=auto")
    target = {"to": f"sip:phone@127.0.0.1:{phone.sip_port};transport=tcp"}
    placed = json.loads(dial(server, target, session={"type": "realtime", "instructions": "Say hello."}).body)
    assert placed["transport"] == "tcp"
    answered = status_becomes(server, placed["id"], "answered", 15)
    assert answered["sip_code"] == 200
    assert hang_up(server, placed["id"]).status == 204
    wait_for(phone.hung_up, 10, what="the BYE over TCP at the callee")
    assert record(server, placed["id"])[1]["end_reason"] == "hung_up"
    assert wait_free(server, 2) == 2


async def test_the_trunk_and_its_transport_come_from_the_proxy_setting_and_sips_needs_tls():
    tcp, _ = dialling.read({"sip": {"to": "sip:+15551234567@127.0.0.1;transport=tcp"}})
    assert await next_hop(tcp, None) == (("127.0.0.1", 5060), "tcp")
    plain, _ = dialling.read({"sip": {"to": "sip:+15551234567@127.0.0.1"}})
    assert await next_hop(plain, parse_proxy("127.0.0.1:5070;transport=tcp")) == (("127.0.0.1", 5070), "tcp")
    secure, _ = dialling.read({"sip": {"to": "sips:+15551234567@127.0.0.1"}})
    assert await next_hop(secure, None) == (("127.0.0.1", 5061), "tls")
    with pytest.raises(BadTarget):
        await next_hop(secure, parse_proxy("127.0.0.1:5070"))  # sips: over a UDP trunk: refused
    assert parse_proxy("127.0.0.1:5070") == ("127.0.0.1", 5070, "udp")
    for bad in ("127.0.0.1:5070;transport=sctp", "127.0.0.1:5070;maddr=1.2.3.4"):
        with pytest.raises(SipConfigError):
            parse_proxy(bad)


def test_a_sips_target_is_called_over_tls_with_srtp_answered_heard_and_hung_up(server, phones):
    phone = phones(account=";answermode=auto;mediaenc=srtp-mand", certificate=server.phone_pem)
    target = {"to": f"sips:phone@127.0.0.1:{phone.sip_port + 1}"}  # baresip's TLS port: its SIP port + 1
    answer = dial(server, target, session={"type": "realtime", "instructions": "Say hello."})
    assert answer.status == 201, answer.body
    placed = json.loads(answer.body)
    assert placed["transport"] == "tls"
    status_becomes(server, placed["id"], "answered", 15)
    # The reply reached the phone through SRTP: it decrypts and hears it (a key it could not use: silence).
    wait_for(lambda: loud_seconds(*phone.heard()) >= 0.5, 20, what="the reply heard over SRTP")
    assert "AES_CM_128_HMAC_SHA1_80" in phone.log() or "srtp" in phone.log().lower()
    assert hang_up(server, placed["id"]).status == 204
    wait_for(phone.hung_up, 10, what="the BYE over TLS at the callee")
    assert wait_free(server, 2) == 2


def test_a_tls_callee_whose_certificate_is_not_trusted_is_not_called(server, phones, tmp_path):
    stranger_cert, stranger_key = self_signed(tmp_path)  # not S2S_SIP_OUTBOUND_TLS_CA's
    pem = tmp_path / "stranger.pem"
    pem.write_bytes(stranger_cert.read_bytes() + stranger_key.read_bytes())
    phone = phones(account=";answermode=auto;mediaenc=srtp-mand", certificate=pem)
    placed = json.loads(dial(server, {"to": f"sips:phone@127.0.0.1:{phone.sip_port + 1}"}).body)
    ended = status_becomes(server, placed["id"], "failed", 15)
    assert ended["end_reason"] == "unreachable" and ended["sip_code"] is None
    assert wait_free(server, 2) == 2


def test_tls_checks_the_certificate_for_the_host_the_target_names_not_only_its_address(server, phones):
    if socket.getaddrinfo("localhost", 5061, type=socket.SOCK_DGRAM)[0][4][0] != "127.0.0.1":
        # a failure under CI=true
        missing("this machine resolves localhost to another address than 127.0.0.1 first (/etc/hosts)")
    phone = phones(account=";answermode=auto;mediaenc=srtp-mand", certificate=server.phone_pem)
    placed = json.loads(dial(server, {"to": f"sips:phone@localhost:{phone.sip_port + 1}"}).body)
    ended = status_becomes(server, placed["id"], "failed", 15)  # the certificate names 127.0.0.1, not localhost
    assert ended["end_reason"] == "unreachable"
    assert "certificate is not valid for 'localhost'" in server.full_log()
    assert wait_free(server, 2) == 2
