"""A reconnect at once on a pool of one (issue 53): how often it is refused and how long it takes.

It starts two ``manage.py serve`` (daphne) on the real default models, each with one unit: one that never waits
for a draining unit (``S2S_CLAIM_WAIT_S=0``, the server before the claim's wait) and one with the default wait.
A round, on each server in turn: a client opens a session, asks for an answer to a typed question, closes the
socket as the answer's first audio arrives (the unit has a response to cut and every stage to drain, as a
browser's Disconnect mid-answer has) and opens a new session at once. One sample: the time from the close to
the new ``session.created``, or a refusal (``session_limit_reached``, close 1008). Refused clients do what the
page does (retry); only the first try is counted here.

Run: ``python bench/reconnect.py`` (``--help``); it prints a markdown section and writes it into
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
from datetime import datetime
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import latency_row, machine_load, write_section  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

BEGIN, END = "<!-- reconnect:begin -->", "<!-- reconnect:end -->"
QUESTION = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
}


async def first_event(ws: websockets.ClientConnection) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), 30))


async def converse_and_close(server: LiveServer) -> None:
    """A session that is closed as its answer's first audio arrives."""
    ws = await websockets.connect(f"{server.ws}?model=gpt-realtime", max_size=None, open_timeout=30)
    assert (await first_event(ws))["type"] == "session.created"
    await ws.send(json.dumps(QUESTION))
    await ws.send(json.dumps({"type": "response.create"}))
    async with asyncio.timeout(60):
        while (await first_event(ws))["type"] != "response.output_audio.delta":
            pass
    await ws.close()


async def reconnect(server: LiveServer) -> float | None:
    """Closes a session mid-answer and opens the next at once: seconds to ``session.created``, None if refused."""
    await converse_and_close(server)
    closed = time.monotonic()
    async with websockets.connect(f"{server.ws}?model=gpt-realtime", max_size=None, open_timeout=30) as ws:
        event = await first_event(ws)
    if event["type"] == "session.created":
        return time.monotonic() - closed
    assert event.get("error", {}).get("code") == "session_limit_reached", event
    return None


async def measure(servers: dict[str, LiveServer], rounds: int) -> dict[str, list[float | None]]:
    results: dict[str, list[float | None]] = {label: [] for label in servers}
    for _ in range(rounds):
        for label, server in servers.items():  # interleaved: the machine's drift falls on both alike
            await asyncio.to_thread(server.wait_free, 1)
            results[label].append(await reconnect(server))
    return results


def section(results: dict[str, list[float | None]], command: str, load: float) -> str:
    rows = []
    for label, samples in results.items():
        admitted = [s * 1000 for s in samples if s is not None]
        refused = len(samples) - len(admitted)
        row = latency_row(label, admitted) if admitted else f"| {label} | 0 | – | – | – | – |"
        rows.append(row + f" {refused} of {len(samples)} |")
    return "\n".join(
        [
            BEGIN,
            "### A reconnect at once on a pool of one",
            "",
            f"`{command}` ({datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} cores; {machine_load(load)}).",
            "",
            "The real default models, one unit per server, the two servers interleaved round by round. A client",
            "asks for an answer to a typed question, closes as its first audio arrives and opens a new session at",
            "once: ms from the close to the new `session.created` (admitted tries only), and how many first tries",
            "were refused with `session_limit_reached` while the unit drained.",
            "",
            "| server | admitted | p50 | p90 | min | max | refused |",
            "|---|---|---|---|---|---|---|",
            *rows,
            END,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="reconnects per server")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    labels = {"no wait (S2S_CLAIM_WAIT_S=0, before)": "0", "the claim's wait (default 0.5 s)": "0.5"}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {}
        for n, (label, wait) in enumerate(labels.items()):
            folder = Path(tmp) / str(n)
            folder.mkdir()
            env = {"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1", "S2S_CLAIM_WAIT_S": wait}
            servers[label] = LiveServer(folder, env=env).start()
        try:
            results = asyncio.run(measure(servers, args.rounds))
        finally:
            for server in servers.values():
                server.stop()
    command = "python bench/reconnect.py " + shlex.join(sys.argv[1:])
    text = section(results, command.strip(), os.getloadavg()[0])
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
