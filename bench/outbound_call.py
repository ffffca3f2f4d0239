"""An outbound call's first words: the time from the callee's 200 OK to the callee hearing the agent's first audio.

It starts ``manage.py serve`` (daphne) on 127.0.0.1 with its SIP listener and a pool of 2, and places ``--calls``
calls (``POST /v1/realtime/calls``) to a callee in this process: raw SIP on a UDP socket that answers 100, 180 and,
after ``--ring-s``, 200 OK with an SDP answer (PCMU), and an RTP socket that notes when the first packet with sound
in it arrives (no jitter buffer: the figure is the network's and the server's, not a phone's). Each call is
followed on the sideband (``/v1/realtime?call_id=``) and the agent asked to speak first (``response.create``) in
one of two ways, alternating: ``ringing``, sent while the call rings (the usual start: the reply is made before the
answer and waits for it), and ``answered``, sent the moment the callee sends its 200 OK (the reply is made after).
One sample is the time from the 200 OK leaving the callee to that first audible packet. Every call is hung up
(``DELETE``) and its end waited for before the next; each is bounded by ``--timeout``.

``--pipeline loopback`` (the default): FAKE stages, so the figure is what the call's path adds; ``real``: the
default models (the reply's first words from the LM and Piper).

Run: ``python bench/outbound_call.py`` (``--help``); it prints a markdown section and writes it into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shlex
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import websockets
from aiosipua import SipMessage, SipRequest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import latency_row, machine_load, pct, write_section  # noqa: E402
from tests.support.server import LiveServer, free_port  # noqa: E402

MARKERS = {
    pipeline: (f"<!-- outbound-call-{pipeline}:begin -->", f"<!-- outbound-call-{pipeline}:end -->")
    for pipeline in ("loopback", "real")
}
MODES = ("ringing", "answered")
LOUD = 0.02  # a packet's peak above this (full scale 1.0) is sound
ENDED = {"busy", "no_answer", "rejected", "failed", "ended"}


def ulaw_peak(payload: bytes) -> float:
    """The loudest sample of a G.711 μ-law payload (full scale 1.0)."""
    u = ~np.frombuffer(payload, dtype=np.uint8)
    exponent, mantissa = (u >> 4) & 0x07, u & 0x0F
    magnitude = ((mantissa.astype(np.int32) << 3) + 0x84) << exponent
    return float(np.max(np.abs(magnitude - 0x84)) / 32124.0) if len(payload) else 0.0


class Callee(asyncio.DatagramProtocol):
    """One call at a time: answers the INVITE after ``ring_s`` (``on_answer`` runs as the 200 OK leaves), 200s a
    BYE, and notes the 200 OK's time and the first audible RTP packet's."""

    def __init__(self, rtp_port: int, ring_s: float) -> None:
        self.rtp_port, self.ring_s = rtp_port, ring_s
        self.transport: asyncio.DatagramTransport | None = None
        self.answered_at: float | None = None
        self.heard = asyncio.Event()
        self.heard_at: float | None = None
        self.byes = 0
        self.on_answer = lambda: None

    def reset(self) -> None:
        self.answered_at, self.heard_at = None, None
        self.heard.clear()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        message = SipMessage.parse(data)
        if not isinstance(message, SipRequest):
            return
        if message.method == "INVITE":
            self._reply(message, addr, "100 Trying")
            self._reply(message, addr, "180 Ringing")
            asyncio.get_running_loop().call_later(self.ring_s, self._answer, message, addr)
        elif message.method == "BYE":
            self._reply(message, addr, "200 OK")
            self.byes += 1
        elif message.method == "CANCEL":
            self._reply(message, addr, "200 OK")

    def _answer(self, invite: SipRequest, addr: tuple[str, int]) -> None:
        sdp = (
            f"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {self.rtp_port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
        )
        self._reply(invite, addr, "200 OK", sdp)
        self.answered_at = time.monotonic()
        self.on_answer()

    def _reply(self, request: SipRequest, addr: tuple[str, int], status: str, sdp: str = "") -> None:
        to = request.headers.get_first("to") or ""
        lines = [f"SIP/2.0 {status}", *(f"Via: {via}" for via in request.headers.get("via"))]
        lines += [
            f"From: {request.headers.get_first('from')}",
            f"To: {to}" + (";tag=bench" if not status.startswith("100") and ";tag=" not in to else ""),
            f"Call-ID: {request.call_id}",
            f"CSeq: {request.headers.get_first('cseq')}",
            f"Contact: <sip:bench@127.0.0.1:{self.transport.get_extra_info('sockname')[1]}>",  # type: ignore[union-attr]
            *(["Content-Type: application/sdp"] if sdp else []),
            f"Content-Length: {len(sdp.encode())}",
            "",
            sdp,
        ]
        assert self.transport is not None
        self.transport.sendto("\r\n".join(lines).encode(), addr)


class RtpEar(asyncio.DatagramProtocol):
    def __init__(self, callee: Callee) -> None:
        self.callee = callee

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        callee = self.callee
        waiting = callee.heard_at is None and callee.answered_at is not None
        if waiting and len(data) > 12 and ulaw_peak(data[12:]) > LOUD:
            callee.heard_at = time.monotonic()
            callee.heard.set()


def api(server: LiveServer, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        server.http + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"} if body is not None else {},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=15) as response:
        raw = response.read()
    return json.loads(raw) if raw else {}


async def one_call(server: LiveServer, callee: Callee, sip_port: int, mode: str, timeout: float) -> float:
    """One call in ``mode``: ms from the 200 OK to the first audible packet."""
    callee.reset()
    body = {"sip": {"to": f"sip:bench@127.0.0.1:{sip_port}"}, "session": {"type": "realtime"}}
    placed = await asyncio.to_thread(api, server, "POST", "/v1/realtime/calls", body)
    create = json.dumps({"type": "response.create"})
    async with websockets.connect(f"{server.ws}?call_id={placed['id']}", open_timeout=10) as sideband:
        assert json.loads(await sideband.recv())["type"] == "session.created"
        if mode == "ringing":
            callee.on_answer = lambda: None
            await sideband.send(create)
        else:
            callee.on_answer = lambda: asyncio.ensure_future(sideband.send(create))
        try:
            await asyncio.wait_for(callee.heard.wait(), timeout)
        finally:
            await asyncio.to_thread(api, server, "DELETE", f"/v1/realtime/calls/{placed['id']}")
    deadline = time.monotonic() + timeout
    while (await asyncio.to_thread(api, server, "GET", f"/v1/realtime/calls/{placed['id']}"))["status"] not in ENDED:
        if time.monotonic() > deadline:
            raise RuntimeError("the call did not end")
        await asyncio.sleep(0.1)
    assert callee.heard_at is not None and callee.answered_at is not None
    return (callee.heard_at - callee.answered_at) * 1000


async def measure(server: LiveServer, args: argparse.Namespace) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    rtp_port = free_port()
    callee = Callee(rtp_port, args.ring_s)
    sip, _ = await loop.create_datagram_endpoint(lambda: callee, local_addr=("127.0.0.1", 0))
    rtp, _ = await loop.create_datagram_endpoint(lambda: RtpEar(callee), local_addr=("127.0.0.1", rtp_port))
    sip_port = sip.get_extra_info("sockname")[1]
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for call in range(args.calls + 1):  # the first call of each mode warms up and is not counted
            for mode in MODES if call % 2 == 0 else MODES[::-1]:
                ms = await one_call(server, callee, sip_port, mode, args.timeout)
                if call:
                    results[mode].append(ms)
                print(f"call {call} {mode}: {ms:.0f} ms", flush=True)
    finally:
        sip.close()
        rtp.close()
    return results


def section(results: dict[str, list[float]], args: argparse.Namespace, command: str, load: float) -> str:
    rows = [
        "| response.create sent | calls | p50 ms | p95 ms | p90 ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {"ringing": "while the call rings", "answered": "as the 200 OK leaves the callee"}
    for mode in MODES:
        row = latency_row(labels[mode], results[mode]).split(" | ")
        row.insert(3, f"{pct(results[mode], 95):.0f}")
        rows.append(" | ".join(row))
    what = (
        "FAKE stages (`S2S_PIPELINE=loopback`): the reply's first audio is made at once, so the figure is what "
        "the call's path adds"
        if args.pipeline == "loopback"
        else "the default models (`S2S_PIPELINE=real`): the reply's first words from the LM and Piper"
    )
    begin, end = MARKERS[args.pipeline]
    return f"""{begin}
## An outbound call's first words: the callee's 200 OK to the first audio it hears ({args.pipeline} pipeline)

- Command: `{command}`
- Date: {dt.date.today().isoformat()}; machine: {platform.processor() or platform.machine()}, \
{psutil.cpu_count(logical=True)} logical CPUs, Python {platform.python_version()}; {machine_load(load)}.
  Server (daphne, `manage.py serve`, pool of 2, SIP listener on UDP) and callee on the same machine over 127.0.0.1.
- Pipeline: {what}.
- Each call: `POST /v1/realtime/calls` to a raw SIP callee in the bench's process that rings {args.ring_s:g} s and
  answers 200 OK (PCMU); the sideband (`/v1/realtime?call_id=`) sends `response.create` while it rings or the
  moment the 200 OK leaves, alternating (the first of each not counted). A sample is the time from the 200 OK
  leaving the callee to the first RTP packet with sound in it arriving there (no jitter buffer: a phone adds
  its own, typically 40-80 ms). Each call is hung up and its end waited for before the next.

{chr(10).join(rows)}

Sent while ringing, the reply is ready before the answer: the figure is the 200 OK's way to the server, the
ACK, the RTP session opened on the answer's address and the playout clock's first tick. Sent at the answer, it
adds the response's making (the sideband's message, the pipeline's first audio).
{end}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="counted calls per mode (at most 50)")
    parser.add_argument("--pipeline", choices=("loopback", "real"), default="loopback")
    parser.add_argument("--ring-s", type=float, default=1.0, help="how long the callee rings before its 200 OK")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one call may take")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.calls = max(1, min(args.calls, 50))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        first_rtp = 20000 + free_port() % 10000 * 2
        server = LiveServer(
            Path(tmp),
            env={
                "S2S_PIPELINE": args.pipeline,
                "S2S_POOL_SIZE": "2",
                "S2S_SIP_BIND": f"127.0.0.1:{free_port()}",
                "S2S_SIP_RTP_PORTS": f"{first_rtp}-{first_rtp + 200}",
                "S2S_SIP_OUTBOUND_ALLOW": "sip:*@127.0.0.1:*",
                "S2S_SIP_OUTBOUND_PER_MINUTE": "0",
            },
        )
        server.start(ready_timeout=900)
        try:
            results = asyncio.run(measure(server, args))
        finally:
            server.stop()
    command = "python bench/outbound_call.py " + shlex.join(sys.argv[1:])
    text = section(results, args, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS[args.pipeline])


if __name__ == "__main__":
    main()
