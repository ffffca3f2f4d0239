"""The pieces of the WebRTC hardening on their own: SDP line caps, candidates, offer rates, hang-up owners, the
bounded SCTP reassembly and the ASGI body cap (no server process)."""

from __future__ import annotations

import json

import pytest
from aiortc.rtcsctptransport import SCTP_DATA_FIRST_FRAG, SCTP_DATA_LAST_FRAG, DataChunk

from realtime.access.owner import Caller, Owner
from realtime.access.rate import MAX_TRACKED, CallLimits, RateTable
from realtime.server.body_limit import BodyLimit
from realtime.transports.calls import BadOffer
from realtime.transports.webrtc import offer_limits
from realtime.transports.webrtc.offer_limits import OfferCaps
from realtime.transports.webrtc.sctp_limit import BoundedInboundStream

CAPS = OfferCaps(size=2000, lines=100, media=2, codecs=4, feedback=4, candidates=3)
OFFER = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("a=rtpmap:111 opus/48000/2\r\n" * 5, "S2S_MAX_SDP_CODECS"),
        ("a=rtcp-fb:* nack\r\n" * 5, "S2S_MAX_SDP_FEEDBACK"),
        ("a=candidate:1 1 udp 1 10.0.0.1 9 typ host\r\n" * 4, "S2S_MAX_SDP_CANDIDATES"),
        ("m=audio 9 UDP/TLS/RTP/SAVPF 0\r\n" * 2, "S2S_MAX_SDP_MEDIA"),
        ("a=x\r\n" * 100, "S2S_MAX_SDP_LINES"),
    ],
    ids=["codecs", "feedback", "candidates", "m-lines", "lines"],
)
def test_an_offer_over_a_line_cap_is_refused_with_the_cap_named(extra, named):
    with pytest.raises(BadOffer) as refused:
        offer_limits.check(OFFER + extra, CAPS)
    assert refused.value.code == "offer_too_complex" and named in refused.value.message


def test_an_offer_over_its_byte_cap_is_refused_before_its_lines_are_counted():
    with pytest.raises(BadOffer, match="larger than 2000 bytes") as refused:
        offer_limits.check(OFFER + "a=x" + "y" * 2000 + "\r\n", CAPS)
    assert refused.value.code == "invalid_offer" and refused.value.param == "sdp"


def test_the_caps_come_from_the_settings_the_byte_cap_with_them(settings):
    settings.S2S_MAX_SDP_BYTES, settings.S2S_MAX_SDP_LINES = 4096, 50
    caps = OfferCaps.from_settings()
    assert (caps.size, caps.lines) == (4096, 50)


def test_a_wildcard_feedback_line_counts_once_per_codec_as_the_parser_expands_it():
    one_wildcard = OFFER + "a=rtpmap:111 opus/48000/2\r\n" * 4 + "a=rtcp-fb:* nack\r\n"
    offer_limits.check(one_wildcard, CAPS)  # 4 entries
    with pytest.raises(BadOffer, match="has 8 a=rtcp-fb entries"):
        offer_limits.check(one_wildcard + "a=rtcp-fb:* ccm fir\r\n", CAPS)


def test_an_offer_at_every_cap_passes_and_a_repeated_mid_does_not():
    at_caps = OFFER + "a=rtpmap:111 opus/48000/2\r\n" * 4 + "a=rtcp-fb:111 nack\r\n" * 4
    offer_limits.check(at_caps + "a=candidate:1 1 udp 1 10.0.0.1 9 typ host\r\n" * 3, CAPS)
    with pytest.raises(BadOffer, match="a=mid:0 twice"):
        offer_limits.check(OFFER + "m=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n", CAPS)


def test_candidates_on_loopback_and_link_local_addresses_are_dropped_and_others_kept():
    lines = [
        "a=candidate:1 1 udp 1 127.0.0.1 5000 typ host",
        "a=candidate:2 1 udp 1 169.254.10.1 5000 typ host",
        "a=candidate:3 1 udp 1 fe80::1%eth0 5000 typ host",
        "a=candidate:4 1 udp 1 ::1 5000 typ host",
        "a=candidate:5 1 udp 1 0.0.0.0 5000 typ host",
        "a=candidate:6 1 udp 1 192.168.1.20 5000 typ host",
        "a=candidate:7 1 udp 1 3b0e7c3a-1f.local 5000 typ host",
        "a=candidate:8 1 udp 1 203.0.113.9 5000 typ srflx raddr 127.0.0.1 rport 1",
    ]
    sdp, dropped = offer_limits.without_local_candidates(OFFER + "\r\n".join(lines) + "\r\n")
    assert dropped == 5
    kept = [line for line in sdp.splitlines() if line.startswith("a=candidate")]
    assert [line.split()[0] for line in kept] == ["a=candidate:6", "a=candidate:7", "a=candidate:8"]


def test_local_targets_are_allowed_only_to_a_server_reached_on_loopback(settings):
    settings.S2S_WEBRTC_LOCAL_CANDIDATES = "auto"
    assert offer_limits.local_targets_allowed(("127.0.0.1", 8000))
    assert not offer_limits.local_targets_allowed(("10.1.2.3", 8000))
    assert not offer_limits.local_targets_allowed(None)
    settings.S2S_WEBRTC_LOCAL_CANDIDATES = "drop"
    assert not offer_limits.local_targets_allowed(("127.0.0.1", 8000))


def test_the_offer_rate_refuses_past_the_burst_tells_when_to_retry_and_refills():
    now = [0.0]
    table = RateTable(2.0, 3, clock=lambda: now[0])
    assert [table.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert table.take("a") == pytest.approx(0.5)
    assert table.take("b") == 0.0  # another address has its own bucket
    now[0] = 0.5
    assert table.take("a") == 0.0


def test_the_rate_table_stays_bounded_under_many_addresses():
    now = [0.0]
    table = RateTable(1.0, 2, clock=lambda: now[0])
    for n in range(MAX_TRACKED + 500):
        table.take(f"10.0.{n // 256}.{n % 256}")
    assert len(table) <= MAX_TRACKED


def test_live_calls_are_capped_per_address_and_per_key(settings):
    settings.S2S_MAX_CALLS_PER_ADDRESS, settings.S2S_MAX_CALLS_PER_KEY = 2, 3
    held = [("10.0.0.1", "7"), ("10.0.0.1", "8"), ("10.0.0.2", "7"), ("10.0.0.3", "7")]
    refused = CallLimits.live_calls(held, "10.0.0.1", "9")
    assert refused is not None and "S2S_MAX_CALLS_PER_ADDRESS" in refused.message
    refused = CallLimits.live_calls(held, "10.0.0.9", "7")
    assert refused is not None and "S2S_MAX_CALLS_PER_KEY" in refused.message
    assert CallLimits.live_calls(held, "10.0.0.9", "8") is None
    assert CallLimits.live_calls(held, "10.0.0.9", "") is None  # auth off: no key to count


def test_a_call_is_hung_up_only_by_its_credential_its_api_key_or_staff():
    owner = Owner("hash-of-ek", 7)  # opened with a client secret minted by key 7
    assert owner.may_reach(Caller("hash-of-ek"))
    assert owner.may_reach(Caller("hash-of-key-7", 7))
    assert owner.may_reach(Caller("hash-of-another-ek-of-7", 7))
    assert owner.may_reach(Caller(staff=True))
    assert not owner.may_reach(Caller("hash-of-key-8", 8))
    assert not owner.may_reach(Caller())
    assert not owner.may_reach(Caller.from_message({"credential": "", "api_key_id": "7", "staff": "yes"}))
    assert owner.may_reach(Caller.from_message(Caller("h", 7).as_message()))
    assert Owner(open=True).may_reach(Caller())  # opened with authentication off
    assert not Owner().may_reach(Caller("hash-of-key-8", 8))  # no credential, no key: staff alone
    assert Owner().may_reach(Caller(staff=True))


def chunk(tsn: int, seq: int, data: bytes, first: bool, last: bool) -> DataChunk:
    made = DataChunk(flags=(SCTP_DATA_FIRST_FRAG if first else 0) | (SCTP_DATA_LAST_FRAG if last else 0))
    made.tsn, made.stream_id, made.stream_seq, made.protocol, made.user_data = tsn, 1, seq, 51, data
    return made


def fragments(tsn: int, seq: int, size: int, piece: int = 1000) -> list[DataChunk]:
    count = -(-size // piece)
    return [chunk(tsn + i, seq, b"x" * min(piece, size - i * piece), i == 0, i == count - 1) for i in range(count)]


def test_a_message_over_the_limit_is_dropped_while_reassembling_and_the_next_one_arrives():
    stream = BoundedInboundStream(limit=10_000)
    dropped_at = []
    for n, piece in enumerate(fragments(1, 0, 50_000)):
        added, freed, dropped = stream.add_bounded(piece)
        assert stream.held <= 10_000 + 1000
        if dropped:
            dropped_at.append(n)
        assert not list(stream.pop_messages())
    assert dropped_at == [10]  # once, as the limit was passed; the rest of it was never kept
    assert stream.held == 0 and not stream.reassembly
    for piece in fragments(51, 1, 5_000):
        stream.add_bounded(piece)
    messages = list(stream.pop_messages())
    assert [len(m[2]) for m in messages] == [5_000] and stream.held == 0


def test_a_message_at_the_limit_is_delivered_whole():
    stream = BoundedInboundStream(limit=10_000)
    for piece in fragments(1, 0, 10_000):
        assert stream.add_bounded(piece)[2] is False
    assert [len(m[2]) for m in stream.pop_messages()] == [10_000]


async def run_body_limit(messages: list[dict], headers: list[tuple[bytes, bytes]], cap: int, settings) -> tuple:
    settings.S2S_MAX_CALL_BODY_BYTES = cap
    seen: dict = {}

    async def app(scope, receive, send):
        seen["headers"] = scope["headers"]
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent: list[dict] = []
    queue = list(messages)

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/v1/realtime/calls", "headers": headers}
    await BodyLimit(app)(scope, receive, send)
    return sent, seen, len(queue)


async def test_the_asgi_body_cap_answers_413_json_on_content_length_or_as_chunks_pass_it(settings):
    sent, seen, unread = await run_body_limit(
        [{"type": "http.request", "body": b"x" * 10, "more_body": True}] * 5,
        [(b"content-length", b"999999")],
        100,
        settings,
    )
    assert sent[0]["status"] == 413 and unread == 5 and not seen  # refused before a byte was read
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_too_large"
    sent, seen, unread = await run_body_limit(
        [{"type": "http.request", "body": b"x" * 40, "more_body": True}] * 5,
        [(b"transfer-encoding", b"chunked")],
        100,
        settings,
    )
    assert sent[0]["status"] == 413 and unread == 2 and not seen  # refused at the chunk that passed it
    sent, seen, _ = await run_body_limit(
        [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"c"}],
        [(b"transfer-encoding", b"chunked")],
        100,
        settings,
    )
    assert sent[0]["status"] == 200 and seen["body"] == b"abc" and (b"content-length", b"3") in seen["headers"]
