"""What a supervisor's listening costs (issue 51): the caller's audio in to ``supervisor.input_audio.delta`` out,
and the server's CPU per listener.

It starts ``manage.py serve`` (daphne, the loopback profile: FAKE stages, so that the figures are the transport's
and the fan-out's, not a model's) and opens one caller session (a raw WebSocket, manual turns so that no answer
runs) with N supervisors on it (``?call_id=SESSION&mode=supervise``). The caller streams 20 ms PCM16 chunks at
real-time pace for ``--seconds``; each supervisor's k-th ``supervisor.input_audio.delta`` answers the caller's
k-th chunk. One latency sample is the time from a chunk leaving the caller to its delta reaching one supervisor
(all on this machine, one clock). The CPU is the server process's (user and system seconds, ``psutil``) during
the streaming, with no supervisor and with each N: what each listener adds, per second of call.

Run: ``python bench/supervisor.py`` (``--help``); it prints a markdown section and writes it into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, tone  # noqa: E402

MARKERS = ("<!-- supervisor-listen:begin -->", "<!-- supervisor-listen:end -->")
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


async def run(server: LiveServer, listeners: int, seconds: float) -> tuple[list[float], float]:
    """One caller and ``listeners`` supervisors: (every chunk's latency to every supervisor in s, the server's CPU
    seconds per second of call)."""
    chunks = pcm16_chunks(tone(seconds, amplitude=0.05))
    async with websockets.connect(server.ws + "?model=gpt-realtime", max_size=None) as caller:
        created = json.loads(await caller.recv())
        session_id = created["session"]["id"]
        await caller.send(json.dumps({"type": "session.update", "session": MANUAL}))
        supervisors = [
            await websockets.connect(f"{server.ws}?call_id={session_id}&mode=supervise", max_size=None)
            for _ in range(listeners)
        ]
        arrivals: list[list[float]] = [[] for _ in supervisors]

        async def hear(socket: websockets.ClientConnection, into: list[float]) -> None:
            async for message in socket:
                if '"supervisor.input_audio.delta"' in str(message)[:60]:
                    into.append(time.monotonic())

        readers = [asyncio.create_task(hear(s, a)) for s, a in zip(supervisors, arrivals, strict=True)]
        await asyncio.sleep(1.0)  # everyone seated
        process = psutil.Process(server.process.pid)  # type: ignore[union-attr]
        before = sum(process.cpu_times()[:2])
        sent: list[float] = []
        start = time.monotonic()
        for n, chunk in enumerate(chunks, start=1):
            sent.append(time.monotonic())
            await caller.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
        await asyncio.sleep(0.5)  # the last deltas arrive
        cpu = (sum(process.cpu_times()[:2]) - before) / seconds
        for reader in readers:
            reader.cancel()
        for socket in supervisors:
            await socket.close()
    latencies = [at - went for into in arrivals for at, went in zip(into, sent, strict=False)]
    assert all(len(into) == len(sent) for into in arrivals), [len(into) for into in arrivals]
    return latencies, cpu


def section(results: dict[int, tuple[list[float], float]], args: argparse.Namespace, command: str, load: float) -> str:
    begin, end = MARKERS
    alone = results[0][1]
    rows = []
    for listeners, (latencies, cpu) in results.items():
        if listeners:
            each = (cpu - alone) / listeners * 100
            rows.append(
                latency_row(f"{listeners} supervisor(s)", [v * 1000 for v in latencies], 1)
                + f" {pct([v * 1000 for v in latencies], 95):.1f} | {cpu * 100:.1f} % | {each:.2f} % |"
            )
    return "\n".join(
        [
            begin,
            "### Supervising a live session: listen latency and CPU per listener",
            "",
            f"`{command}` ({dt_now()}, {os.cpu_count()} cores; {machine_load(load)}).",
            "",
            "The loopback profile (FAKE stages): one caller streaming 20 ms PCM16 chunks at real-time pace for",
            f"{args.seconds:.0f} s, N supervisors on its session (`?call_id=...&mode=supervise`). Latency: a chunk",
            "leaving the caller to its `supervisor.input_audio.delta` reaching a supervisor (one machine, one clock),",
            "ms. CPU: the server process's user and system time per second of call, in % of one core; with no",
            f"supervisor it was {alone * 100:.1f} %. Per listener: what each adds to that.",
            "",
            "| listeners | samples | p50 | p90 | min | max | p95 | server CPU | per listener |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "A caller's chunk is parsed once, handed to the unit and made one `supervisor.input_audio.delta` (base64",
            "PCM16 24 kHz, no resampling for a PCM session); each listener costs that event serialised and sent, 50",
            "a second, on the session's event loop (inline, as a follower's events are). The figures are small next",
            "to a session's own; on a busy machine the CPU per listener is within the noise of the runs.",
            end,
        ]
    )


def dt_now() -> str:
    return time.strftime("%Y-%m-%d")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of call per run")
    parser.add_argument("--listeners", type=int, nargs="+", default=[1, 4, 16], help="supervisors per run")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(Path(tmp), env={"S2S_POOL_SIZE": "1"})
        server.start(ready_timeout=300)
        try:
            results = {n: asyncio.run(run(server, n, args.seconds)) for n in [0, *args.listeners]}
        finally:
            server.stop()
    command = "python bench/supervisor.py " + shlex.join(sys.argv[1:])
    text = section(results, args, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
