"""No offer, body or call can stall or monopolise a node: the issue's attacks against a real daphne process.

Each test is sized to the finding it checks (docs/security.md, "WebRTC"); the figures themselves come from
``bench/webrtc_probe.py``. Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import time

import psutil
import pytest

from tests.support.server import LiveServer
from tests.support.webrtc_client import Answer, WebRTCClient, multipart, post
from tests.webrtc.conftest import wait_free
from tests.webrtc.test_bad_offers import offer

SDP = "application/sdp"
MiB = 1024 * 1024


def post_from(
    source: str,
    url_path: str,
    port: int,
    body: bytes,
    content_type: str,
    token: str | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> Answer:
    """An HTTP request from the loopback address ``source`` (another client, as the server sees it)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    sent = {"Content-Type": content_type, **(headers or {})} if content_type else dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, url_path, body=body if method == "POST" else None, headers=sent)
        response = connection.getresponse()
        return Answer(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def blow_up_offer(good: str, codecs: int = 1650, feedback: int = 2150) -> str:
    """The issue's offer: its audio m-line with ``codecs`` a=rtpmap and ``feedback`` a=rtcp-fb:* lines (63 KB)."""
    extra = "".join(f"a=rtpmap:{96 + n % 10} a/1\r\n" for n in range(codecs)) + "a=rtcp-fb:* n\r\n" * feedback
    return good.replace("a=rtpmap:", extra + "a=rtpmap:", 1)


def healthz_ms(port: int) -> float:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
    finally:
        connection.close()
    return (time.monotonic() - started) * 1000


def rss(server: LiveServer) -> int:
    assert server.process is not None
    return psutil.Process(server.process.pid).memory_info().rss


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """Authentication off, one call per client address, the offer rate on (1 a second, burst 4), short deadlines."""
    env = {
        "S2S_MAX_CALLS_PER_ADDRESS": "1",
        "S2S_CALL_OFFERS_PER_SECOND": "1",
        "S2S_CALL_OFFERS_BURST": "4",
        "S2S_WEBRTC_CONNECT_TIMEOUT_S": "4",
        "S2S_WEBRTC_SILENCE_TIMEOUT_S": "3",
        "S2S_WEBRTC_PEER_TIMEOUT_S": "15",
    }
    live = LiveServer(tmp_path_factory.mktemp("webrtc-hardening"), env=env).start()
    yield live
    live.stop()


_next_source = iter(range(10, 250))


def fresh_source() -> str:
    """A loopback address no earlier test used: its own offer bucket and call count."""
    return f"127.0.0.{next(_next_source)}"


async def test_the_issues_63_kb_offer_is_refused_by_its_line_counts_at_once_and_holds_nothing(open_server):
    """Before: 201 after 11-34 s with the event loop blocked and +360 MiB kept; eight at once, +2.5 GiB."""
    body = blow_up_offer(await offer()).encode()
    assert 60_000 < len(body) < 64 * 1024
    before = rss(open_server)
    answers = await asyncio.gather(
        *(
            asyncio.to_thread(post_from, fresh_source(), "/v1/realtime/calls", open_server.port, body, SDP)
            for _ in range(8)
        )
    )
    for answer in answers:
        assert answer.status == 400, answer
        error = answer.json["error"]
        assert error["code"] == "offer_too_complex" and "S2S_MAX_SDP_LINES" in error["message"], error
    assert await asyncio.to_thread(healthz_ms, open_server.port) < 5000
    assert rss(open_server) - before < 32 * MiB
    assert await wait_free(open_server, 2) == 2


async def test_an_offer_at_every_cap_is_parsed_off_the_event_loop_and_still_answered(open_server, calls):
    """An offer near the caps (120 more codecs, a wildcard feedback line for each) is a real answerable offer."""
    good = await offer()
    at_caps = blow_up_offer(good, codecs=120, feedback=1)
    source = fresh_source()
    answer = await asyncio.to_thread(post_from, source, "/v1/realtime/calls", open_server.port, at_caps.encode(), SDP)
    assert answer.status == 201, answer.body[:300]
    location = answer.headers["Location"]
    hung = await asyncio.to_thread(post_from, source, location, open_server.port, b"", "", method="DELETE")
    assert hung.status == 204
    assert await wait_free(open_server, 2) == 2


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_cap_gets_a_json_413_before_the_rest_is_read_and_costs_no_memory(open_server, declared):
    """Before: 200-300 MiB bodies read whole into memory (+217 to +300 MiB) before a 400; chunked: an HTML 400
    and a traceback each."""
    before = rss(open_server)
    head = "POST /v1/realtime/calls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/sdp\r\n"
    head += "Content-Length: 209715200\r\n\r\n" if declared else "Transfer-Encoding: chunked\r\n\r\n"
    piece = b"a=x\r\n" * 13_107  # 64 KiB
    if not declared:
        piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    answer = b""
    sent = 0
    with socket.create_connection(("127.0.0.1", open_server.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.sendall(head.encode())
        sock.settimeout(0.0)
        deadline = time.monotonic() + 20
        while sent < 200 * MiB and time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            try:
                sent += sock.send(piece)
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                break
        sock.settimeout(5)
        try:
            while b"}" not in answer:
                more = sock.recv(65536)
                if not more:
                    break
                answer += more
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"Content-Type: application/json" in answer
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_too_large"
    assert sent < 16 * MiB, sent  # refused while the client was still sending (declared: at the headers)
    assert rss(open_server) - before < 16 * MiB
    assert "Traceback" not in open_server.full_log()


def test_a_small_chunked_offer_is_answered(open_server):
    """A chunked body within the cap reaches the view whole (it has no Content-Length of its own)."""
    sdp = asyncio.run(offer()).encode()
    connection = http.client.HTTPConnection(
        "127.0.0.1", open_server.port, timeout=30, source_address=(fresh_source(), 0)
    )
    try:
        connection.request(
            "POST",
            "/v1/realtime/calls",
            body=iter([sdp[:100], sdp[100:]]),
            headers={"Content-Type": SDP},
            encode_chunked=True,
        )
        response = connection.getresponse()
        assert response.status == 201, response.read()[:300]
        location = response.getheader("Location")
        response.read()
        connection.request("DELETE", location)
        assert connection.getresponse().status == 204
    finally:
        connection.close()


async def test_offers_past_the_rate_get_429_with_retry_after_even_without_credentials(open_server):
    """Before: 80-117 offers a second from one client (a 401 or 429 flood), no limit."""
    source = fresh_source()
    statuses = []
    for _ in range(10):
        answer = await asyncio.to_thread(post_from, source, "/v1/realtime/calls", open_server.port, b"nonsense", SDP)
        statuses.append(answer.status)
        if answer.status == 429:
            assert answer.json["error"]["code"] == "rate_limit_exceeded" and int(answer.headers["Retry-After"]) >= 1
    assert statuses[:4] == [400] * 4 and statuses.count(429) >= 5, statuses
    other = await asyncio.to_thread(post_from, fresh_source(), "/v1/realtime/calls", open_server.port, b"x", SDP)
    assert other.status == 400  # another address is not limited by this one


async def test_one_address_holds_one_call_and_another_still_gets_the_other_unit(open_server, calls):
    """Before: one client holding both units of a pool of 2 left a legitimate one 2 calls of 30."""
    holder = fresh_source()
    first = await asyncio.to_thread(
        post_from, holder, "/v1/realtime/calls", open_server.port, (await offer()).encode(), SDP
    )
    assert first.status == 201
    second = await asyncio.to_thread(
        post_from, holder, "/v1/realtime/calls", open_server.port, (await offer()).encode(), SDP
    )
    assert second.status == 429 and "S2S_MAX_CALLS_PER_ADDRESS" in second.json["error"]["message"], second.body
    other = await asyncio.to_thread(
        post_from, fresh_source(), "/v1/realtime/calls", open_server.port, (await offer()).encode(), SDP
    )
    assert other.status == 201
    for answer, source in ((first, holder), (other, None)):
        await asyncio.to_thread(
            post_from, source or "127.0.0.1", answer.headers["Location"], open_server.port, b"", "", method="DELETE"
        )
    assert await wait_free(open_server, 2) == 2


async def test_a_call_that_never_connects_gives_its_unit_back_at_the_connect_deadline(open_server):
    """Before: a dead offer held its unit for the 15 s peer timeout; here the connect deadline is 4 s."""
    answer = await asyncio.to_thread(
        post_from, fresh_source(), "/v1/realtime/calls", open_server.port, (await offer()).encode(), SDP
    )
    assert answer.status == 201
    started = time.monotonic()
    assert await wait_free(open_server, 2, within_s=12) == 2
    assert time.monotonic() - started < 12


async def test_a_connected_call_that_sends_only_rtcp_is_ended_by_media_silence(open_server):
    """Before: a call sending only RTCP receiver reports kept its unit until the 600 s idle timeout."""
    quiet = WebRTCClient(open_server.http, microphone=False)  # RTCP reports only, no audio, no event
    try:
        assert (await quiet.connect()).status == 201
        await quiet.events.until("session.created")
        assert await wait_free(open_server, 1) == 1
        assert await wait_free(open_server, 2, within_s=12) == 2  # the 3 s silence limit, not the 15 s peer timeout
        assert "sent no audio and no event for 3s" in open_server.full_log()
    finally:
        await quiet.close()


async def test_a_data_channel_message_over_the_advertised_maximum_is_dropped_while_reassembling(open_server, calls):
    """Before: a 24 MiB message was reassembled whole (+36 MiB, 55 s) before ``event_too_large``."""
    call = calls(open_server)
    assert (await call.connect()).status == 201
    await call.events.until("session.created")
    assert "a=max-message-size:262144" in call.answer.body.decode()
    call.pc.sctp._remote_max_message_size = 0  # lifts the client's own check: a hostile client has none
    before = rss(open_server)
    call.channel.send(json.dumps({"type": "conversation.item.create", "pad": "x" * MiB}))
    error = await call.events.until("error", timeout=60)
    assert error["error"]["code"] == "event_too_large" and "262144" in error["error"]["message"]
    assert rss(open_server) - before < 16 * MiB
    await call.events.say_text("still there")
    done = await call.events.until("response.done", timeout=30)
    assert done["response"]["status"] == "completed"


async def test_an_offer_with_850_candidates_is_refused_naming_the_cap(open_server):
    """Before: 850 candidates made the server send about 4,250 connectivity checks where the client chose."""
    good = await offer()
    candidates = "".join(f"a=candidate:{n} 1 udp 1 10.{n // 250}.{n % 250}.1 9 typ host\r\n" for n in range(850))
    body = good.replace("a=ice-ufrag", candidates + "a=ice-ufrag", 1).encode()
    answer = await asyncio.to_thread(post_from, fresh_source(), "/v1/realtime/calls", open_server.port, body, SDP)
    assert answer.status == 400 and "S2S_MAX_SDP_CANDIDATES" in answer.json["error"]["message"], answer.body[:300]


async def test_deep_session_settings_and_a_repeated_mid_are_a_400_not_a_500(open_server):
    """Before: a ``session`` part nested 100,000 deep, or a duplicate a=mid, answered 500."""
    good = await offer()
    deep = "[" * 100_000 + "]" * 100_000
    body, content_type = multipart({"sdp": good, "session": deep})
    nested = await asyncio.to_thread(
        post_from, fresh_source(), "/v1/realtime/calls", open_server.port, body, content_type
    )
    assert nested.status == 400 and nested.json["error"]["param"] == "session", nested.body[:300]
    twice = good.replace("a=mid:1", "a=mid:0")
    assert twice != good
    repeated = await asyncio.to_thread(
        post_from, fresh_source(), "/v1/realtime/calls", open_server.port, twice.encode(), SDP
    )
    assert repeated.status == 400 and "a=mid:0 twice" in repeated.json["error"]["message"], repeated.body[:300]
    assert "Traceback" not in open_server.full_log()


def test_a_cross_origin_hang_up_is_refused_with_authentication_off(open_server):
    """Before: with auth off, a cross-origin POST ``/hangup`` (no preflight needed) ended a call."""
    source = fresh_source()
    sdp = asyncio.run(offer()).encode()
    answer = post_from(source, "/v1/realtime/calls", open_server.port, sdp, SDP)
    assert answer.status == 201
    path = answer.headers["Location"] + "/hangup"
    foreign = post_from(source, path, open_server.port, b"", "text/plain", headers={"Origin": "https://evil.example"})
    assert foreign.status == 403 and foreign.json["error"]["code"] == "invalid_origin"
    assert post_from(source, path, open_server.port, b"", "text/plain").status == 200  # a non-browser client may


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    env = {"S2S_AUTH_REQUIRED": "1", "S2S_CALL_OFFERS_PER_SECOND": "0"}
    server = LiveServer(tmp_path_factory.mktemp("webrtc-hardening-auth"), env=env).start()
    keys = [server.manage("create_api_key", name).stdout.strip() for name in ("alice", "mallory")]
    yield server, keys
    server.stop()


async def test_only_the_credentials_that_opened_a_call_its_api_key_or_staff_may_hang_it_up(secured, calls):
    """Before: any API key could hang up any call, on any node."""
    server, (alice, mallory) = secured
    secret = server.mint_client_secret(alice)
    call = calls(server)
    assert (await call.connect(token=secret)).status == 201
    await call.events.until("session.created")
    mallorys_secret = server.mint_client_secret(mallory)
    for token in (mallory, mallorys_secret):
        for method, suffix in (("DELETE", ""), ("POST", "/hangup")):
            refused = await asyncio.to_thread(post, server.http + call.location + suffix, b"", "", token, method)
            assert refused.status == 404, (token[:6], method, refused.status, refused.body[:200])
    assert await wait_free(server, 1, key=alice) == 1  # still live
    assert (await call.hang_up(token=alice)).status == 204  # the key that minted the secret may
    assert await wait_free(server, 2, key=alice) == 2


async def test_an_offer_refused_before_the_claim_gives_the_secret_back(secured, calls):
    """Before: a deep ``session`` part or a duplicate a=mid answered 500 and burnt the ``ek_`` secret."""
    server, (alice, _) = secured
    secret = server.mint_client_secret(alice)
    good = await offer()
    body, content_type = multipart({"sdp": good, "session": "[" * 100_000 + "]" * 100_000})
    assert (await asyncio.to_thread(post, f"{server.http}/v1/realtime/calls", body, content_type, secret)).status == 400
    twice = good.replace("a=mid:1", "a=mid:0").encode()
    assert (await asyncio.to_thread(post, f"{server.http}/v1/realtime/calls", twice, SDP, secret)).status == 400
    await asyncio.sleep(0.5)  # the give-back is written off the request
    call = calls(server)
    assert (await call.connect(token=secret)).status == 201  # still good for its one session
    await call.hang_up(token=secret)
    assert await wait_free(server, 2, key=alice) == 2
