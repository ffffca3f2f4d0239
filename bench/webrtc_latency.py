"""End of speech to first reply audio over WebRTC against the WebSocket, turns interleaved in one run.

It starts ``manage.py serve`` (daphne) on 127.0.0.1 with a pool of 2 and opens one session
of each kind: a WebRTC call (aiortc: the question goes out on an Opus track in real time,
the reply comes back on the server's track) and a WebSocket session (20 ms PCM16 chunks
at real-time pace, the reply as ``response.output_audio.delta``). Each turn says the same
question, then silence, with server VAD; one sample is the time from the last sample of the
question leaving the client to the first reply audio reaching it: for WebRTC the first
decoded frame with sound in it (after the client's jitter buffer), for the WebSocket the
first audio delta. The turns alternate between the two, so a busy machine weighs on both alike.

``--pipeline loopback`` (the default): FAKE stages, so the figure is the VAD's silence window
plus what each transport adds. ``--pipeline real``: the default models, a Piper question.

Run: ``python bench/webrtc_latency.py`` (``--help``); it prints a markdown section and writes
it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import latency_row, machine_load, pct, write_section  # noqa: E402
from pipelines import audio  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken, tone  # noqa: E402
from tests.support.webrtc_client import WebRTCClient  # noqa: E402

MARKERS = {
    pipeline: (f"<!-- webrtc-{pipeline}:begin -->", f"<!-- webrtc-{pipeline}:end -->")
    for pipeline in ("loopback", "real")
}
RATE = 24000
CHUNK_MS = 20
QUESTION = "What is the capital of France?"
LOUD_RMS = 0.02
# No prefix padding: the FAKE echo then starts with the question itself, not 300 ms of the silence before it,
# so "first reply audio" is the first audible sample on both transports.
SESSION = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": {"type": "server_vad", "prefix_padding_ms": 0, "silence_duration_ms": 500}}},
}


WHY_LOOPBACK = """The likely bulk of it (not measured apart):
aiortc's audio jitter buffer holds 4 packets (80 ms) before it decodes, on each receiving side: the server's for
the question and, here, the Python client's for the reply; Opus encoding and decoding add a few ms each way. A
browser's receiver (NetEq) adapts its buffer to the network instead (a few tens of ms on loopback). The reply is
paced in real time in 20 ms frames, where the WebSocket hands over 100 ms deltas as fast as they are made and
the client's player buffers them; what WebRTC buys is the browser's echo cancellation and a jitter buffer that
copes with a lossy network, not a shorter first reply on a clean one."""
WHY_REAL = """Where a difference lies, the server's own timings of each session
(`/v1/realtime/sessions/{id}/timings`: STT, LM first token, TTS first audio, end of speech to first audio) tell:
on the wire, or inside the server."""


def question(pipeline: str) -> np.ndarray:
    return spoken(QUESTION, RATE) if pipeline == "real" else tone(1.0)


async def webrtc_turn(call: WebRTCClient, speech: np.ndarray, timeout: float) -> float:
    call.events.received.clear()
    end_at = time.monotonic() + len(speech) / RATE  # the queue is empty: it goes out from the next frame on
    call.microphone.say(np.concatenate([speech, silence(2.0)]))
    await call.events.until("output_audio_buffer.stopped", timeout=timeout)
    first = call.loud(end_at)
    if not first:
        raise RuntimeError("the reply had no audible frame")
    return first[0] - end_at


async def websocket_turn(ws: websockets.ClientConnection, speech: np.ndarray, timeout: float) -> float:
    """Streams the question then silence in real time until the reply's first audio delta arrives."""
    chunks = pcm16_chunks(speech, CHUNK_MS)
    quiet = pcm16_chunks(silence(CHUNK_MS / 1000), CHUNK_MS)[0]
    started = time.monotonic()
    end_at: float | None = None
    first_audio: float | None = None

    async def stream() -> None:
        nonlocal end_at
        next_at = time.monotonic()
        for index in range(int(timeout * 1000 / CHUNK_MS)):
            audio = chunks[index] if index < len(chunks) else quiet
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            if index == len(chunks) - 1:
                end_at = time.monotonic()
            next_at += CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    sender = asyncio.create_task(stream())
    try:
        while time.monotonic() - started < timeout:
            event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            if event["type"] == "response.output_audio.delta" and first_audio is None:
                samples = audio.decode(base64.b64decode(event["delta"]), audio.PCM)
                loud = np.flatnonzero(np.abs(samples) > LOUD_RMS)
                if len(loud):  # played from its arrival on: its first audible sample plays that much later
                    first_audio = time.monotonic() + loud[0] / RATE
            elif event["type"] == "response.done":
                break
            elif event["type"] == "error":
                raise RuntimeError(event["error"])
    finally:
        sender.cancel()
    if first_audio is None or end_at is None:
        raise RuntimeError("no reply audio")
    await asyncio.sleep(0.3)
    return first_audio - end_at


async def measure(server: LiveServer, args: argparse.Namespace) -> dict[str, list[float]]:
    speech = question(args.pipeline)
    audio.resample(speech, RATE, 48000)  # imports scipy now, not in the middle of the first turn
    call = WebRTCClient(server.http, frames_as_they_come=True)
    ws = await websockets.connect(
        f"{server.ws}?model=gpt-realtime", subprotocols=["realtime"], open_timeout=30, max_size=None
    )
    results: dict[str, list[float]] = {"webrtc": [], "websocket": []}
    try:
        answer = await call.connect(session=SESSION)
        if answer.status != 201:
            raise RuntimeError(f"call refused: {answer.status} {answer.body[:200]!r}")
        await call.events.until("session.created", timeout=30)
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "session.update", "session": SESSION}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
        for turn in range(args.turns + 1):  # the first turn of each warms up and is not counted
            for kind in ("webrtc", "websocket") if turn % 2 == 0 else ("websocket", "webrtc"):
                if kind == "webrtc":
                    seconds = await webrtc_turn(call, speech, args.timeout)
                else:
                    seconds = await websocket_turn(ws, speech, args.timeout)
                if turn:
                    results[kind].append(seconds * 1000)
                print(f"turn {turn} {kind}: {seconds * 1000:.0f} ms", flush=True)
    finally:
        await ws.close()
        await call.hang_up()
        await call.close()
    return results


def section(results: dict[str, list[float]], args: argparse.Namespace, command: str, load: float) -> str:
    rows = ["| transport | turns | p50 ms | p90 ms | min ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
    for kind, label in (("webrtc", "WebRTC (Opus track, aiortc client)"), ("websocket", "WebSocket (PCM16 deltas)")):
        rows.append(latency_row(label, results[kind]))
    difference = pct(results["webrtc"], 50) - pct(results["websocket"], 50)
    why = WHY_LOOPBACK if args.pipeline == "loopback" else WHY_REAL
    what = (
        "FAKE stages (`S2S_PIPELINE=loopback`): the figure is the server VAD's 500 ms silence window and what "
        "each transport adds"
        if args.pipeline == "loopback"
        else f'the default models (`S2S_PIPELINE=real`), the question "{QUESTION}" spoken by Piper'
    )
    begin, end = MARKERS[args.pipeline]
    return f"""{begin}
## WebRTC against WebSocket: end of speech to first reply audio ({args.pipeline} pipeline)

- Command: `{command}`
- Date: {dt.date.today().isoformat()}; machine: {platform.processor() or platform.machine()}, \
{psutil.cpu_count(logical=True)} logical CPUs, Python {platform.python_version()}; {machine_load(load)}.
  Server (daphne, `manage.py serve`, pool of 2) and clients on the same machine over 127.0.0.1.
- Pipeline: {what}.
- One session of each kind, turns alternating between them (the first of each not counted), server VAD with
  a 500 ms silence window and no prefix padding. A sample is the time from the last sample of the question
  leaving the client to the first audible reply sample reaching it: over WebRTC the first decoded frame with
  sound in it (Opus both ways, after aiortc's jitter buffer), over the WebSocket the first audio delta with
  sound in it, plus that sound's offset in the delta (when it would play, the delta played on arrival).

{chr(10).join(rows)}

WebRTC's median is {difference:+.0f} ms against the WebSocket's. {why}
{end}"""


def write(text: str, pipeline: str) -> None:
    write_section(text, *MARKERS[pipeline])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="counted turns per transport")
    parser.add_argument("--pipeline", choices=("loopback", "real"), default="loopback")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one turn may take")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(Path(tmp), env={"S2S_PIPELINE": args.pipeline, "S2S_POOL_SIZE": "2"})
        server.start(ready_timeout=900)
        try:
            results = asyncio.run(measure(server, args))
        finally:
            server.stop()
    command = "python bench/webrtc_latency.py " + shlex.join(sys.argv[1:])
    text = section(results, args, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write(text, args.pipeline)


if __name__ == "__main__":
    main()
