"""Function calling with the real server: the whole voice-agent turn, from the request to the spoken answer.

Starts ``manage.py serve`` with the real pipeline (one unit per LM model
compared) and plays a client of the Realtime API: a session offers the seven
tools of ``bench/tool_set.py`` (``tool_choice: "auto"``, the server's default
instructions, greedy decoding) and sends each request of the set:

* 32 that need one call, 16 that need none, 8 that need two calls in sequence
  and 8 whose call gets an error back;
* typed (a user text item, then ``response.create``) and spoken (the request
  spoken by the packaged Piper voice, appended as audio, committed, then
  ``response.create``: the server's faster-whisper transcribes it);
* fresh sessions (one session per request) and later turns (requests one
  after another in one session of ``--turns-per-session``, which starts with
  an earlier weather call and its answer in the history, so every measured
  request has a tool call and its result before it; ``--no-primer`` leaves
  that out).

Every call gets a result back as a client does (``conversation.item.create``
``function_call_output``, then ``response.create``): a plausible one for that
function (``tool_result``), or an error for the error requests. The response
that follows is scored (``bench/tool_scoring.py``): a text answer in words that
carries a key fact of the result, no call markup in the transcript the client
sees (and TTS speaks), or another call (right when the request needs a second
call, else a follow-up call: a miss). A call that needs no answer is given its
result and the request ends there. Call markup is also counted in every text
response, a text answer to the request itself included. Each server first
answers one uncounted request (loading, grammar compilation).

Counts per model, input and session kind: right first calls (right function
and expected arguments), wrong function, wrong arguments, no call; false calls
among the requests that need none; answers after a result in words; answers
with call markup (and all text responses with it); follow-up calls; two-call
requests completed (both calls right, the answer carrying a fact of each
result); error results told to the user; latency from the request to the
finished call (``function_call_arguments.done``, STT included when spoken),
from the result to the answer's first audio, and the STT's.

Run: ``python bench/tool_calls.py`` (``--help``; ``--limit 4 --modes typed`` for
a quick trial; ``--lm-model A.gguf B.gguf`` compares two models on the same
requests, interleaved). Prints markdown, writes everything with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.tool_scoring import call_markup, in_words, says_fact  # noqa: E402
from bench.tool_set import (  # noqa: E402
    CHAT_REQUESTS,
    ERROR_REQUESTS,
    TOOL_REQUESTS,
    TOOLS,
    TWO_CALL_REQUESTS,
    Call,
    Request,
    ToolResult,
    arguments_match,
    tool_result,
)
from pipelines.config import DEFAULT_LM_BACKEND  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken  # noqa: E402

logger = logging.getLogger(__name__)
FUNCTION_NAMES = [tool["name"] for tool in TOOLS]
TIMEOUT_S = 240.0
WARM_UP = "Set a timer for 3 minutes for the tea."  # not one of the set's requests
MAX_ROUNDS = 3  # results given per request: two calls and one spare
# The earlier turn every later-turns session starts with: a call, its result and a spoken answer.
PRIMER = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What's the weather in Vienna?"}]},
    {"type": "function_call", "call_id": "call_primer", "name": "get_weather", "arguments": '{"city": "Vienna"}'},
    {
        "type": "function_call_output",
        "call_id": "call_primer",
        "output": tool_result("get_weather", {"city": "Vienna"}).output,
    },
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It is sunny in Vienna, twenty-one degrees."}],
    },
]


@dataclass
class Response:
    """What the client saw of one response: its calls, its text (transcript deltas as they came, and the final
    item's), its status and its times from the ``response.create`` (or the commit of spoken input)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    final_text: str = ""
    status: str = ""
    call_s: float | None = None
    stt_s: float | None = None
    first_audio_s: float | None = None
    done_s: float | None = None
    error: str | None = None


class Client:
    """One Realtime session over WebSocket."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.heard: str | None = None  # the server's transcript of the last spoken request
        self.sent = 0

    @classmethod
    async def open(cls, url: str, session: dict[str, Any], primer: bool) -> Client:
        deadline = time.monotonic() + 30
        while True:
            ws = await websockets.connect(url, max_size=None, open_timeout=30)
            created = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if created["type"] == "session.created":
                break
            await ws.close()  # the previous session's unit may still be draining
            if created.get("error", {}).get("code") != "session_limit_reached" or time.monotonic() > deadline:
                raise RuntimeError(f"no session: {created}")
            await asyncio.sleep(0.2)
        client = cls(ws)
        await client.send({"type": "session.update", "session": session})
        await client.wait_for("session.updated")
        for item in PRIMER if primer else []:
            await client.send({"type": "conversation.item.create", "item": item})
        return client

    async def send(self, event: dict[str, Any]) -> str:
        """Sends ``event`` with an ``event_id`` of its own (an ``error`` names the event it answers); the id."""
        self.sent += 1
        event_id = f"event_bench_{self.sent}"
        await self.ws.send(json.dumps({"event_id": event_id, **event}))
        return event_id

    async def wait_for(self, kind: str) -> dict[str, Any]:
        while True:
            event = json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT_S))
            if event["type"] == kind:
                return event
            if event["type"] == "error":
                raise RuntimeError(f"error while waiting for {kind}: {event}")

    async def ask_typed(self, text: str) -> Response:
        await self.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            }
        )
        return await self.respond()

    async def ask_spoken(self, chunks: list[str]) -> Response:
        """The request's audio (no turn detection: the client commits), then ``response.create``; the clock
        starts at the commit, so the call's latency includes the server's STT."""
        self.heard = None
        for chunk in chunks:
            await self.send({"type": "input_audio_buffer.append", "audio": chunk})
        await self.send({"type": "input_audio_buffer.commit"})
        return await self.respond()

    async def give_results(self, results: list[tuple[str, ToolResult]]) -> None:
        for call_id, result in results:
            await self.send(
                {
                    "type": "conversation.item.create",
                    "item": {"type": "function_call_output", "call_id": call_id, "output": result.output},
                }
            )

    async def respond(self, params: dict[str, Any] | None = None) -> Response:
        """``response.create`` and the events up to its ``response.done``, or to an ``error`` that refuses it;
        errors about other events (a result the server refused) are kept in ``error``."""
        started = time.monotonic()
        create = await self.send({"type": "response.create", **({"response": params} if params else {})})
        out, deltas, errors = Response(), [], []
        while True:
            event = json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT_S))
            kind, now = event["type"], time.monotonic() - started
            if kind == "conversation.item.input_audio_transcription.completed":
                self.heard, out.stt_s = event["transcript"].strip(), now
            elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
                deltas.append(event["delta"])
            elif kind == "response.output_audio.delta" and out.first_audio_s is None:
                out.first_audio_s = now
            elif kind == "response.function_call_arguments.done" and out.call_s is None:
                out.call_s = now
            elif kind == "error":
                errors.append(event["error"].get("message") or str(event))
                out.error = " | ".join(errors)
                if event["error"].get("event_id") == create:
                    out.status = "refused"
                    return out
            elif kind == "response.done":
                break
        response = event["response"]
        out.status, out.done_s, out.text = response["status"], now, "".join(deltas)
        for item in response.get("output", []):
            if item["type"] == "function_call":
                out.calls.append({"name": item["name"], "arguments": item["arguments"], "call_id": item["call_id"]})
            elif item["type"] == "message":
                out.final_text += " ".join(p.get("transcript") or p.get("text") or "" for p in item["content"])
        return out


def parsed(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def call_verdict(due: Call | None, call: dict[str, Any] | None) -> str:
    """A call (or none) against the call a request needs (or None)."""
    if due is None:
        return "false call" if call else "no call (right)"
    if call is None:
        return "no call"
    if call["name"] != due.tool:
        return "wrong function"
    return "right" if arguments_match(due.expect, parsed(call["arguments"])) else "wrong arguments"


async def one_request(
    client: Client, request: Request, audio: list[str] | None, followup: dict[str, Any] | None
) -> dict[str, Any]:
    """A request, then as a client does: each call's result and ``response.create``, until a text answer (or
    a call that no result asks for, or :data:`MAX_ROUNDS` results); the steps and their scores."""
    first = await (client.ask_spoken(audio) if audio else client.ask_typed(request.text))
    steps, results, due = [first], [], request.calls
    row: dict[str, Any] = {
        "heard": client.heard if audio else request.text,
        "first": call_verdict(due[0] if due else None, first.calls[0] if first.calls else None),
        "second": None,
        "answers": [],
    }
    if request.then and len(first.calls) > 1:  # both calls at once
        row["second"] = call_verdict(request.then, first.calls[1])
    response = first
    while response.calls and len(results) < MAX_ROUNDS:
        wanted = response is first or (request.then is not None and len(results) == 1)
        given = [
            (c["call_id"], tool_result(c["name"], parsed(c["arguments"]), None if results else request.error))
            for c in response.calls
        ]
        await client.give_results(given)
        results += [r for _, r in given]
        if not wanted:
            break  # a follow-up call where an answer was due: its result goes in the history, no answer is asked
        response = await client.respond(followup)
        steps.append(response)
        if response.calls and request.then and len(results) == 1:
            row["second"] = call_verdict(request.then, response.calls[0])
            continue
        text = response.final_text or response.text
        row["answers"].append(
            {
                "after_error": results[-1].error,
                "text": text,
                "markup": markup(asdict(response)),
                "followup_call": bool(response.calls),
                "in_words": not response.calls and in_words(text, results[-1], FUNCTION_NAMES),
                "answer_s": response.first_audio_s,
            }
        )
    if request.then:
        row["second"] = row["second"] or "no call"
        final = row["answers"][-1] if row["answers"] else None
        row["two_done"] = (
            row["first"] == "right"
            and row["second"] == "right"
            and final is not None
            and final["in_words"]
            and len(results) >= 2
            and all(any(says_fact(final["text"], f) for f in r.facts) for r in results[:2])
        )
    if request.error and results:
        row["error_told"] = bool(row["answers"]) and row["answers"][0]["in_words"]
    row["results"] = [asdict(r) for r in results]
    row["steps"] = [asdict(s) for s in steps]
    row["call_s"], row["stt_s"] = first.call_s, first.stt_s
    return row


def markup(step: dict[str, Any]) -> list[str]:
    """The call markup in a response's text: the transcript deltas the client saw and its final item."""
    return sorted(set(call_markup(step["text"], FUNCTION_NAMES)) | set(call_markup(step["final_text"], FUNCTION_NAMES)))


def failed(request: Request, exc: BaseException) -> dict[str, Any]:
    """A request the server did not see through (no event for :data:`TIMEOUT_S`, an error, a closed socket):
    it counts as missed everywhere it would have counted."""
    logger.error("%r failed: %r", request.text, exc)
    return {
        "heard": None,
        "first": "failed",
        "second": "failed" if request.then else None,
        "answers": [],
        "results": [],
        "steps": [],
        "call_s": None,
        "stt_s": None,
        "failed": repr(exc),
        **({"two_done": False} if request.then else {}),
    }


def request_set(limit: int | None, counts: dict[str, int]) -> list[Request]:
    """The requests, the four kinds interleaved (so a later-turns session holds every kind)."""
    kinds = {"tool": TOOL_REQUESTS, "chat": CHAT_REQUESTS, "two calls": TWO_CALL_REQUESTS, "error": ERROR_REQUESTS}
    chosen = [
        reqs[: min(counts.get(kind, len(reqs)), limit if limit is not None else len(reqs))]
        for kind, reqs in kinds.items()
    ]
    out: list[Request] = []
    for index in range(max(map(len, chosen))):
        out += [reqs[index] for reqs in chosen if index < len(reqs)]
    return out


def session_config(choice: str, temperature: float | None) -> dict[str, Any]:
    session: dict[str, Any] = {
        "type": "realtime",
        "tools": TOOLS,
        "tool_choice": choice,
        "audio": {"input": {"turn_detection": None}},
    }
    if temperature is not None:
        session["temperature"] = temperature
    return session


async def run_block(
    urls: dict[str, str],
    mode: str,
    sessions: str,
    requests: list[Request],
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
) -> None:
    """Every request on every model (the models' order alternating per request), in one input mode and one
    session kind."""
    session = session_config(args.tool_choice, args.temperature)
    followup = {"tool_choice": "auto"} if args.tool_choice == "required" else None
    clients: dict[str, Client] = {}
    try:
        for index, request in enumerate(requests):
            audio = spoken_chunks(request.text) if mode == "spoken" else None
            for label in list(urls) if index % 2 == 0 else list(reversed(urls)):
                if sessions == "fresh" or index % args.turns_per_session == 0 or label not in clients:
                    if label in clients:
                        await clients.pop(label).ws.close()
                    primer = sessions == "later" and args.primer
                    clients[label] = await Client.open(urls[label], session, primer)
                row = {
                    "model": label,
                    "mode": mode,
                    "sessions": sessions,
                    "request": request.text,
                    "kind": request.kind,
                }
                try:
                    row |= await one_request(clients[label], request, audio, followup)
                except (TimeoutError, RuntimeError, websockets.ConnectionClosed) as exc:
                    row |= failed(request, exc)
                    await clients.pop(label).ws.close()  # the next request opens a new session
                rows.append(row)
                log_row(row)
                if args.json:
                    write_json(args.json, rows, args.meta)
    finally:
        for client in clients.values():
            await client.ws.close()


def spoken_chunks(text: str) -> list[str]:
    """The request spoken by the packaged Piper voice (the same audio every run), between short silences."""
    return pcm16_chunks(np.concatenate([silence(0.3), spoken(text), silence(0.3)]), chunk_ms=200)


def log_row(row: dict[str, Any]) -> None:
    said = " | ".join(
        f"{'CALL ' if a['followup_call'] else ''}{a['text'][:70]!r}{' MARKUP' if a['markup'] else ''}"
        for a in row["answers"]
    )
    if row["steps"] and not row["steps"][0]["calls"]:
        said = repr(row["steps"][0]["final_text"][:70])
    calls = [c["name"] for s in row["steps"] for c in s["calls"]]
    print(
        f"{row['model']:10} {row['mode']:6} {row['sessions']:5} {row['kind']:9} {row['first']:15} "
        f"{row['request'][:50]!r} heard {row['heard']!r} calls {calls} -> {said}",
        file=sys.stderr,
        flush=True,
    )


def write_json(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Everything so far (written after each request, so an interrupted run keeps its rows)."""
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f} %)" if d else "-"


def p50_p90(values: list[float | None]) -> str:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f} / {xs[round(0.9 * (len(xs) - 1))]:.2f}"


def group_line(mine: list[dict[str, Any]]) -> str:
    need = [r for r in mine if r["kind"] != "chat"]
    chat = [r for r in mine if r["kind"] == "chat"]
    count = {v: sum(r["first"] == v for r in need) for v in ("right", "wrong function", "wrong arguments", "no call")}
    answers = [a for r in mine for a in r["answers"] if not a["after_error"]]
    every = [a for r in mine for a in r["answers"]]
    spoken = [s for r in mine for s in r["steps"] if not s["calls"]]
    two = [r for r in mine if r["kind"] == "two calls"]
    errors = [r for r in mine if "error_told" in r]
    first = mine[0]
    return (
        f"| {first['model']} | {first['mode']} | {first['sessions']} | {pct(count['right'], len(need))} | "
        f"{count['wrong function']} | {count['wrong arguments']} | {count['no call']} | "
        f"{pct(sum(r['first'] == 'false call' for r in chat), len(chat))} | "
        f"{pct(sum(a['in_words'] for a in answers), len(answers))} | "
        f"{sum(bool(a['markup']) for a in every)}/{len(every)} | "
        f"{sum(bool(markup(s)) for s in spoken)}/{len(spoken)} | {sum(a['followup_call'] for a in every)} | "
        f"{pct(sum(r['two_done'] for r in two), len(two))} | "
        f"{pct(sum(r['error_told'] for r in errors), len(errors))} | "
        f"{p50_p90([r['call_s'] for r in mine])} | {p50_p90([a['answer_s'] for a in every])} | "
        f"{p50_p90([r.get('stt_s') for r in mine])} |"
    )


def aims(mine: list[dict[str, Any]]) -> str:
    """Whether one row meets the aims, and the figures that miss them."""
    need = [r for r in mine if r["kind"] != "chat"]
    chat = [r for r in mine if r["kind"] == "chat"]
    answers = [a for r in mine for a in r["answers"] if not a["after_error"]]
    right = sum(r["first"] == "right" for r in need) / max(1, len(need))
    false = sum(r["first"] == "false call" for r in chat) / max(1, len(chat))
    words = sum(a["in_words"] for a in answers) / max(1, len(answers))
    marked = sum(bool(markup(s)) for r in mine for s in r["steps"] if not s["calls"])
    missed = [
        text
        for text, ok in (
            (f"right first calls {100 * right:.0f} %", right >= 0.9),
            (f"false calls {100 * false:.0f} %", false <= 0.05),
            (f"answers in words {100 * words:.0f} %", words == 1.0 and bool(answers)),
            (f"{marked} text responses with call markup", marked == 0),
        )
        if not ok
    ]
    first = mine[0]
    return f"{first['model']}, {first['mode']}, {first['sessions']}: " + (
        "met" if not missed else "not met (" + ", ".join(missed) + ")"
    )


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | input | sessions | right first calls | wrong function | wrong arguments | no call | "
        "false calls | answers after a result in words | answers after a result with call markup | "
        "text responses with call markup (all) | follow-up calls (misses) | "
        "two calls completed | error results told | request to finished call p50 / p90 s | "
        "result to answer audio p50 / p90 s | STT p50 / p90 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["mode"], row["sessions"]), []).append(row)
    lines += [group_line(mine) for mine in groups.values()]
    lines += [
        "",
        "Aims (at least 90 % right first calls, at most 5 % false calls, every answer after a result in "
        "words, none with call markup):",
        "",
    ] + [f"- {aims(mine)}" for mine in groups.values()]
    examples = [
        (
            r["model"],
            r["mode"],
            r["sessions"],
            r["request"],
            "after a result" if n else "to the request",
            s["final_text"] or s["text"],
            markup(s),
        )
        for r in rows
        for n, s in enumerate(r["steps"])
        if not s["calls"] and markup(s)
    ]
    if examples:
        lines += ["", f"Text responses with call markup ({len(examples)}), the first five:", ""]
        lines += [
            f"- {model}, {mode}, {sessions}, {request!r}, {when}: {text[:160]!r} (markers: {' '.join(markup)})"
            for model, mode, sessions, request, when, text, markup in examples[:5]
        ]
    return "\n".join(lines)


def header(meta: dict[str, Any]) -> str:
    """The run's command, machine and settings, as the line above its table."""
    models = ", ".join(f"{label} ({path or 'the default'})" for label, path in meta["models"].items())
    temperature = meta["temperature"] if meta["temperature"] is not None else "greedy (the server's default)"
    return (
        f"`{meta['command']}` on {meta['date']}, {meta['machine']}, load average {meta['load_before']:.1f} "
        f"before / {meta.get('load_after', float('nan')):.1f} after, {meta.get('minutes', '?')} min; LM engine "
        f"{meta['backend']}, models: {models}; tool_choice {meta['tool_choice']}, temperature {temperature}."
    )


def model_labels(paths: list[str]) -> dict[str, str | None]:
    """A label per LM model: the file's name (the path where two share it); ``default`` for the server's own."""
    if not paths:
        return {"default": None}
    names = [Path(p).name for p in paths]
    return {name if names.count(name) == 1 else path: path for name, path in zip(names, paths)}


async def warm_up(urls: list[str], session: dict[str, Any]) -> None:
    """One call and its answer on each server, not counted: the first request pays for loading and compiling."""
    for url in urls:
        client = await Client.open(url, session, primer=False)
        try:
            first = await client.ask_typed(WARM_UP)
            if first.calls:
                await client.give_results(
                    [(c["call_id"], tool_result(c["name"], parsed(c["arguments"]))) for c in first.calls]
                )
                await client.respond()
        finally:
            await client.ws.close()


def model_env(path: str | None) -> dict[str, str]:
    """``A``: S2S_LM_MODEL; ``A+B``: a model for each job, A deciding on calls and writing them, B answering in
    words (S2S_LM_ANSWER_MODEL); "default" for A is the server's default model."""
    if not path:
        return {}
    decides, _, answers = path.partition("+")
    env = {"S2S_LM_MODEL": decides} if decides != "default" else {}
    return env | ({"S2S_LM_ANSWER_MODEL": answers} if answers else {})


def start_servers(models: dict[str, str | None], backend: str) -> dict[str, LiveServer]:
    servers: dict[str, LiveServer] = {}
    try:
        for label, path in models.items():
            env = {
                "S2S_PIPELINE": "real",
                "S2S_POOL_SIZE": "1",
                "S2S_LOG_LEVEL": "warning",
                "S2S_LM_BACKEND": backend,
                **model_env(path),
            }
            work = Path(tempfile.mkdtemp(prefix="s2s-tool-calls-"))
            servers[label] = LiveServer(work, env=env).start(ready_timeout=900)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    requests = request_set(
        args.limit,
        {
            "tool": args.tool_requests,
            "chat": args.chat_requests,
            "two calls": args.two_call_requests,
            "error": args.error_requests,
        },
    )
    models = model_labels(args.lm_model)
    meta = {
        "command": " ".join(shlex.quote(a) for a in ["python", "bench/tool_calls.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="minutes"),
        "models": models,
        "backend": args.lm_backend,
        "primer": args.primer,
        "tool_choice": args.tool_choice,
        "temperature": args.temperature,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_before": os.getloadavg()[0],
    }
    rows: list[dict[str, Any]] = []
    args.meta = meta
    servers = start_servers(models, args.lm_backend)
    started = time.monotonic()
    try:
        asyncio.run(
            warm_up([server.ws for server in servers.values()], session_config(args.tool_choice, args.temperature))
        )
        for sessions in args.sessions:
            for mode in args.modes:
                asyncio.run(
                    run_block({label: s.ws for label, s in servers.items()}, mode, sessions, requests, args, rows)
                )
    finally:
        for server in servers.values():
            server.stop()
    meta |= {"minutes": round((time.monotonic() - started) / 60, 1), "load_after": os.getloadavg()[0]}
    if args.json:
        write_json(args.json, rows, meta)
    return rows, meta


def listed(values: list[str]) -> list[str]:
    """``--modes typed,spoken`` or ``--modes typed spoken``."""
    return [v for value in values for v in value.split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, help="at most N requests of each kind (tool, chat, two calls, error)")
    parser.add_argument("--tool-requests", type=int, default=len(TOOL_REQUESTS))
    parser.add_argument("--chat-requests", type=int, default=len(CHAT_REQUESTS))
    parser.add_argument("--two-call-requests", type=int, default=len(TWO_CALL_REQUESTS))
    parser.add_argument("--error-requests", type=int, default=len(ERROR_REQUESTS))
    parser.add_argument("--modes", nargs="+", default=["typed", "spoken"], help="typed,spoken")
    parser.add_argument("--sessions", nargs="+", default=["fresh", "later"], help="fresh,later")
    parser.add_argument("--turns-per-session", type=int, default=8, help="requests per later-turns session")
    parser.add_argument(
        "--primer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="later-turns sessions start with an earlier call, its result and answer (--no-primer: "
        "the first request of each session is a fresh turn)",
    )
    parser.add_argument(
        "--lm-model",
        nargs="*",
        default=[],
        metavar="PATH",
        help="the LM model (S2S_LM_MODEL, e.g. a .gguf or a packaged name; DECIDES+ANSWERS: a model for each "
        "job, 'default' for the default); two or more are compared on the same requests, one server each, "
        "interleaved",
    )
    parser.add_argument("--lm-backend", default=DEFAULT_LM_BACKEND, choices=["llama_cpp", "transformers"])
    parser.add_argument(
        "--tool-choice",
        default="auto",
        choices=["auto", "required"],
        help="'required' forces the first call (the answers after results are asked with 'auto')",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        help="session temperature (default: the server's, greedy); clients may ask for 0.6-1.2",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier run's JSON")
    args = parser.parse_args()
    args.modes, args.sessions = listed(args.modes), listed(args.sessions)
    if not set(args.modes) <= {"typed", "spoken"} or not set(args.sessions) <= {"fresh", "later"}:
        parser.error("--modes takes typed,spoken and --sessions fresh,later")
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        rows, meta = data["rows"], data["meta"]
    else:
        rows, meta = run(args)
    print(header(meta) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
