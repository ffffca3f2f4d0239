"""The SIP transport's parts on their own: the webhook signature, the settings, the reply's playout, the RTP guard."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
import struct
import time

import numpy as np
import openai
import pytest
from aiosipua import parse_sdp

from pipelines import audio
from realtime.transports.playout import ReplyQueue
from realtime.transports.sip import config
from realtime.transports.sip.media import FRAME_SAMPLES, RATE, GuardedRTPSession, telephone_event_type
from realtime.transports.sip.webhook import incoming_event, sign

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def test_the_webhook_signature_is_the_one_the_openai_sdk_checks():
    event = incoming_event("rtc_abc", [{"name": "From", "value": "<sip:+15550001111@trunk>"}])
    body = json.dumps(event)
    timestamp = int(time.time())
    headers = {"webhook-id": event["id"], "webhook-timestamp": str(timestamp)}
    headers["webhook-signature"] = sign(SECRET, event["id"], timestamp, body)
    parsed = openai.OpenAI(api_key="x", webhook_secret=SECRET).webhooks.unwrap(body, headers)
    assert parsed.type == "realtime.call.incoming"
    assert parsed.data.call_id == "rtc_abc"
    assert parsed.data.sip_headers[0].value == "<sip:+15550001111@trunk>"
    headers["webhook-signature"] = sign(SECRET, event["id"], timestamp, body + " ")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        openai.OpenAI(api_key="x", webhook_secret=SECRET).webhooks.unwrap(body, headers)


@pytest.mark.parametrize(("policy", "kept"), [("full", "+15550001234"), ("masked", "********1234"), ("none", "")])
def test_the_audit_keeps_the_numbers_as_the_operator_allows(policy, kept):
    assert config.SipConfig(numbers=policy).recorded_number("+15550001234") == kept


@pytest.mark.parametrize("raw", ["5060", "localhost:5060", "127.0.0.1:99999", "1.2.3.4:x", ":5060"])
def test_a_bind_address_that_is_not_an_ip_and_port_is_refused(raw):
    with pytest.raises(config.SipConfigError):
        config.parse_bind(raw)


def test_bind_addresses_and_port_ranges_are_read():
    assert config.parse_bind("0.0.0.0:5060") == ("0.0.0.0", 5060)
    assert config.parse_bind("[::1]:5062") == ("::1", 5062)
    assert config.parse_port_range("10000-10999") == (10000, 10999)
    for bad in ("10000", "20000-10000", "80-90", "10000-10001"):
        with pytest.raises(config.SipConfigError):
            config.parse_port_range(bad)
    with pytest.raises(config.SipConfigError):
        config.parse_session("[1, 2]")
    assert config.parse_session('{"instructions": "hi"}') == {"instructions": "hi"}


def test_the_sdp_address_is_the_advertised_one_behind_nat():
    assert config.SipConfig(host="10.0.0.5", advertised_ip="203.0.113.10").sdp_ip == "203.0.113.10"
    assert config.SipConfig(host="10.0.0.5").sdp_ip == "10.0.0.5"


def test_the_reply_plays_in_20_ms_frames_and_says_when_it_starts_and_stops():
    said: list[str] = []
    playout = ReplyQueue(
        RATE, FRAME_SAMPLES, lambda r: said.append(f"started {r}"), lambda r: said.append(f"stopped {r}")
    )
    reply = audio.encode(np.full(2400, 0.5, dtype=np.float32), audio.PCM)  # 100 ms at 24 kHz
    playout.push("resp_1", "item_1", reply, audio.PCM)
    playout.finish("resp_1")
    frames = [playout.next_frame() for _ in range(8)]
    assert all(len(frame) == FRAME_SAMPLES * 2 for frame in frames)
    loud = [np.abs(np.frombuffer(frame, dtype="<i2")).max() > 8000 for frame in frames]
    assert loud[:4] == [True] * 4 and not any(loud[6:])  # 100 ms of reply, then silence
    assert said == ["started resp_1", "stopped resp_1"]


def test_clearing_the_reply_stops_it_at_once_and_says_how_much_was_played():
    playout = ReplyQueue(RATE, FRAME_SAMPLES, lambda r: None, lambda r: None)
    playout.push("resp_1", "item_1", audio.encode(np.full(24000, 0.5, dtype=np.float32), audio.PCM), audio.PCM)
    for _ in range(10):
        playout.next_frame()
    assert playout.clear() == ("resp_1", "item_1", 200)
    playout.push("resp_1", "item_1", b"\x00\x40" * 480, audio.PCM)  # the rest of a cleared reply is not played
    assert playout.playing is None
    assert np.abs(np.frombuffer(playout.next_frame(), dtype="<i2")).max() == 0


def test_the_offers_telephone_event_type_is_found():
    offer = parse_sdp(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        "m=audio 4000 RTP/AVP 0 96\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:96 telephone-event/8000\r\n"
    )
    assert telephone_event_type(offer) == 96


async def test_rtp_from_a_host_other_than_the_callers_is_dropped():
    heard: list[bytes] = []
    session = await GuardedRTPSession.create(
        local_addr=("127.0.0.1", 0), remote_addr=("127.0.0.1", 9), payload_type=0, jitter_prefetch=0
    )
    session.allowed_hosts = frozenset({"127.0.0.1"})
    session.on_audio = lambda pcm, _ts: heard.append(pcm)
    port = session._rtp_transport._transport.get_extra_info("sockname")[1]
    try:
        for source, ssrc in (("127.0.0.2", 1), ("127.0.0.1", 2)):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                sender.bind((source, 0))
                for seq in range(5):
                    packet = struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + b"\xff" * 160
                    sender.sendto(packet, ("127.0.0.1", port))
            await asyncio.sleep(0.2)
            if source == "127.0.0.2":
                assert heard == [] and session.refused == 5
        assert len(heard) >= 4  # the caller's packets pass
    finally:
        await session.close()
