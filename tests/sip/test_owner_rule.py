"""A SIP request acts only on the call it belongs to (issue 49's SIP part), on a listener in this process.

Each test is an attack that worked before: a CANCEL on the attacker's own transaction that named the
victim's Call-ID ended the victim's call; an untrusted INVITE that reused a ringing call's Call-ID got
100 Trying, a transaction for 300 s and a CANCEL that rang the real caller off (487); a BYE with the
right tags from another host hung up; refused and declined INVITEs left aiosipua's dialog and
transaction behind; an offer of ``::1``, broadcast or multicast audio was answered 200; an empty
Call-ID was answered; every 403 was a log line. The listener runs on the test's event loop with the
loopback pool (fake stages); the phones are raw SIP over UDP sockets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiosipua import SipMessage, SipResponse

from realtime.node import runtime
from realtime.transports.sip.config import SipConfig
from realtime.transports.sip.signalling import SipListener
from tests.sip.conftest import SECRET, Webhook
from tests.support.server import free_port

pytestmark = pytest.mark.django_db(transaction=True)

STRANGER = "127.0.0.2"  # another host, as far as the listener can tell


def sdp(host: str, port: int) -> str:
    return (
        f"v=0\r\no=- 1 1 IN IP4 {host}\r\ns=-\r\nc=IN IP4 {host}\r\nt=0 0\r\n"
        f"m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    )


class _Inbox(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.queue.put_nowait(data)


@dataclass
class Phone:
    """A SIP phone of raw messages on a UDP socket at ``host`` (and an RTP socket that hears nothing)."""

    host: str
    server_port: int
    transport: asyncio.DatagramTransport
    inbox: _Inbox
    rtp: asyncio.DatagramTransport
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def port(self) -> int:
        return self.transport.get_extra_info("sockname")[1]

    @property
    def rtp_port(self) -> int:
        return self.rtp.get_extra_info("sockname")[1]

    def request(
        self,
        method: str,
        call_id: str,
        branch: str,
        *,
        to_tag: str = "",
        from_tag: str = "",
        cseq: int = 1,
        body: str = "",
    ) -> bytes:
        to = "<sip:agent@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
        return (
            f"{method} sip:agent@127.0.0.1:{self.server_port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP {self.host}:{self.port};branch={branch};rport\r\n"
            f"From: <sip:caller@{self.host}>;tag={from_tag or self.tag}\r\nTo: {to}\r\nCall-ID: {call_id}\r\n"
            f"CSeq: {cseq} {method}\r\nMax-Forwards: 70\r\nContact: <sip:caller@{self.host}:{self.port}>\r\n"
            + ("Content-Type: application/sdp\r\n" if body else "")
            + f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()

    def invite(self, call_id: str, branch: str, body: str | None = None) -> bytes:
        return self.request("INVITE", call_id, branch, body=sdp(self.host, self.rtp_port) if body is None else body)

    def send(self, message: bytes) -> None:
        self.transport.sendto(message, ("127.0.0.1", self.server_port))

    async def next(self, timeout: float = 5.0) -> SipResponse:
        message = SipMessage.parse(await asyncio.wait_for(self.inbox.queue.get(), timeout))
        assert isinstance(message, SipResponse), message
        return message

    async def final(self, timeout: float = 5.0) -> SipResponse:
        """The next final (non-1xx) response."""
        while True:
            response = await self.next(timeout)
            if response.status_code >= 200:
                return response

    async def until(self, status: int, timeout: float = 5.0) -> SipResponse:
        while True:
            response = await self.next(timeout)
            if response.status_code == status:
                return response

    async def nothing_final(self, seconds: float = 0.5) -> None:
        """No final response for ``seconds``."""
        try:
            response = await self.final(seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected {response.status_code} {response.reason_phrase}")

    async def call(self, call_id: str, branch: str) -> SipResponse:
        """INVITE, and the ACK of its 200 OK; returns the 200 (its To tag is the dialog's)."""
        self.send(self.invite(call_id, branch))
        answer = await self.final(10)
        assert answer.status_code == 200, (answer.status_code, answer.reason_phrase)
        self.send(self.request("ACK", call_id, branch + "ack", to_tag=to_tag(answer)))
        return answer

    def close(self) -> None:
        self.transport.close()
        self.rtp.close()


def to_tag(response: SipResponse) -> str:
    return (response.to_addr.tag if response.to_addr else None) or ""


@dataclass
class Setup:
    listener: SipListener
    phone: Callable[..., Awaitable[Phone]]


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
async def sip(loopback_pool) -> AsyncIterator[Callable[..., Awaitable[Setup]]]:
    """Starts a listener on a free port with ``SipConfig`` overrides; its phones are made by ``setup.phone(host)``."""
    listeners: list[SipListener] = []
    phones: list[Phone] = []

    async def start(**overrides: object) -> Setup:
        port = free_port()
        first_rtp = 30000 + port % 5000 * 2
        config = SipConfig(host="127.0.0.1", port=port, rtp_ports=(first_rtp, first_rtp + 40), **overrides)  # type: ignore[arg-type]
        listener = SipListener(config)
        await listener.start(runtime.current())
        listeners.append(listener)

        async def phone(host: str = "127.0.0.1") -> Phone:
            loop = asyncio.get_running_loop()
            transport, inbox = await loop.create_datagram_endpoint(_Inbox, local_addr=(host, 0))
            rtp, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=(host, 0))
            made = Phone(host, port, transport, inbox, rtp)  # type: ignore[arg-type]
            phones.append(made)
            return made

        return Setup(listener, phone)

    yield start
    for made in phones:
        made.close()
    for listener in listeners:
        await listener.stop()


def ringing(hook: Webhook, **overrides: object) -> dict[str, object]:
    """Settings under which a call rings (the webhook is told, nobody accepts for a minute)."""
    return {"webhook_url": hook.url, "webhook_secret": SECRET, "accept_timeout_s": 60.0, **overrides}


async def rings(phone: Phone, call_id: str, branch: str) -> SipResponse:
    phone.send(phone.invite(call_id, branch))
    return await phone.until(180, 10)


# --- CANCEL: by its transaction --------------------------------------------------------------


async def test_a_cancel_on_the_attackers_own_branch_naming_the_victims_call_id_ends_nothing(sip):
    setup = await sip()
    victim, attacker = await setup.phone(), await setup.phone(STRANGER)
    await victim.call("victim-1", "z9hG4bKv1")
    attacker.send(attacker.invite("attacker-1", "z9hG4bKm1"))
    assert (await attacker.final(10)).status_code == 200  # its own call, never ACKed
    attacker.send(attacker.request("CANCEL", "victim-1", "z9hG4bKm1"))
    assert (await attacker.final()).status_code == 481  # before: 200, and the victim's call ended
    await asyncio.sleep(0.3)
    assert setup.listener.calls["victim-1"].state == "active"


async def test_the_callers_own_cancel_ends_its_ringing_call_with_487(sip, webhook):
    setup = await sip(**ringing(webhook))
    phone = await setup.phone()
    await rings(phone, "own-cancel", "z9hG4bKown")
    phone.send(phone.request("CANCEL", "own-cancel", "z9hG4bKown"))
    statuses = {(await phone.final()).status_code, (await phone.final()).status_code}
    assert statuses == {200, 487}
    for _ in range(50):
        if not setup.listener.calls:
            break
        await asyncio.sleep(0.05)
    assert setup.listener.calls == {} and setup.listener.held == (0, 0)


async def test_a_cancel_from_another_port_or_of_an_answered_call_is_481(sip):
    setup = await sip()
    victim, same_host = await setup.phone(), await setup.phone()
    await victim.call("answered-1", "z9hG4bKa1")
    same_host.send(same_host.request("CANCEL", "answered-1", "z9hG4bKa1", from_tag=victim.tag))
    assert (await same_host.final()).status_code == 481  # the right transaction, from another source
    victim.send(victim.request("CANCEL", "answered-1", "z9hG4bKa1"))
    assert (await victim.final()).status_code == 481  # answered: its INVITE transaction is over
    await asyncio.sleep(0.3)
    assert setup.listener.calls["answered-1"].state == "active"


# --- INVITE: the gate before any state, a duplicate Call-ID refused ------------------------------


async def test_an_untrusted_invite_reusing_a_ringing_call_id_is_403_and_its_cancel_rings_nobody_off(sip, webhook):
    setup = await sip(**ringing(webhook, trusted=(ipaddress.ip_network("127.0.0.1/32"),)))
    caller, stranger = await setup.phone(), await setup.phone(STRANGER)
    await rings(caller, "ringing-1", "z9hG4bKr1")
    stranger.send(stranger.invite("ringing-1", "z9hG4bKevil"))
    assert (await stranger.next()).status_code == 403  # before: 100 Trying, and a transaction for 300 s
    stranger.send(stranger.request("CANCEL", "ringing-1", "z9hG4bKevil"))
    assert (await stranger.final()).status_code == 481
    await caller.nothing_final()  # before: 487 Request Terminated
    assert setup.listener.calls["ringing-1"].state == "ringing"
    assert setup.listener.held == (1, 1)


async def test_over_tcp_an_untrusted_invite_reusing_a_ringing_call_id_and_its_cancel_are_refused(sip, webhook):
    setup = await sip(**ringing(webhook, trusted=(ipaddress.ip_network("127.0.0.1/32"),)))
    caller, stranger = await setup.phone(), await setup.phone(STRANGER)  # the stranger's messages go over TCP
    await rings(caller, "ringing-tcp", "z9hG4bKrt1")
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.listener.config.port, local_addr=(STRANGER, 0))

    async def exchange(message: bytes) -> int:
        writer.write(message.replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        return int(head.split(b" ", 2)[1])

    try:
        assert await exchange(stranger.invite("ringing-tcp", "z9hG4bKtevil")) == 403  # before: 100 Trying
        assert await exchange(stranger.request("CANCEL", "ringing-tcp", "z9hG4bKtevil")) == 481
    finally:
        writer.close()
    await caller.nothing_final()  # before: 487 Request Terminated
    assert setup.listener.calls["ringing-tcp"].state == "ringing" and setup.listener.held == (1, 1)


async def test_a_duplicate_call_id_from_a_trusted_source_is_482_and_a_retransmission_is_absorbed(sip, webhook):
    setup = await sip(**ringing(webhook))
    caller, other = await setup.phone(), await setup.phone()
    answer = await rings(caller, "dup-1", "z9hG4bKd1")
    call = setup.listener.calls["dup-1"]
    other.send(other.invite("dup-1", "z9hG4bKd2"))
    assert (await other.final()).status_code == 482
    caller.send(caller.invite("dup-1", "z9hG4bKd1"))  # the same transaction again: no second call
    assert (await caller.next()).status_code == 100
    caller.send(caller.invite("dup-1", "z9hG4bKd3"))  # the same caller, another transaction
    assert (await caller.final()).status_code == 482
    early = caller.request("INVITE", "dup-1", "z9hG4bKd4", to_tag=to_tag(answer), body=sdp("127.0.0.1", 4000))
    caller.send(early)  # a re-INVITE in the early dialog: aiosipua took it for a new call
    assert (await caller.final()).status_code == 491
    assert setup.listener.calls == {"dup-1": call} and call.state == "ringing"
    assert setup.listener.held == (1, 1)


async def test_refused_and_declined_invites_leave_no_dialog_or_transaction_behind(sip, webhook):
    setup = await sip(**ringing(webhook, trusted=(ipaddress.ip_network("127.0.0.1/32"),)))
    first, second, third = [await setup.phone() for _ in range(3)]
    stranger = await setup.phone(STRANGER)
    await rings(first, "held-1", "z9hG4bKh1")
    await rings(second, "held-2", "z9hG4bKh2")  # the pool of 2 is full
    third.send(third.invite("busy-1", "z9hG4bKh3"))
    assert (await third.final()).status_code == 486  # never ACKed
    for batch in range(10):  # 20 at a time: more at once could overflow a socket's buffer on a loaded machine
        for index in range(batch * 20, batch * 20 + 20):
            stranger.send(stranger.invite("held-1" if index % 2 else f"flood-{index}", f"z9hG4bKf{index}"))
        for _ in range(20):
            assert (await stranger.next()).status_code == 403  # no 100 Trying: nothing was made
    await asyncio.sleep(0.2)
    assert setup.listener.held == (2, 2)  # before: 3 dialogs and 102 transactions, for 300 s
    await asyncio.sleep(1.1)  # the watchdog's next look: the metrics say the same (bench/sip_flood.py reads them)
    exposition = runtime.current().metrics.render().decode()
    assert 's2s_sip_held{kind="calls"} 2.0' in exposition and 's2s_sip_held{kind="transactions"} 2.0' in exposition


async def test_calls_from_one_address_are_bounded_and_beyond_it_503_holds_nothing(sip, webhook):
    setup = await sip(**ringing(webhook, max_calls_per_address=1))
    first, second, elsewhere = await setup.phone(), await setup.phone(), await setup.phone(STRANGER)
    await rings(first, "bound-1", "z9hG4bKb1")
    second.send(second.invite("bound-2", "z9hG4bKb2"))
    answer = await second.final()
    assert answer.status_code == 503 and answer.headers.get_first("retry-after") == "5"
    await rings(elsewhere, "bound-3", "z9hG4bKb3")  # another address still gets in
    assert sorted(setup.listener.calls) == ["bound-1", "bound-3"] and setup.listener.held == (2, 2)


async def test_an_invite_with_an_empty_call_id_is_400(sip):
    setup = await sip()
    phone = await setup.phone()
    phone.send(phone.invite("x", "z9hG4bKempty").replace(b"Call-ID: x\r\n", b"Call-ID: \r\n"))
    answer = await phone.final()
    assert (answer.status_code, answer.reason_phrase) == (400, "Empty Call-ID")
    assert setup.listener.calls == {} and setup.listener.held == (0, 0)


# --- BYE: both tags and the caller's host --------------------------------------------------------


async def test_a_bye_with_the_right_tags_from_another_host_is_481_and_the_callers_own_ends_the_call(sip):
    setup = await sip()
    caller, stranger = await setup.phone(), await setup.phone(STRANGER)
    ours = to_tag(await caller.call("bye-1", "z9hG4bKbye"))
    stranger.send(stranger.request("BYE", "bye-1", "z9hG4bKs1", to_tag=ours, from_tag=caller.tag, cseq=2))
    assert (await stranger.final()).status_code == 481  # before: 200, and the call ended
    caller.send(caller.request("BYE", "bye-1", "z9hG4bKs2", to_tag="wrong", cseq=2))
    assert (await caller.final()).status_code == 481
    await asyncio.sleep(0.2)
    assert setup.listener.calls["bye-1"].state == "active"
    caller.send(caller.request("BYE", "bye-1", "z9hG4bKs3", to_tag=ours, cseq=3))
    assert (await caller.final()).status_code == 200
    for _ in range(50):
        if not setup.listener.calls and setup.listener.held == (0, 0):
            break
        await asyncio.sleep(0.05)
    assert setup.listener.calls == {} and setup.listener.held == (0, 0)


# --- media addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["IP6 ::1", "IP6 fe80::1", "IP4 255.255.255.255", "IP4 224.0.0.1", "IP4 0.0.0.0"])
async def test_an_offer_of_audio_that_cannot_be_unicast_to_is_488_and_holds_nothing(sip, address):
    setup = await sip()
    phone = await setup.phone()
    body = sdp("127.0.0.1", phone.rtp_port).replace("c=IN IP4 127.0.0.1", f"c=IN {address}")
    phone.send(phone.invite("media-1", "z9hG4bKmedia", body=body))
    assert (await phone.final()).status_code == 488  # before: 200, then a failed send every 20 ms
    assert setup.listener.calls == {} and setup.listener.held == (0, 0)


# --- the log ---------------------------------------------------------------------------------------


async def test_a_flood_of_refusals_from_one_address_is_one_log_line(sip, caplog):
    setup = await sip(trusted=(ipaddress.ip_network("127.0.0.1/32"),))
    stranger = await setup.phone(STRANGER)
    with caplog.at_level(logging.INFO, logger="realtime.transports.sip"):
        for batch in range(5):
            for index in range(batch * 10, batch * 10 + 10):
                stranger.send(stranger.invite(f"refused-{index}", f"z9hG4bKl{index}"))
            for _ in range(10):
                assert (await stranger.final()).status_code == 403
    lines = [record.getMessage() for record in caplog.records if STRANGER in record.getMessage()]
    assert len(lines) == 1 and "refused (403)" in lines[0]  # before: 50 lines
    assert setup.listener.refused == 50
