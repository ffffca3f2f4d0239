"""End of the caller's speech to the first reply audio at the caller over SIP, against the WebSocket, in one run.

It starts ``manage.py serve`` (daphne) on 127.0.0.1 with its SIP listener and a pool of 2, and
opens one session of each kind: a phone call (``tests/support/sip_phone.py``: aiosipua places
the call, aiortp sends the question as 20 ms G.711 μ-law frames in real time and hands back the
reply's frames after its jitter buffer) and a WebSocket session (20 ms PCM16 chunks at real-time
pace, the reply as ``response.output_audio.delta``: ``bench/webrtc_latency.py``'s client). Each
turn says the same question, then silence, with server VAD; one sample is the time from the last
frame of the question leaving the client to the first reply audio reaching it. The turns alternate
between the two, so a busy machine weighs on both alike.

``--pipeline loopback`` (the default): FAKE stages, so the figure is the VAD's silence window plus
what each transport adds. ``--pipeline real``: the default models, a Piper question.

Run: ``python bench/sip_latency.py`` (``--help``); it prints a markdown section and writes it into
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
import sqlite3
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
from bench.webrtc_latency import QUESTION, SESSION, websocket_turn  # noqa: E402
from pipelines import audio  # noqa: E402
from tests.support.server import LiveServer, free_port  # noqa: E402
from tests.support.sip_phone import SipPhone  # noqa: E402
from tests.support.speech import spoken, tone  # noqa: E402

MARKERS = {
    pipeline: (f"<!-- sip-{pipeline}:begin -->", f"<!-- sip-{pipeline}:end -->") for pipeline in ("loopback", "real")
}
QUIET_AFTER_S = 1.5  # a reply is over once nothing loud has arrived for this long


def question(pipeline: str, rate: int) -> np.ndarray:
    return spoken(QUESTION, rate) if pipeline == "real" else tone(1.0, rate)


async def sip_turn(phone: SipPhone, speech: np.ndarray, timeout: float) -> float:
    """Says the question on the call; waits for the whole reply; returns end of speech to its first sound."""
    end_at = await phone.say(speech)
    deadline = end_at + timeout
    first = None
    while time.monotonic() < deadline:
        first = first or phone.loud_after(end_at)
        if first is not None:
            last_loud = max(at for at, peak in phone.heard if peak > 0.02)
            if time.monotonic() - last_loud > QUIET_AFTER_S:
                return first - end_at
        await asyncio.sleep(0.05)
    raise RuntimeError("no reply audio on the call")


async def measure(
    server: LiveServer, sip_port: int, args: argparse.Namespace, sessions: dict[str, str]
) -> dict[str, list[float]]:
    speech_ws, speech_sip = question(args.pipeline, 24000), question(args.pipeline, 8000)
    audio.resample(speech_ws, 24000, 16000)  # imports scipy now, not in the middle of the first turn
    phone = SipPhone()
    ws = await websockets.connect(f"{server.ws}?model=gpt-realtime", subprotocols=["realtime"], open_timeout=30)
    results: dict[str, list[float]] = {"sip": [], "websocket": []}
    try:
        await phone.dial("127.0.0.1", sip_port)
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created"
        sessions["websocket"] = created["session"]["id"]
        await ws.send(json.dumps({"type": "session.update", "session": SESSION}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
        for turn in range(args.turns + 1):  # the first turn of each warms up and is not counted
            for kind in ("sip", "websocket") if turn % 2 == 0 else ("websocket", "sip"):
                if kind == "sip":
                    seconds = await sip_turn(phone, speech_sip, args.timeout)
                else:
                    seconds = await websocket_turn(ws, speech_ws, args.timeout)
                if turn:
                    results[kind].append(seconds * 1000)
                print(f"turn {turn} {kind}: {seconds * 1000:.0f} ms", flush=True)
    finally:
        await ws.close()
        await phone.hang_up()
    with sqlite3.connect(server.tmp_dir / "server.sqlite3") as db:
        sessions["sip"] = db.execute("SELECT id FROM realtime_realtimesession WHERE transport = 'sip'").fetchone()[0]
    return results


def server_timings(server: LiveServer, session_id: str) -> dict[str, float]:
    """The server's own medians for a session's counted responses (the first, a warm-up, left out)."""
    time.sleep(1.0)  # the record writer has the last response's row shortly after it ended
    responses = json.loads(server.get(f"/v1/realtime/sessions/{session_id}/timings")[1])["responses"][1:]
    keys = ("stt_ms", "lm_first_token_ms", "tts_first_audio_ms", "voice_to_voice_ms")
    return {key: pct([r[key] for r in responses if r[key] is not None] or [float("nan")], 50) for key in keys}


def section(
    results: dict[str, list[float]],
    timings: dict[str, dict[str, float]],
    args: argparse.Namespace,
    command: str,
    load: float,
) -> str:
    rows = ["| transport | turns | p50 ms | p90 ms | min ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
    inside = [
        "| transport | STT | LM first token | TTS first audio | end of speech to first audio, in the server |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = (("sip", "SIP (G.711 μ-law RTP, aiosipua + aiortp caller)"), ("websocket", "WebSocket (PCM16 deltas)"))
    for kind, label in labels:
        rows.append(latency_row(label, results[kind]))
        t = timings[kind]
        inside.append(
            f"| {kind} | {t['stt_ms']:.0f} | {t['lm_first_token_ms']:.0f} | {t['tts_first_audio_ms']:.0f} "
            f"| {t['voice_to_voice_ms']:.0f} |"
        )
    difference = pct(results["sip"], 50) - pct(results["websocket"], 50)
    outside = {kind: pct(results[kind], 50) - timings[kind]["voice_to_voice_ms"] for kind in results}
    what = (
        "FAKE stages (`S2S_PIPELINE=loopback`): the figure is the server VAD's 500 ms silence window and what "
        "each transport adds"
        if args.pipeline == "loopback"
        else f'the default models (`S2S_PIPELINE=real`), the question "{QUESTION}" spoken by Piper'
    )
    begin, end = MARKERS[args.pipeline]
    return f"""{begin}
## SIP against WebSocket: end of the caller's speech to first reply audio ({args.pipeline} pipeline)

- Command: `{command}`
- Date: {dt.date.today().isoformat()}; machine: {platform.processor() or platform.machine()}, \
{psutil.cpu_count(logical=True)} logical CPUs, Python {platform.python_version()}; {machine_load(load)}.
  Server (daphne, `manage.py serve`, pool of 2, SIP listener on UDP) and clients on the same machine over 127.0.0.1.
- Pipeline: {what}.
- One session of each kind, turns alternating between them (the first of each not counted), server VAD with
  a 500 ms silence window and no prefix padding (the call's through `S2S_SIP_SESSION`). A sample is the time
  from the last frame of the question leaving the client to the first audible reply reaching it: on the call
  the first received RTP frame with sound in it, after aiortp's jitter buffer (4 frames, 80 ms, as a phone
  has one), over the WebSocket the first audio delta with sound in it, plus that sound's offset in the delta.

{chr(10).join(rows)}

The server's own medians for the same responses (ms; `/v1/realtime/sessions/{{id}}/timings`), which tell
whether a difference lies on the wire or inside the server:

{chr(10).join(inside)}

SIP's median is {difference:+.0f} ms against the WebSocket's. Outside the server (the client's median less the
server's own), on the wire and in the clients: SIP {outside["sip"]:.0f} ms, WebSocket {outside["websocket"]:.0f} ms.
The likely bulk of SIP's share (not measured apart): two
jitter buffers of 4 frames (80 ms each), the server's for the question and the caller's for the reply, which a
WebSocket has neither of; the server's 20 ms playout clock (a reply waits for the next tick and goes out one
frame per 20 ms, where the WebSocket hands over 100 ms deltas as fast as they are made); soxr's filters at
8 kHz both ways (about 26 ms each).
{end}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="counted turns per transport")
    parser.add_argument("--pipeline", choices=("loopback", "real"), default="loopback")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one turn may take")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sip_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(
            Path(tmp),
            env={
                "S2S_PIPELINE": args.pipeline,
                "S2S_POOL_SIZE": "2",
                "S2S_SIP_BIND": f"127.0.0.1:{sip_port}",
                "S2S_SIP_SESSION": json.dumps(SESSION),
            },
        )
        server.start(ready_timeout=900)
        sessions: dict[str, str] = {}
        try:
            results = asyncio.run(measure(server, sip_port, args, sessions))
            timings = {kind: server_timings(server, session_id) for kind, session_id in sessions.items()}
        finally:
            server.stop()
    command = "python bench/sip_latency.py " + shlex.join(sys.argv[1:])
    text = section(results, timings, args, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS[args.pipeline])


if __name__ == "__main__":
    main()
