"""A spoken tool turn through pipecat's and LiveKit Agents' realtime clients, beside the raw WebSocket.

One real server (``manage.py serve``, the default models, two units) and its clients, round by round in a rotating
order, each in a session of its own per round: the raw WebSocket client the other benches use; pipecat's
``OpenAIRealtimeLLMService`` in a pipeline (bench/framework_pipecat.py, in .venv-pipecat), the user speaking first,
and again with the bot speaking first (an ``LLMRunFrame`` at the start, as pipecat's examples begin); LiveKit
Agents' ``openai.realtime.RealtimeModel``, driven as its ``AgentActivity`` drives it. Each session has an agent's
instructions, the function tools of ``bench/tool_set.py`` (``--tools 1``: get_weather; ``3``: with set_timer and
send_message), ``tool_choice: "auto"`` and server VAD (500 ms of silence). The request, spoken by the packaged
Piper voice, streams at real-time pace, then silence as a live microphone goes on; the client answers the call as
the framework does it (pipecat: the registered handler's result; LiveKit: the output put in the chat context, then
``generate_reply``; raw: ``function_call_output`` and ``response.create``).

Every client talks to the server through a recording proxy in this process, so that all are timed by one clock at
the server's door, with the client events the server got: end of speech (the last speech byte appended) ->
``response.function_call_arguments.done``; the result (``function_call_output``) -> the answer's first audio
delta; end of speech -> the answer's first audio. The LM's first tokens come from the server's records.

Run: ``python bench/framework_tools.py [--rounds 6] [--tools 1] [--checkout DIR] [--captures FILE] [--no-write]``;
the figures go to ``docs/benchmarks.md`` (the ``framework_tools`` section); ``--captures`` writes every
connection's events, timed from the end of speech, the server's records and its log.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import websockets
from livekit import rtc
from livekit.agents import llm
from livekit.plugins import openai as lk_openai
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.docs import latency_row, machine_load, write_section  # noqa: E402
from bench.recording_proxy import Capture, RecordingProxy, speech_end, timeline  # noqa: E402
from bench.tool_set import TOOLS, tool_result  # noqa: E402
from bench.voice_latency import trimmed  # noqa: E402
from tests.support.client import RealtimeClient  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken  # noqa: E402

BEGIN, END = "<!-- framework_tools:begin -->", "<!-- framework_tools:end -->"
PIPECAT_PYTHON = ROOT / ".venv-pipecat" / "bin" / "python"
PIPECAT_SCRIPT = Path(__file__).resolve().parent / "framework_pipecat.py"
RATE = 24000
LEAD_S = 0.3  # silence before the speech
TURN_TIMEOUT_S = 90.0
MAX_CALLS = 3  # results a client gives in one turn
INSTRUCTIONS = (
    "You are Ada, the voice assistant of a travel agency. Your replies are spoken aloud, so answer in one or two "
    "short, plain sentences and give the answer first. When the user asks about the weather somewhere, call "
    "get_weather with the city, then tell them what it says. Never use lists, markdown or emoji."
)
TURN_DETECTION = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
}
# (request, city): four, one per client in a round, so that no session asks what the one before it on the server
# asked (the LM's cache would hold that prompt, and which client came after which would decide the figures)
REQUESTS = [
    ("What's the weather in Paris?", "Paris"),
    ("Is it raining in London right now?", "London"),
    ("Tell me the weather in Berlin.", "Berlin"),
    ("What's the weather like in Madrid today?", "Madrid"),
]
CLIENTS = ("raw WebSocket", "pipecat", "pipecat, bot first", "LiveKit")


def tools(count: int) -> list[dict[str, Any]]:
    names = ("get_weather", "set_timer", "send_message")[:count]
    return [tool for name in names for tool in TOOLS if tool["name"] == name]


# --- the clients ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One request: its audio (24 kHz float, silence before, the speech) and the session it goes to."""

    text: str
    city: str
    audio: np.ndarray
    speech_end_bytes: int  # PCM16 bytes appended when the speech has all been sent
    tools: list[dict[str, Any]]

    @property
    def result(self) -> str:
        """What every client answers the call with: the weather in the city asked about."""
        return tool_result("get_weather", {"city": self.city}).output


async def wait_for_updates(proxy: RecordingProxy, index: int, updates: int, timeout: float = 30) -> None:
    """Until the server has answered ``updates`` ``session.update`` events on the proxy's ``index``th connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(proxy.captures) > index and proxy.captures[index].count("server", "session.updated") >= updates:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"the session's {updates} session.update events were not all answered")


async def stream(send: Any, pcm: bytes, stop: asyncio.Event, frame_bytes: int = RATE // 50 * 2) -> None:
    """``pcm``, then silence until ``stop``, in 20 ms chunks at real-time pace, each given to ``send``."""
    start, sent = time.monotonic(), 0
    while not stop.is_set():
        chunk = pcm[sent * frame_bytes : (sent + 1) * frame_bytes].ljust(frame_bytes, b"\0")
        await send(chunk)
        sent += 1
        await asyncio.sleep(max(0.0, start + sent * 0.02 - time.monotonic()))


def pcm16(samples: np.ndarray) -> bytes:
    return b"".join(base64.b64decode(chunk) for chunk in pcm16_chunks(samples))


async def raw_turn(proxy: RecordingProxy, turn: Turn) -> dict[str, Any]:
    """The raw client: session.update, the microphone, ``function_call_output`` as the call is done and
    ``response.create`` as its response is."""
    async with websockets.connect(proxy.ws, max_size=None, open_timeout=30) as ws:
        client = RealtimeClient.over_websocket(ws)
        await client.until("session.created", timeout=30)
        await client.update_session(
            instructions=INSTRUCTIONS,
            tools=turn.tools,
            tool_choice="auto",
            output_modalities=["audio"],
            audio={"input": {"turn_detection": TURN_DETECTION}},
        )
        stop, report, owed = asyncio.Event(), {}, False

        async def send(chunk: bytes) -> None:
            await client.send("input_audio_buffer.append", audio=base64.b64encode(chunk).decode())

        mic = asyncio.create_task(stream(send, pcm16(turn.audio), stop))
        try:
            deadline = time.monotonic() + TURN_TIMEOUT_S
            while (event := await client.recv(max(0.1, deadline - time.monotonic()))) is not None:
                if event["type"] == "response.function_call_arguments.done":  # every call, as an app answers
                    item = {"type": "function_call_output", "call_id": event["call_id"], "output": turn.result}
                    report.setdefault("result_at", time.monotonic())
                    await client.send("conversation.item.create", item=item)
                    owed = True
                elif event["type"] == "response.done" and owed:  # not before: the API refuses a second response
                    await client.send("response.create")
                    owed = False
                elif event["type"] == "response.output_audio.delta" and "result_at" in report:
                    report.setdefault("first_audio_at", time.monotonic())
                elif event["type"] == "response.done" and "first_audio_at" in report:
                    return report
                if time.monotonic() > deadline:
                    break
            raise TimeoutError(f"no answer within {TURN_TIMEOUT_S} s")
        finally:
            stop.set()
            await mic


async def pipecat_turn(proxy: RecordingProxy, turn: Turn, folder: Path, greet: bool) -> dict[str, Any]:
    """pipecat's service in its own interpreter (bench/framework_pipecat.py); its report. ``greet``: the bot speaks
    first, as pipecat's examples start (the context reaches the service with that response, not the user's)."""
    audio = folder / "turn.pcm"
    audio.write_bytes(pcm16(turn.audio))
    spec = folder / "turn.json"
    spec.write_text(
        json.dumps(
            {
                "instructions": INSTRUCTIONS,
                "tools": turn.tools,
                "turn_detection": TURN_DETECTION,
                "audio": str(audio),
                "result": turn.result,
                "greet": greet,
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        str(PIPECAT_PYTHON), str(PIPECAT_SCRIPT), proxy.ws, str(spec), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), TURN_TIMEOUT_S + 60)
    lines = out.decode().strip().splitlines()
    report = json.loads(lines[-1]) if lines else {"exception": f"no report (exit {process.returncode})"}
    if "exception" in report:
        raise RuntimeError(f"{report['exception']}; pipecat logged: {report['problems'][-5:]}")
    return report


async def livekit_turn(proxy: RecordingProxy, turn: Turn) -> dict[str, Any]:
    """LiveKit's RealtimeSession as ``AgentActivity`` drives it: instructions and tools at the start, the
    microphone, the tool run once the call's generation is over, its output put in the chat context
    (``update_chat_ctx``), ``interrupt()``, then ``generate_reply(tool_choice="auto")``."""
    first = len(proxy.captures)
    report: dict[str, Any] = {}
    async with aiohttp.ClientSession() as http:
        model = lk_openai.realtime.RealtimeModel(
            base_url=f"{proxy.http}/v1",
            api_key="unused",
            http_session=http,
            turn_detection=ServerVad(**TURN_DETECTION),
            tool_choice="auto",
            modalities=["audio"],
        )
        session = model.session()
        generations: asyncio.Queue[llm.GenerationCreatedEvent] = asyncio.Queue()
        session.on("generation_created", generations.put_nowait)
        session.on("error", lambda event: report.setdefault("errors", []).append(str(event.error)))
        stop = asyncio.Event()
        mic: asyncio.Task[None] | None = None
        try:
            await session.update_instructions(INSTRUCTIONS)
            await session.update_tools([raw_tool(schema) for schema in turn.tools])
            await wait_for_updates(proxy, first, 3)  # the connection's own, the instructions', the tools'

            async def send(chunk: bytes) -> None:
                session.push_audio(rtc.AudioFrame(chunk, RATE, 1, len(chunk) // 2))

            mic = asyncio.create_task(stream(send, pcm16(turn.audio), stop))
            async with asyncio.timeout(TURN_TIMEOUT_S):
                calls: list[llm.FunctionCall] = []
                while not calls:  # the generation that calls the function
                    calls = (await consume(await generations.get(), report))[1]
                for _ in range(MAX_CALLS):  # every call answered, as the agent does, until an answer has none
                    chat = session.chat_ctx.copy()
                    for call in calls:
                        output = llm.FunctionCallOutput(
                            call_id=call.call_id, name=call.name, output=turn.result, is_error=False
                        )
                        chat.items.append(output)
                    report.setdefault("result_at", time.monotonic())
                    await session.update_chat_ctx(chat)
                    session.interrupt()
                    answer = await session.generate_reply(tool_choice="auto")
                    if not (calls := (await consume(answer, report))[1]):
                        break
            return report
        finally:
            stop.set()
            if mic:
                await mic
            await session.aclose()
            await model.aclose()


def raw_tool(schema: dict[str, Any]) -> llm.RawFunctionTool:
    async def run(raw_arguments: dict[str, Any]) -> str:
        return tool_result(schema["name"], raw_arguments).output

    return llm.function_tool(run, raw_schema={k: v for k, v in schema.items() if k != "type"})


async def consume(generation: llm.GenerationCreatedEvent, report: dict[str, Any]) -> tuple[str, list[Any]]:
    """A generation's text and calls; the first audio frame after the result is noted in ``report``."""
    said = ""

    async def text(stream: Any) -> None:
        nonlocal said
        async for delta in stream:
            said += str(delta)

    async def audio(stream: Any) -> None:
        async for _frame in stream:  # as an agent's audio output takes it, while the text goes on
            if "result_at" in report:
                report.setdefault("first_audio_at", time.monotonic())

    async def messages() -> None:
        async for message in generation.message_stream:
            await asyncio.gather(text(message.text_stream), audio(message.audio_stream))

    reading = asyncio.create_task(messages())
    calls = [call async for call in generation.function_stream]
    await reading
    return said, calls


# --- the figures --------------------------------------------------------------------------------------------


def figures(capture: Capture, speech_end_bytes: int, report: dict[str, Any]) -> dict[str, Any]:
    """The turn's times (ms) as the proxy saw them, and what the client sent between the call and the answer."""
    end = speech_end(capture, speech_end_bytes)

    def first(side: str, after: float | None, test: Any) -> tuple[float, dict[str, Any]] | None:
        if after is None:
            return None
        return next(((t, e) for t, s, e in capture.events if s == side and t >= after and test(e)), None)

    call = first("server", end, lambda e: e["type"] == "response.function_call_arguments.done")
    result = first(
        "client", end, lambda e: e["type"] == "conversation.item.create" and e["item"]["type"] == "function_call_output"
    )
    create = first("client", result and result[0], lambda e: e["type"] == "response.create")
    created = first("server", result and result[0], lambda e: e["type"] == "response.created")
    calling = first("server", end, lambda e: e["type"] == "response.created")
    audio = first("server", result and result[0], lambda e: e["type"] == "response.output_audio.delta")
    if not (end and call and result and audio):
        raise RuntimeError(
            "the turn is missing "
            + ", ".join(n for n, v in [("end", end), ("call", call), ("result", result), ("audio", audio)] if not v)
        )
    between = [
        e["type"]
        for t, s, e in capture.events
        if s == "client" and call[0] <= t <= audio[0] and e["type"] != "input_audio_buffer.append"
    ]
    client_audio = report.get("first_audio_at")
    return {
        "call": (call[0] - end) * 1000,
        "answer": (audio[0] - result[0]) * 1000,
        "total": (audio[0] - end) * 1000,
        "reaction": (result[0] - call[0]) * 1000,  # the call done -> the result sent
        "create_gap": (create[0] - result[0]) * 1000 if create else None,
        "created_gap": (created[0] - create[0]) * 1000 if create and created else None,
        "to_output": (client_audio - audio[0]) * 1000 if client_audio else None,
        "answer_response": created[1]["response"]["id"] if created else None,
        "call_response": calling[1]["response"]["id"] if calling else None,
        "client_events": between,
        "session_updates": capture.count("client", "session.update"),
        "calls": sum(
            1 for t, s, e in capture.events if t >= end and e["type"] == "response.function_call_arguments.done"
        ),
        "errors": [
            e.get("error", {}).get("message") for _, s, e in capture.events if s == "server" and e["type"] == "error"
        ],
    }


def records(db: Path) -> dict[str, tuple[float | None, dict[str, Any]]]:
    """The server's record of each response: its LM first token (ms) and its breakdown."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT response_id, lm_first_token_s, breakdown FROM realtime_responserecord").fetchall()
    finally:
        con.close()
    return {rid: (s * 1000 if s is not None else None, json.loads(b or "{}")) for rid, s, b in rows}


async def one(name: str, proxy: RecordingProxy, turn: Turn, folder: Path) -> dict[str, Any]:
    start = len(proxy.captures)
    if name == "raw WebSocket":
        report = await raw_turn(proxy, turn)
    elif name.startswith("pipecat"):
        report = await pipecat_turn(proxy, turn, folder, greet=name == "pipecat, bot first")
    else:
        report = await livekit_turn(proxy, turn)
    await asyncio.sleep(1.0)  # the session ends and its unit drains
    return figures(proxy.captures[start], turn.speech_end_bytes, report)


async def run(
    proxy: RecordingProxy, rounds: int, tool_count: int, folder: Path, timelines: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Every client's turn in every round (round -1 uncounted); each connection's timeline goes to ``timelines``."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CLIENTS}
    previous = None
    for index in range(-1, rounds):  # round -1: uncounted, loads the server and shows each client can do it
        spoken.cache_clear()  # a new rendering of the voice each round
        order = CLIENTS[index % len(CLIENTS) :] + CLIENTS[: index % len(CLIENTS)]
        order = order[::-1] if index % 2 else order  # so that each client comes after two others in turn
        for name in order:
            text, city = REQUESTS[(index + CLIENTS.index(name)) % len(REQUESTS)]  # each client each request in turn
            speech = trimmed(text)
            audio = np.concatenate([silence(LEAD_S), speech])
            turn = Turn(text, city, audio, (int(LEAD_S * RATE) + len(speech)) * 2, tools(tool_count))
            start = len(proxy.captures)
            try:
                row = await one(name, proxy, turn, folder)
            except Exception as exc:  # a finding: say what failed and go on
                row = {"failed": f"{type(exc).__name__}: {exc}"}
                if not any(c.count("server", "response.function_call_arguments.done") for c in proxy.captures[start:]):
                    row["failed"] = "no call: the model answered without calling the function"
            row["round"], row["after"] = index, previous
            previous = name
            timelines.append(f"## {name}, round {index}: {text}")
            for capture in proxy.captures[start:]:
                timelines += [*timeline(capture, turn.speech_end_bytes), ""]
            print(f"round {index + 1}/{rounds} {name}: {json.dumps(row)}", flush=True)
            if index >= 0:
                results[name].append(row)
    return results


def section(
    results: dict[str, list[dict[str, Any]]], command: str, loads: tuple[float, float], described: str, tool_count: int
) -> str:
    lines = [
        BEGIN,
        "## A spoken tool turn through pipecat and LiveKit Agents, beside the raw WebSocket",
        "",
        f"`{command}`, {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}, server {described}, {os.cpu_count()} cores "
        f"(`nproc`), load average {loads[0]:.1f} before / {loads[1]:.1f} after; {machine_load(loads[1])}. One "
        f"server (two units, the default models), {tool_count} function tool(s), server VAD (500 ms), a new "
        "session per client and round, the clients in a rotating order (reversed every other round), each with "
        "a request other than the session's before it; times at the server's door (a recording proxy every client "
        "goes through), ms.",
        "",
        "| client | turn | n | p50 | p90 | min | max |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {
        "call": "end of speech -> call done",
        "answer": "result sent -> answer's first audio",
        "total": "end of speech -> answer's first audio",
        "reaction": "call done -> result sent",
        "create_gap": "result sent -> response.create",
        "call_lm": "the call's LM first token (server)",
        "lm": "answer's LM first token (server)",
    }
    for name, rows in results.items():
        done = [r for r in rows if "failed" not in r]
        for key, label in labels.items():
            values = [r[key] for r in done if r.get(key) is not None]
            if values:
                lines.append(latency_row(f"{name} | {label}", values))
    raw = [r["total"] for r in results["raw WebSocket"] if "failed" not in r]
    lines += [
        "",
        "| client | turns done | failed | total p50 - raw WS p50 | turns with a second call "
        "| client events between the call and the answer |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        done = [r for r in rows if "failed" not in r]
        diff = (
            f"{np.percentile([r['total'] for r in done], 50) - np.percentile(raw, 50):+.0f} ms" if done and raw else "-"
        )
        seen = sorted({" ".join(r["client_events"]) for r in done})
        failures = "; ".join(sorted({r["failed"][:300] for r in rows if "failed" in r}))
        events = "<br>".join(f"`{s}`" for s in seen)
        again = sum(1 for r in done if r["calls"] > 1)
        lines.append(f"| {name} | {len(done)} | {len(rows) - len(done)} {failures} | {diff} | {again} | {events} |")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tools", type=int, choices=(1, 3), default=1)
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout whose server runs")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--captures", type=Path, metavar="FILE", help="every connection's events, timed, go here")
    args = parser.parse_args()
    if not PIPECAT_PYTHON.exists():
        sys.exit("pipecat's interpreter is missing: make pipecat-deps")
    rev = subprocess.run(
        ["git", "-C", str(args.checkout), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    described = rev.stdout.strip() or str(args.checkout)
    loads, timelines = [os.getloadavg()[0]], []
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(Path(tmp), env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "2"}, root=args.checkout.resolve())
        server.start(ready_timeout=900)
        proxy = RecordingProxy(server.ws).start()
        try:
            results = asyncio.run(
                asyncio.wait_for(
                    run(proxy, args.rounds, args.tools, Path(tmp), timelines), (args.rounds + 1) * len(CLIENTS) * 200
                )
            )
            time.sleep(3)  # the record writer catches up
            recorded = records(Path(tmp) / "server.sqlite3")
            for rows in results.values():
                for r in rows:
                    r["lm"] = recorded.get(r.get("answer_response") or "", (None,))[0]
                    r["call_lm"] = recorded.get(r.get("call_response") or "", (None,))[0]
            timelines += ["## the server's records"] + [f"{rid} {json.dumps(v)}" for rid, v in recorded.items()]
            timelines += ["## the server's log", server.full_log()]
        finally:
            proxy.stop()
            server.stop()
    loads.append(os.getloadavg()[0])
    if args.captures:
        args.captures.write_text("\n".join(timelines))
    command = "python bench/framework_tools.py " + shlex.join(sys.argv[1:])
    text = section(results, command, (loads[0], loads[1]), described, args.tools)
    print(text)
    print(json.dumps(results))
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
