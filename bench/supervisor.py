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

MARKERS = {
    False: ("<!-- supervisor-listen:begin -->", "<!-- supervisor-listen:end -->"),
    True: ("<!-- supervisor-listen-nodes:begin -->", "<!-- supervisor-listen-nodes:end -->"),
}
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


async def run(
    server: LiveServer, listeners: int, seconds: float, near: LiveServer | None = None
) -> tuple[list[float], float]:
    """One caller on ``server`` and ``listeners`` supervisors (on ``near``, another node, when given): (every
    chunk's latency to every supervisor in s, the servers' CPU seconds per second of call)."""
    chunks = pcm16_chunks(tone(seconds, amplitude=0.05))
    near = near or server
    async with websockets.connect(server.ws + "?model=gpt-realtime", max_size=None) as caller:
        created = json.loads(await caller.recv())
        session_id = created["session"]["id"]
        await caller.send(json.dumps({"type": "session.update", "session": MANUAL}))
        supervisors = [
            await websockets.connect(f"{near.ws}?call_id={session_id}&mode=supervise", max_size=None)
            for _ in range(listeners)
        ]
        arrivals: list[list[float]] = [[] for _ in supervisors]

        async def hear(socket: websockets.ClientConnection, into: list[float]) -> None:
            async for message in socket:
                if '"supervisor.input_audio.delta"' in str(message)[:60]:
                    into.append(time.monotonic())

        readers = [asyncio.create_task(hear(s, a)) for s, a in zip(supervisors, arrivals, strict=True)]
        await asyncio.sleep(1.0)  # everyone seated
        processes = {psutil.Process(s.process.pid) for s in (server, near)}  # type: ignore[union-attr]
        before = sum(sum(p.cpu_times()[:2]) for p in processes)
        sent: list[float] = []
        start = time.monotonic()
        for n, chunk in enumerate(chunks, start=1):
            sent.append(time.monotonic())
            await caller.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))
        cpu = (sum(sum(p.cpu_times()[:2]) for p in processes) - before) / seconds
        for _ in range(300):  # up to 30 s for the last deltas (or they are lost)
            if all(len(into) >= len(sent) for into in arrivals):
                break
            await asyncio.sleep(0.1)
        for reader in readers:
            reader.cancel()
        for socket in supervisors:
            await socket.close()
    lost = sum(len(sent) - len(into) for into in arrivals)
    if lost:
        print(f"{listeners} listener(s): {lost} of {len(sent) * listeners} deltas never came", file=sys.stderr)
    return [at - went for into in arrivals for at, went in zip(into, sent, strict=False)], cpu


def section(results: dict[int, tuple[list[float], float]], args: argparse.Namespace, command: str, load: float) -> str:
    across = bool(args.redis)
    begin, end = MARKERS[across]
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
            "### Supervising a live session: listen latency and CPU per listener"
            + (", the supervisors on another node (Redis)" if across else ""),
            "",
            f"`{command}` ({dt_now()}, {os.cpu_count()} cores; {machine_load(load)}).",
            "",
            "The loopback profile (FAKE stages): one caller streaming 20 ms PCM16 chunks at real-time pace for",
            f"{args.seconds:.0f} s, N supervisors on its session (`?call_id=...&mode=supervise`). Latency: a chunk",
            "leaving the caller to its `supervisor.input_audio.delta` reaching a supervisor (one machine, one clock),",
            (
                "ms. Across nodes: the caller on node B, the supervisors on node A, one Redis and one SQLite file"
                " between them (`--redis`): each event crosses the channel layer. "
                if across
                else "ms. "
            )
            + "CPU: the server processes' user and system time per second of call, in % of one core; with no",
            f"supervisor it was {alone * 100:.1f} %. Per listener: what each adds to that.",
            "",
            "| listeners | samples | p50 | p90 | min | max | p95 | server CPU | per listener |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            *(
                [
                    "Across nodes every event a supervisor gets (the caller's audio, 50 a second, and the agent's) is",
                    "serialised, sent to Redis by the session's node and read back by the supervisor's: a few ms more",
                    "per event, and what the two processes spend on it (samples short of 500 a listener: deltas that",
                    "never came within 30 s, the channel layer behind).",
                ]
                if across
                else [
                    "A caller's chunk is parsed once, handed to the unit and made one `supervisor.input_audio.delta`",
                    "(base64 PCM16 24 kHz, no resampling for a PCM session); each listener costs that event serialised",
                    "and sent, 50 a second, on the session's event loop (inline, as a follower's events are).",
                ]
            ),
            end,
        ]
    )


def dt_now() -> str:
    return time.strftime("%Y-%m-%d")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of call per run")
    parser.add_argument("--listeners", type=int, nargs="+", default=[1, 4, 16], help="supervisors per run")
    parser.add_argument("--redis", help="a Redis URL: the supervisors on another node than the session's")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"S2S_POOL_SIZE": "1", **({"REDIS_URL": args.redis} if args.redis else {})}
        servers = [
            LiveServer(Path(tmp), env={**env, "S2S_NODE_NAME": f"node-{n}"}) for n in "ba"[: 2 if args.redis else 1]
        ]
        try:
            for server in servers:
                server.start(ready_timeout=300)
            results = {n: asyncio.run(run(servers[0], n, args.seconds, servers[-1])) for n in [0, *args.listeners]}
        finally:
            for server in servers:
                server.stop()
    command = "python bench/supervisor.py " + shlex.join(sys.argv[1:])
    text = section(results, args, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, *MARKERS[bool(args.redis)])


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
