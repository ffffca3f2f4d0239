"""Reading ahead outside a turn: what new instructions and a function's result cost the next answer.

Two scenarios on the real server (two units, the default models), each in one session per server, with typed
user turns (a text item, then ``response.create``; no speech, so no STT in the figures):

* **instructions**: a plain turn, then ``session.update`` with other instructions (two agents' instructions
  of about 100 tokens, in turn), a pause of ``--gap-s`` as a person takes before speaking, then a turn:
  from each ``response.create`` to the answer's first audio, the plain turns against the turns after a change;
* **tool result**: a session with a function tool; a plain turn, then a request that calls it, the client
  "running" it for ``--tool-s``, then ``function_call_output`` and ``response.create``: from the plain turn's
  ``response.create``, and from the result's, to the first audio.

With ``--baseline CHECKOUT`` a second server runs that checkout of the code (e.g. ``git worktree add
/tmp/base <commit>``), and the rounds alternate between the two servers, so both see the same machine.

Run: ``python bench/read_ahead.py [--baseline CHECKOUT] [--rounds 6] [--no-write]``; the figures go to
``docs/benchmarks.md`` (the ``read_ahead`` section).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from tests.support.client import RealtimeClient, text_item  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402

BEGIN, END = "<!-- read_ahead:begin -->", "<!-- read_ahead:end -->"

AGENTS = (
    "You are Ada, the voice of a bicycle shop in Lyon. Your replies are spoken aloud, so answer in one or two "
    "short, plain sentences and give the answer first. You know the shop's opening hours, Monday to Saturday "
    "from nine to seven, the repair prices, a flat tyre twelve euros and a full service sixty, and that "
    "bookings are made by phone. Never use lists, markdown or emoji. Write numbers as words.",
    "You are Max, a friendly guide for a museum of science. Your replies are spoken aloud, so answer in one "
    "or two short, plain sentences and give the answer first. The museum opens at ten and closes at six, a "
    "ticket costs fifteen euros, children under twelve go free, and the planetarium shows start every hour. "
    "Never use lists, markdown or emoji. Write numbers as words.",
)
QUESTIONS = (
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What colour is the sky on a clear day?",
    "Which planet is closest to the sun?",
    "What do bees make?",
    "How many days are in a week?",
)
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER = json.dumps({"city": "Paris", "temperature_c": 21, "sky": "sunny"})


async def first_audio_ms(client: RealtimeClient, timeout: float = 120) -> tuple[float | None, list[dict]]:
    """From now (the request just sent) to the first audio delta; waits for ``response.done``. A finished
    call's event gets ``_ms``: from now to it."""
    sent = time.perf_counter()
    first: float | None = None
    events: list[dict] = []
    deadline = sent + timeout
    while True:
        event = await client.recv(max(0.1, deadline - time.perf_counter()))
        if event is None:
            raise TimeoutError(f"no response.done; got {[e['type'] for e in events]}")
        events.append(event)
        if event["type"] == "response.function_call_arguments.done":
            event["_ms"] = (time.perf_counter() - sent) * 1000
        if event["type"] == "response.output_audio.delta" and first is None:
            first = (time.perf_counter() - sent) * 1000
        if event["type"] == "error":
            raise RuntimeError(event)
        if event["type"] == "response.done":
            return first, events


async def ask(client: RealtimeClient, text: str) -> tuple[float | None, list[dict]]:
    await client.send("conversation.item.create", item=text_item(text))
    await client.send("response.create")
    return await first_audio_ms(client)


class Arm:
    """One server and its two sessions."""

    def __init__(self, name: str, server: LiveServer) -> None:
        self.name, self.server = name, server
        self.sockets: list[Any] = []
        labels = (
            "plain",
            "after new instructions",
            "tool: plain",
            "tool: request to the call",
            "tool: after the result",
        )
        self.figures: dict[str, list[float]] = {label: [] for label in labels}

    async def open(self, session: dict[str, Any]) -> RealtimeClient:
        ws = await websockets.connect(self.server.ws, max_size=None, open_timeout=60)
        self.sockets.append(ws)
        client = RealtimeClient.over_websocket(ws)
        await client.until("session.created", timeout=60)
        await client.update_session(type="realtime", **session)
        return client

    async def close(self) -> None:
        for ws in self.sockets:
            await ws.close()


async def instructions_round(client: RealtimeClient, arm: Arm, index: int, gap_s: float) -> None:
    plain, _ = await ask(client, QUESTIONS[index % len(QUESTIONS)])
    await client.send("session.update", session={"type": "realtime", "instructions": AGENTS[index % 2]})
    await client.until("session.updated", timeout=60)
    await asyncio.sleep(gap_s)
    changed, _ = await ask(client, QUESTIONS[(index + 3) % len(QUESTIONS)])
    if plain is not None and changed is not None:
        arm.figures["plain"].append(plain)
        arm.figures["after new instructions"].append(changed)


async def tool_round(client: RealtimeClient, arm: Arm, index: int, tool_s: float) -> None:
    plain, _ = await ask(client, QUESTIONS[index % len(QUESTIONS)])
    _, events = await ask(client, "What is the weather in Paris right now?")
    call = next((e for e in events if e["type"] == "response.function_call_arguments.done"), None)
    if call is None:
        print(f"{arm.name}: round {index}: the model answered without calling the tool", flush=True)
        return
    await asyncio.sleep(tool_s)  # the client runs the function
    item = {"type": "function_call_output", "call_id": call["call_id"], "output": WEATHER}
    await client.send("conversation.item.create", item=item)
    await client.send("response.create")
    after, _ = await first_audio_ms(client)
    if plain is not None and after is not None:
        arm.figures["tool: plain"].append(plain)
        arm.figures["tool: request to the call"].append(call["_ms"])
        arm.figures["tool: after the result"].append(after)


async def run(arms: list[Arm], rounds: int, gap_s: float, tool_s: float) -> None:
    sessions = {}
    for arm in arms:
        chat = await arm.open({"output_modalities": ["audio"]})
        tools = await arm.open({"output_modalities": ["audio"], "tools": [WEATHER_TOOL], "tool_choice": "auto"})
        await ask(chat, "Hello!")  # uncounted: the first turn of a server
        sessions[arm.name] = (chat, tools)
    for index in range(rounds):
        for arm in arms if index % 2 == 0 else reversed(arms):  # each goes first in every other round
            chat, tools = sessions[arm.name]
            await instructions_round(chat, arm, index, gap_s)
            await tool_round(tools, arm, index, tool_s)
            print(f"round {index + 1}/{rounds} {arm.name}: " + json.dumps(arm.figures), flush=True)
    for arm in arms:
        await arm.close()


def section(arms: list[Arm], command: str, load: float, described: dict[str, str]) -> str:
    lines = [
        BEGIN,
        "## Reading ahead outside a turn: new instructions, a function's result",
        "",
        f"`{command}`, {time.strftime('%Y-%m-%d')}, on this machine ({os.cpu_count()} cores); "
        f"{machine_load(load)}. Typed turns, two units (a session for each scenario), the default models; "
        "from `response.create` to the answer's first audio, ms.",
        "",
        "| server | turn | n | p50 | p90 | min | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        for label, values in arm.figures.items():
            if values:
                figures = (pct(values, 50), pct(values, 90), min(values), max(values))
                lines.append(
                    f"| {arm.name} ({described[arm.name]}) | {label} | {len(values)} | "
                    + " | ".join(f"{v:.0f}" for v in figures)
                    + " |"
                )
    lines.append("")
    for arm in arms:
        figures = {label: pct(values, 50) for label, values in arm.figures.items() if values}
        if all(label in figures for label in ("tool: plain", "tool: request to the call", "tool: after the result")):
            turn = figures["tool: request to the call"] + figures["tool: after the result"]
            lines.append(
                f"- {arm.name}: the tool turn (request to the call, plus the result to the answer's first audio) "
                f"{turn:.0f} ms p50, {turn / figures['tool: plain']:.1f}x the same session's plain turn."
            )
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT", help="also a server of this checkout: 'before'")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--gap-s", type=float, default=1.0, help="after new instructions, before the next turn")
    parser.add_argument("--tool-s", type=float, default=0.5, help="how long the client takes to run the function")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    trees = {"after": ROOT} | ({"before": args.baseline.resolve()} if args.baseline else {})
    described = {}
    for name, tree in trees.items():
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        described[name] = rev.stdout.strip() or str(tree)
    env = {"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "2"}
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        arms = []
        try:
            for name, tree in trees.items():
                folder = Path(tmp) / name
                folder.mkdir()
                server = LiveServer(folder, env=env, root=tree).start()
                servers.append(server)
                arms.append(Arm(name, server))
            asyncio.run(run(arms, args.rounds, args.gap_s, args.tool_s))
        finally:
            for server in servers:
                server.stop()
    text = section(arms, "python bench/read_ahead.py " + shlex.join(sys.argv[1:]), os.getloadavg()[0], described)
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
