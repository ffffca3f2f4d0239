"""Offers the server cannot answer get a clear 400, and none of them holds a unit."""

from __future__ import annotations

import asyncio
import json
import random
import re

from aiortc import RTCPeerConnection

from tests.support.webrtc_client import Microphone, multipart, post
from tests.webrtc.conftest import wait_free

SDP = "application/sdp"


async def offer(audio: bool = True, channel: bool = True) -> str:
    pc = RTCPeerConnection()
    if channel:
        pc.createDataChannel("oai-events")
    if audio:
        pc.addTrack(Microphone())
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


def without(sdp: str, prefix: str) -> str:
    return "\r\n".join(line for line in sdp.split("\r\n") if not line.startswith(prefix))


async def bad_offers() -> list[tuple[str, bytes, str]]:
    """100 bodies no server could answer: (what it is, body, content type)."""
    rng = random.Random(11)
    good = await offer()
    cases: list[tuple[str, bytes, str]] = []
    for n in range(20):
        cases.append((f"random bytes {n}", rng.randbytes(rng.randint(0, 3000)), SDP))
    for n in range(15):
        text = "".join(rng.choice("abcdefgv=0m \r\n:;/") for _ in range(rng.randint(1, 800)))
        cases.append((f"random text {n}", text.encode(), SDP))
    for n in range(10):
        cases.append((f"no audio m-line {n}", (await offer(audio=False)).encode(), SDP))
    for _ in range(10):  # cut before the audio section's credentials
        cut = rng.randint(10, good.index("a=ice-ufrag"))
        cases.append((f"truncated at {cut}", good[:cut].encode(), SDP))
    for prefix in ("a=fingerprint", "a=ice-ufrag", "a=ice-pwd", "a=rtpmap", "m=audio", "v=0"):
        cases.append((f"without {prefix}", without(good, prefix).encode(), SDP))
    for codec in ("telephone-event/8000", "foo/48000/2", "VP8/90000"):
        only = re.sub(r"a=rtpmap:(\d+) [^\r]+", lambda m, codec=codec: f"a=rtpmap:{m.group(1)} {codec}", good)
        cases.append((f"audio with only {codec}", only.encode(), SDP))
    cases += [
        ("empty body", b"", SDP),
        ("JSON instead of SDP", json.dumps({"sdp": good}).encode(), "application/json"),
        ("latin-1 bytes", "v=0\r\nó".encode("latin-1"), SDP),
        ("2,000 codecs", good.replace("a=rtpmap:", "a=rtpmap:0 x/1\r\n" * 2000 + "a=rtpmap:", 1).encode(), SDP),
        ("m=audio with a bad port", re.sub(r"m=audio \d+ ", "m=audio nine ", good).encode(), SDP),
        ("form without sdp", *multipart({"session": "{}"})),
        ("form with garbage sdp", *multipart({"sdp": "hello"})),
        ("form with session not JSON", *multipart({"sdp": good, "session": "{not json"})),
        ("form with session a list", *multipart({"sdp": good, "session": "[1, 2]"})),
        (
            "form with a bad voice",
            *multipart({"sdp": good, "session": json.dumps({"audio": {"output": {"voice": 5}}})}),
        ),
        (
            "form with a bad format",
            *multipart({"sdp": good, "session": json.dumps({"audio": {"input": {"format": {"type": "audio/mp3"}}}})}),
        ),
        (
            "form with a bad turn detection",
            *multipart(
                {"sdp": good, "session": json.dumps({"audio": {"input": {"turn_detection": {"type": "shouting"}}}})}
            ),
        ),
        (
            "broken multipart",
            b"--x\r\nContent-Disposition: form-data; name=sdp\r\n\r\nv=0",
            "multipart/form-data; boundary=x",
        ),
        ("a url-encoded form with garbage sdp", b"sdp=v%3D0%0D%0Ahello", "application/x-www-form-urlencoded"),
    ]
    while len(cases) < 100:
        n = len(cases)
        line = rng.choice([line for line in good.split("\r\n") if line.startswith(("a=", "m=", "c="))])
        mangled = good.replace(line, line[:2] + "".join(rng.choice("#$%^&*") for _ in range(8)), 1)
        cases.append((f"mangled line {n}: {line[:20]}", without(mangled, "a=fingerprint").encode(), SDP))
    return cases[:100]


async def test_a_hundred_bad_offers_get_a_clear_400_and_leak_no_unit(server, calls):
    cases = await bad_offers()
    assert len(cases) == 100
    for what, body, content_type in cases:
        answer = await asyncio.to_thread(post, f"{server.http}/v1/realtime/calls", body, content_type)
        assert answer.status == 400, (what, answer.status, answer.headers, answer.body[:300])
        assert answer.headers.get("Content-Type") == "application/json", (what, answer.body[:300])
        error = answer.json["error"]
        assert error["type"] == "invalid_request_error" and error["code"] and len(error["message"]) > 20, (what, error)
        assert b"v=0" not in answer.body[:10], what
    assert await wait_free(server, 2) == 2
    assert "Traceback" not in server.log()
    for _ in range(2):  # both units still answer calls
        call = calls(server)
        assert (await call.connect()).status == 201
        await call.events.until("session.created")
    for call in (calls(server),):
        assert (await call.connect()).status == 429
