"""A request acts only on the dialog it belongs to, and a call's own re-INVITE is answered (issue 49's SIP part).

Before: a placed call's BYE was matched by its tags alone (aiosipua), so one with the right Call-ID and tags from
any host hung the call up; and a re-INVITE on an answered call (a trunk's session refresh, RFC 4028, or hold,
RFC 3264) got no final answer at all, so the trunk dropped the call after its timer. Now an in-dialog request
needs the Call-ID, both tags and the other side's host, inbound or outbound, and a re-INVITE that passes is
answered 200 with the call's SDP as it stands (the direction that answers hold), 488 for an offer whose audio
cannot be sent to, the call going on either way. The listener runs on the test's event loop with the loopback
pool (fake stages); the phones are raw SIP over UDP sockets (:mod:`tests.sip.test_owner_rule`'s).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiosipua import SipMessage, SipRequest, SipResponse, parse_sdp

from realtime.access import auth
from realtime.access.owner import Owner
from realtime.live.opening import OpenRequest
from realtime.models import TransportKind
from realtime.node import runtime
from realtime.transports.sip import dialling
from realtime.transports.sip.outbound import OutboundCall
from tests.sip import test_owner_rule
from tests.sip.test_owner_rule import STRANGER, Phone, _Inbox, sdp, to_tag

pytestmark = pytest.mark.django_db(transaction=True)

sip = test_owner_rule.sip  # the fixture: a listener in this process, its phones raw SIP on UDP sockets


async def rtp_socket(host: str = "127.0.0.1") -> tuple[asyncio.DatagramTransport, _Inbox]:
    """A UDP socket that keeps what it hears (the call's RTP)."""
    transport, inbox = await asyncio.get_running_loop().create_datagram_endpoint(_Inbox, local_addr=(host, 0))
    return transport, inbox  # type: ignore[return-value]


def port_of(transport: asyncio.DatagramTransport) -> int:
    return transport.get_extra_info("sockname")[1]


async def hears_rtp(inbox: _Inbox, within: float = 2.0) -> bool:
    """Whether RTP arrives (fresh: what was heard before is thrown away first)."""
    while not inbox.queue.empty():
        inbox.queue.get_nowait()
    try:
        await asyncio.wait_for(inbox.queue.get(), within)
    except TimeoutError:
        return False
    return True


async def silent(inbox: _Inbox, seconds: float = 0.5) -> bool:
    """Whether no RTP arrives for ``seconds`` (after a packet or two already in flight)."""
    await asyncio.sleep(0.1)
    while not inbox.queue.empty():
        inbox.queue.get_nowait()
    await asyncio.sleep(seconds)
    return inbox.queue.empty()


def with_direction(body: str, direction: str) -> str:
    return body + f"a={direction}\r\n"


def origin(response: SipResponse) -> tuple[str, str]:
    parsed = parse_sdp(response.text)
    return parsed.origin.session_id, parsed.origin.session_version


def direction(response: SipResponse) -> str:
    audio = parse_sdp(response.text).audio
    assert audio is not None
    return next((name for name in ("sendrecv", "sendonly", "recvonly", "inactive") if name in audio.attributes), "")


async def answered_call(setup, call_id: str) -> tuple[Phone, str, asyncio.DatagramTransport, _Inbox, SipResponse]:
    """A caller whose call is answered, its RTP heard on a socket of its own; returns its 200 OK too."""
    phone = await setup.phone()
    rtp, inbox = await rtp_socket()
    phone.send(phone.invite(call_id, "z9hG4bK" + call_id, body=sdp("127.0.0.1", port_of(rtp))))
    answer = await phone.final(10)
    assert answer.status_code == 200
    phone.send(phone.request("ACK", call_id, "z9hG4bKack" + call_id, to_tag=to_tag(answer)))
    assert await hears_rtp(inbox)
    return phone, to_tag(answer), rtp, inbox, answer


async def reinvite(phone: Phone, call_id: str, ours: str, cseq: int, body: str, **kw: str) -> SipResponse:
    """A re-INVITE, its final answer, and (for a 2xx) the ACK."""
    branch = f"z9hG4bKre{uuid.uuid4().hex[:8]}"
    phone.send(phone.request("INVITE", call_id, branch, to_tag=ours, cseq=cseq, body=body, **kw))
    final = await phone.final()
    if final.status_code == 200:
        phone.send(phone.request("ACK", call_id, branch + "a", to_tag=ours, cseq=cseq, **kw))
    return final


# --- an answered call's re-INVITE --------------------------------------------------------------------------


async def test_a_refresh_reinvite_is_answered_200_with_the_same_sdp_and_the_call_goes_on(sip):
    setup = await sip()
    phone, ours, rtp, inbox, first = await answered_call(setup, "refresh-1")
    body = sdp("127.0.0.1", port_of(rtp))
    refreshed = await reinvite(phone, "refresh-1", ours, 2, body)
    assert refreshed.status_code == 200  # before: no final answer at all
    assert refreshed.content_type == "application/sdp" and origin(refreshed) == origin(first)  # nothing changed
    assert direction(refreshed) == "sendrecv"
    again = phone.request("INVITE", "refresh-1", "z9hG4bKagain", to_tag=ours, cseq=3, body=body)
    phone.send(again)
    assert (await phone.final()).status_code == 200
    phone.send(again)  # a retransmission: absorbed (our 200 is sent again until the ACK), never a 500
    assert (await phone.final()).status_code == 200
    phone.send(phone.request("ACK", "refresh-1", "z9hG4bKagaina", to_tag=ours, cseq=3))
    bodyless = await reinvite(phone, "refresh-1", ours, 4, "")  # the offer in our 200
    assert bodyless.status_code == 200 and origin(bodyless) == origin(first)
    await asyncio.sleep(0.6)  # past a 200's first retransmission: the ACK stopped it, nothing ended
    assert setup.listener.calls["refresh-1"].state == "active"
    assert await hears_rtp(inbox)
    rtp.close()


async def test_hold_is_answered_recvonly_or_inactive_and_sendrecv_resumes_the_audio(sip):
    setup = await sip()
    phone, ours, rtp, inbox, first = await answered_call(setup, "hold-1")
    session_id, version = origin(first)
    body = sdp("127.0.0.1", port_of(rtp))
    held = await reinvite(phone, "hold-1", ours, 2, with_direction(body, "sendonly"))
    assert held.status_code == 200 and direction(held) == "recvonly"
    assert origin(held) == (session_id, str(int(version) + 1))
    assert await silent(inbox)  # on hold: nothing sent
    inactive = await reinvite(phone, "hold-1", ours, 3, with_direction(body, "inactive"))
    assert inactive.status_code == 200 and direction(inactive) == "inactive"
    resumed = await reinvite(phone, "hold-1", ours, 4, with_direction(body, "sendrecv"))
    assert resumed.status_code == 200 and direction(resumed) == "sendrecv"
    assert origin(resumed) == (session_id, str(int(version) + 3))
    assert await hears_rtp(inbox)
    assert setup.listener.calls["hold-1"].state == "active"
    rtp.close()


async def test_a_reinvite_naming_a_new_audio_address_moves_the_rtp_there(sip):
    setup = await sip()
    phone, ours, rtp, inbox, _ = await answered_call(setup, "move-1")
    moved, moved_inbox = await rtp_socket()
    answer = await reinvite(phone, "move-1", ours, 2, sdp("127.0.0.1", port_of(moved)))
    assert answer.status_code == 200
    assert await hears_rtp(moved_inbox)
    assert await silent(inbox)
    rtp.close()
    moved.close()


@pytest.mark.parametrize("address", ["IP4 224.0.0.1", "IP4 255.255.255.255", "IP6 ::1"])
async def test_a_reinvite_whose_audio_cannot_be_unicast_to_is_488_and_the_call_goes_on(sip, address):
    setup = await sip()
    phone, ours, rtp, inbox, first = await answered_call(setup, "bad-media-1")
    body = sdp("127.0.0.1", port_of(rtp)).replace("c=IN IP4 127.0.0.1", f"c=IN {address}")
    refused = phone.request("INVITE", "bad-media-1", "z9hG4bKbadmedia", to_tag=ours, cseq=2, body=body)
    phone.send(refused)
    assert (await phone.final()).status_code == 488
    phone.send(refused)  # a retransmission (its CSeq not new): the same answer, not aiosipua's 500
    assert (await phone.final()).status_code == 488
    assert setup.listener.calls["bad-media-1"].state == "active"
    assert await hears_rtp(inbox)  # RTP still goes where it went
    refreshed = await reinvite(phone, "bad-media-1", ours, 3, sdp("127.0.0.1", port_of(rtp)))
    assert refreshed.status_code == 200 and origin(refreshed) == origin(first)
    rtp.close()


async def test_a_reinvite_from_another_host_or_with_a_wrong_tag_is_481_and_changes_nothing(sip):
    setup = await sip()
    phone, ours, rtp, inbox, first = await answered_call(setup, "stranger-1")
    stranger = await setup.phone(STRANGER)
    elsewhere, elsewhere_inbox = await rtp_socket()
    hijack = with_direction(sdp("127.0.0.1", port_of(elsewhere)), "inactive")
    answer = await reinvite(stranger, "stranger-1", ours, 2, hijack, from_tag=phone.tag)
    assert answer.status_code == 481
    assert (await reinvite(phone, "stranger-1", "wrong", 3, hijack)).status_code == 481
    assert await hears_rtp(inbox) and elsewhere_inbox.queue.empty()
    refreshed = await reinvite(phone, "stranger-1", ours, 4, sdp("127.0.0.1", port_of(rtp)))
    assert refreshed.status_code == 200 and origin(refreshed) == origin(first) and direction(refreshed) == "sendrecv"
    rtp.close()
    elsewhere.close()


# --- a placed call: its dialog's requests come from the callee -----------------------------------------------


class Callee:
    """A callee of raw SIP (a ``Phone``) that answers our INVITE 200 with an SDP of its RTP socket."""

    def __init__(self, phone: Phone, rtp: asyncio.DatagramTransport, inbox: _Inbox) -> None:
        self.phone, self.rtp, self.inbox = phone, rtp, inbox
        self.invite: SipRequest | None = None
        self.tag = "callee" + uuid.uuid4().hex[:6]

    async def answer(self) -> None:
        while self.invite is None:
            message = SipMessage.parse(await asyncio.wait_for(self.phone.inbox.queue.get(), 10))
            if isinstance(message, SipRequest) and message.method == "INVITE":
                self.invite = message
        invite, body = self.invite, sdp(self.phone.host, port_of(self.rtp))
        lines = [
            "SIP/2.0 200 OK",
            *(f"Via: {via}" for via in invite.headers.get("via")),
            f"From: {invite.headers.get_first('from')}",
            f"To: {invite.headers.get_first('to')};tag={self.tag}",
            f"Call-ID: {invite.call_id}",
            f"CSeq: {invite.headers.get_first('cseq')}",
            f"Contact: <sip:callee@{self.phone.host}:{self.phone.port}>",
            "Content-Type: application/sdp",
            f"Content-Length: {len(body)}",
            "",
            body,
        ]
        self.phone.send("\r\n".join(lines).encode())

    @property
    def ours(self) -> str:
        """Our tag (the INVITE's From tag): the To tag of the callee's requests."""
        assert self.invite is not None and self.invite.from_addr is not None
        return self.invite.from_addr.tag or ""

    async def response(self, status: int) -> SipResponse:
        """The next response of ``status`` (our ACK and RTP pass by)."""
        while True:
            message = SipMessage.parse(await asyncio.wait_for(self.phone.inbox.queue.get(), 5))
            if isinstance(message, SipResponse) and message.status_code == status:
                return message
            if isinstance(message, SipResponse) and message.status_code >= 200:
                raise AssertionError(f"unexpected {message.status_code} {message.reason_phrase}")


async def placed_call(setup) -> tuple[OutboundCall, Callee]:
    """A call the agent places to a raw callee on loopback, answered."""
    phone = await setup.phone()
    rtp, inbox = await rtp_socket()
    callee = Callee(phone, rtp, inbox)
    target, _ = dialling.read({"sip": {"to": f"sip:+15551234567@127.0.0.1:{phone.port}"}})
    call = OutboundCall(setup.listener.dialler, runtime.current(), target, ("127.0.0.1", phone.port), Owner())
    request = OpenRequest(
        transport=TransportKind.SIP,
        principal=auth.ANONYMOUS,
        owner=Owner(),
        client_addr=call.client_addr,
        call_id=call.id,
    )
    await call.dial(request)
    await callee.answer()
    assert await hears_rtp(inbox)
    assert call.record.status == "answered"
    return call, callee


def in_dialog(phone: Phone, callee: Callee, method: str, cseq: int, body: str = "", from_tag: str = "") -> bytes:
    """A request of the callee's dialog (its tag in From, ours in To), sent from ``phone``."""
    assert callee.invite is not None
    branch = f"z9hG4bKc{uuid.uuid4().hex[:8]}"
    return phone.request(
        method,
        callee.invite.call_id or "",
        branch,
        to_tag=callee.ours,
        from_tag=from_tag or callee.tag,
        cseq=cseq,
        body=body,
    )


async def test_a_placed_calls_bye_from_another_host_is_481_and_the_callees_own_ends_it(sip):
    setup = await sip()
    call, callee = await placed_call(setup)
    stranger = await setup.phone(STRANGER)
    stranger.send(in_dialog(stranger, callee, "BYE", 1, from_tag=callee.tag))
    assert (await stranger.final()).status_code == 481  # before: 200, and the call ended
    await asyncio.sleep(0.2)
    assert call.record.status == "answered" and await hears_rtp(callee.inbox)
    callee.phone.send(in_dialog(callee.phone, callee, "BYE", 2))
    assert (await callee.response(200)).status_code == 200
    for _ in range(50):
        if call.record.status == "ended":
            break
        await asyncio.sleep(0.05)
    assert (call.record.status, call.record.end_reason) == ("ended", "callee_hung_up")
    callee.rtp.close()


async def test_a_placed_calls_reinvite_is_answered_and_a_strangers_is_481(sip):
    setup = await sip()
    call, callee = await placed_call(setup)
    stranger = await setup.phone(STRANGER)
    body = sdp("127.0.0.1", port_of(callee.rtp))
    stranger.send(in_dialog(stranger, callee, "INVITE", 1, with_direction(body, "inactive"), from_tag=callee.tag))
    assert (await stranger.final()).status_code == 481  # before: 481 to the callee's own too
    callee.phone.send(in_dialog(callee.phone, callee, "INVITE", 2, with_direction(body, "sendonly")))
    held = await callee.response(200)
    callee.phone.send(in_dialog(callee.phone, callee, "ACK", 2))
    assert direction(held) == "recvonly"
    assert await silent(callee.inbox)
    callee.phone.send(in_dialog(callee.phone, callee, "INVITE", 3, body))
    assert direction(await callee.response(200)) == "sendrecv"
    callee.phone.send(in_dialog(callee.phone, callee, "ACK", 3))
    assert await hears_rtp(callee.inbox)
    assert call.record.status == "answered" and call.reinvite is None
    await call.finish("server_closed", "ended", "hung_up")
    callee.rtp.close()
