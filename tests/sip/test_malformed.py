"""Garbage on the SIP port and RTP from a stranger: refused, nothing held, the next real call answered."""

from __future__ import annotations

import os
import random
import socket
import struct

from tests.sip.conftest import free_units, loud_seconds, wait_free, wait_settled
from tests.support.polling import wait_for


def sip_port(server) -> int:
    return int(server.sip_uri.rsplit(":", 1)[1])


def rtp_ports(server) -> range:
    first, last = (int(port) for port in server.env["S2S_SIP_RTP_PORTS"].split("-"))
    return range(first, last, 2)


def invite(call_id: str, body: str = "", **overrides: str) -> bytes:
    headers = {
        "Via": f"SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{call_id};rport",
        "From": f"<sip:mallory@127.0.0.1>;tag={call_id}",
        "To": "<sip:agent@127.0.0.1>",
        "Call-ID": call_id,
        "CSeq": "1 INVITE",
        "Max-Forwards": "70",
        "Contact": "<sip:mallory@127.0.0.1:5999>",
        "Content-Type": "application/sdp",
        **overrides,
    }
    lines = [f"{name}: {value}" for name, value in headers.items() if value]
    return (
        "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n"
        + "\r\n".join(lines)
        + f"\r\nContent-Length: {len(body)}\r\n\r\n"
        + body
    ).encode()


def malformed_messages(count: int) -> list[bytes]:
    """``count`` broken SIP messages of many kinds (seeded: the same ones every run)."""
    rng = random.Random(27)
    good_sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 5998 RTP/AVP 0\r\n"
    kinds = [
        lambda i: bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 1400))),  # noise
        lambda i: invite(f"m{i}")[: rng.randint(1, 200)],  # cut short
        lambda i: b"INVITE sip:agent@127.0.0.1 SIP/2.0\r\n\r\n",  # no headers at all
        lambda i: invite(f"m{i}", Via=""),  # no Via: cannot even be answered
        lambda i: invite(f"m{i}", CSeq="banana INVITE"),
        lambda i: invite(f"m{i}", body="not sdp at all \x00\xff"),
        lambda i: invite(f"m{i}", body="v=0\r\nm=video 1 RTP/AVP 96\r\n"),  # no audio
        lambda i: invite(f"m{i}", body=good_sdp.replace("RTP/AVP 0", "RTP/AVP 18")),  # no codec of ours
        lambda i: invite(f"m{i}", body=good_sdp)[:-30] + b"Content-Length: 99999\r\n\r\n",
        lambda i: invite(f"m{i}", **{"X-Long": "a" * 60000}),
        lambda i: "ÿþINVITE sip:agent SIP/2.0\r\nVia: \udcff\r\n\r\n".encode("utf-8", "surrogateescape"),
        lambda i: b"SIP/2.0 200 OK\r\nCall-ID: nobody\r\n\r\n",  # a response to nothing
        lambda i: (
            b"BYE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKx\r\n"
            b"From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: nosuch\r\nCSeq: 2 BYE\r\n\r\n"
        ),
    ]
    return [kinds[i % len(kinds)](i) for i in range(count)]


def test_a_hundred_malformed_sip_messages_are_refused_and_hold_nothing(server, phones):
    messages = malformed_messages(100)
    port = sip_port(server)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for message in messages[:80]:
            udp.sendto(message[:65000], ("127.0.0.1", port))
    for message in messages[80:]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as tcp:
            tcp.sendall(message)
    # Some of the broken INVITEs still carry an offer: their calls hold a unit until their RTP times out (3 s).
    assert wait_settled(server, 2, quiet_s=4.0) == 2
    phone = phones()  # the listener still answers a real call
    phone.dial(server.sip_uri)
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    phone.hang_up()
    assert wait_free(server, 2) == 2
    assert server.process is not None and server.process.poll() is None


def test_rtp_from_a_stranger_is_dropped_and_the_call_goes_on(server, phones):
    phone = phones()
    phone.dial(server.sip_uri)
    wait_for(lambda: free_units(server) == 1, 10, what="the call holding a unit")
    loud = b"\x00" * 160  # μ-law 0x00: the loudest sample
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.bind(("127.0.0.2", 0))  # another host as far as the call is concerned
        ssrc = int.from_bytes(os.urandom(4), "big")
        for seq, port in enumerate(rtp_ports(server)):
            stranger.sendto(struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + loud, ("127.0.0.1", port))
    wait_for(lambda: "RTP from a stranger (127.0.0.2" in server.full_log(), 10, what="the stranger's RTP dropped")
    wait_for(lambda: loud_seconds(*phone.heard()) >= 1.0, 30, what="the reply heard by the phone")
    phone.hang_up()
    assert wait_free(server, 2) == 2
