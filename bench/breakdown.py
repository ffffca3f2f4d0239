"""Where a turn's time goes, end of speech to first reply audio: per transport, turn detection and talkers.

Starts one ``manage.py serve`` (real default models, pool of 4) per configuration: the defaults and
each ``--compare 'ENV=VALUE ...'`` variant. Two blocks, each interleaved round by round across the
configurations (the order alternating) and within a round across its scenarios, so that a busy
machine weighs on every figure alike:

1. One talker: a WebSocket session whose turns alternate between ``server_vad`` (500 ms) and
   ``semantic_vad`` (auto), and a WebRTC call (aiortc: the question on an Opus track, the reply
   timed at the first audible frame it receives, after the client's jitter buffer).
2. Many talkers: four WebSocket sessions; each round, one alone, two at once, four at once.

A turn is a Piper question (trimmed of silence) at real-time pace, then silence. The client times
the end of speech (its last speech sample sent), ``speech_stopped``, the first transcript delta and
the first audible reply audio. The server's breakdown of each response (pipelines/timeline.py,
``ResponseRecord.breakdown``: marks on ``time.monotonic()``, the same clock as the client's)
gives the spans between: the VAD's last speech frame, speculation, STT, LM, TTS, the decision,
the release of held output, the send; the bench adds the first span (the client's end of speech to
the VAD's last speech frame: Silero's decay) and the last (sent to received).

Run: ``python bench/breakdown.py --turns 5 --compare 'S2S_STT_WINDOW_S=30'`` (``--help``); prints
markdown and rewrites its section of docs/benchmarks.md and docs/breakdown.png. ``--scenarios
websocket/semantic_vad websocket/server_vad`` runs only those (with ``--no-write`` for a partial run).

``--capacity 4,8,16,32,64 --env '...'`` instead finds how many sessions one server holds with first
audio p90 under 1 s: that many WebSocket talkers at once, for each count in turn. On a GPU machine:
``--env 'S2S_DEVICE=cuda S2S_LM_BACKEND=transformers S2S_LM_BATCHING=1 S2S_STT_BATCH_WINDOW_MS=30
S2S_TTS_SLOTS=4'`` (the LM batched across sessions by continuous batching, Whisper's utterances batched).
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
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import psutil
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from bench.voice_latency import QUESTIONS, pct, trimmed  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.timeline import spans  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence  # noqa: E402
from tests.support.webrtc_client import WebRTCClient  # noqa: E402

BEGIN, END = "<!-- breakdown:begin -->", "<!-- breakdown:end -->"
CAPACITY_BEGIN, CAPACITY_END = "<!-- capacity:begin -->", "<!-- capacity:end -->"
PLOT = "breakdown.png"
RATE = 24000
CHUNK_MS = 20
LOUD = 0.02
POOL = 4
TALKERS = (1, 2, 4)
DETECTION = {
    "server_vad": {"type": "server_vad", "silence_duration_ms": 500},
    "semantic_vad": {"type": "semantic_vad", "eagerness": "auto"},
}
SINGLE = [("websocket", "server_vad"), ("websocket", "semantic_vad"), ("webrtc", "server_vad")]
SCENARIOS = [f"{transport}/{detection}" for transport, detection in SINGLE] + ["talkers"]
TALKERS_BLOCK = "websocket sessions side by side"  # block 2's transport, as its rows name it
# The client's end of speech to the VAD's last speech frame, and the send to the client's receipt.
FIRST, LAST = "speech_end", "received"


def session(detection: str) -> dict:
    return {"type": "realtime", "audio": {"input": {"turn_detection": DETECTION[detection]}}}


class Turn(dict):
    """One turn's client moments (``time.monotonic()``): end, stopped, text, audio; and the response id."""


async def timed_events(recv: Callable[[float], Awaitable[dict | None]], turn: Turn, deadline: float) -> None:
    """Receives until ``response.done`` of the turn's response, stamping the moments the client sees."""
    while time.monotonic() < deadline:
        event = await recv(max(0.1, deadline - time.monotonic()))
        if event is None:
            continue
        now, kind = time.monotonic(), event["type"]
        if kind == "input_audio_buffer.speech_stopped":
            turn.setdefault("stopped", now)
        elif kind == "response.created":
            turn.setdefault("response_id", event["response"]["id"])
        elif kind == "response.output_audio_transcript.delta":
            turn.setdefault("text", now)
        elif kind == "response.output_audio.delta":
            samples = audio.decode(base64.b64decode(event["delta"]), audio.PCM)
            if "audio" not in turn:
                loud = np.flatnonzero(np.abs(samples) > LOUD)
                if len(loud):  # played from its arrival: its first audible sample plays that much later
                    turn["audio"] = now + loud[0] / RATE
                    turn["playing_until"] = now + len(samples) / RATE
            else:  # a client playing the reply from its first audible delta: how long it would wait for more
                until = turn["playing_until"]
                turn["stall"] = max(turn.get("stall", 0.0), now - until)
                turn["playing_until"] = max(until, now) + len(samples) / RATE
        elif kind == "response.done":
            turn["status"] = event["response"]["status"]
            return
        elif kind == "error":
            turn.setdefault("errors", []).append(event["error"].get("message", ""))
    turn["status"] = "timeout"


class WsTalker:
    """A WebSocket session that speaks questions at real-time pace."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ws: websockets.ClientConnection | None = None

    async def open(self, detection: str = "server_vad") -> None:
        self.ws = await websockets.connect(self.url, max_size=None, open_timeout=60)
        assert json.loads(await self.ws.recv())["type"] == "session.created"
        await self.detect(detection)

    async def detect(self, detection: str) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps({"type": "session.update", "session": session(detection)}))
        while json.loads(await self.ws.recv())["type"] != "session.updated":
            pass

    async def _recv(self, timeout: float) -> dict | None:
        assert self.ws is not None
        try:
            return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        except TimeoutError:
            return None

    async def turn(self, question: np.ndarray, timeout: float) -> Turn:
        assert self.ws is not None
        ws, turn = self.ws, Turn()
        speech = pcm16_chunks(question, CHUNK_MS)
        before = pcm16_chunks(silence(0.3), CHUNK_MS)
        quiet = pcm16_chunks(silence(CHUNK_MS / 1000), CHUNK_MS)[0]
        deadline = time.monotonic() + timeout

        async def stream() -> None:
            next_at = time.monotonic()
            chunks = before + speech
            for index in range(int(timeout * 1000 / CHUNK_MS)):
                await ws.send(
                    json.dumps(
                        {"type": "input_audio_buffer.append", "audio": chunks[index] if index < len(chunks) else quiet}
                    )
                )
                if index == len(chunks) - 1:
                    turn["end"] = time.monotonic()
                next_at += CHUNK_MS / 1000
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        sender = asyncio.create_task(stream())
        try:
            await timed_events(self._recv, turn, deadline)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        await asyncio.sleep(0.3)
        return turn

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


class RtcTalker:
    """A WebRTC call: the question on the microphone track, the reply timed on the remote track."""

    def __init__(self, http: str) -> None:
        self.call = WebRTCClient(http, frames_as_they_come=True)

    async def open(self, detection: str = "server_vad") -> None:
        answer = await self.call.connect(session=session(detection))
        if answer.status != 201:
            raise RuntimeError(f"call refused: {answer.status} {answer.body[:200]!r}")
        await self.call.events.until("session.created", timeout=60)

    async def _recv(self, timeout: float) -> dict | None:
        return await self.call.events.recv(timeout)

    async def turn(self, question: np.ndarray, timeout: float) -> Turn:
        turn = Turn()
        turn["end"] = time.monotonic() + len(question) / RATE  # the queue is empty: it goes out from the next frame
        self.call.microphone.say(np.concatenate([question, silence(2.0)]))
        await timed_events(self._recv, turn, time.monotonic() + timeout)
        if turn.get("status") == "completed":  # the reply has played on the track when the buffer stops
            await self.call.events.until("output_audio_buffer.stopped", timeout=timeout)
        turn.pop("audio", None)  # the track, not deltas, is what a WebRTC client hears
        heard = self.call.loud(turn["end"])
        if heard:
            turn["audio"] = heard[0]
        return turn

    async def close(self) -> None:
        await self.call.hang_up()
        await self.call.close()


async def single_block(
    urls: dict[str, tuple[str, str]], turns: int, timeout: float, scenarios: list[tuple[str, str]] = SINGLE
) -> dict[tuple, list[Turn]]:
    """Block 1: per configuration, a WebSocket session (server_vad and semantic_vad alternating) and a call."""
    results: dict[tuple, list[Turn]] = {}
    talkers: dict[str, tuple[WsTalker, RtcTalker | None]] = {}
    calls = any(transport == "webrtc" for transport, _ in scenarios)
    try:
        for name, (ws_url, http) in urls.items():
            ws, rtc = WsTalker(ws_url), RtcTalker(http) if calls else None
            await ws.open()
            if rtc is not None:
                await rtc.open()
            talkers[name] = (ws, rtc)
        for n in range(turns + 1):  # the first round warms every session up and is not counted
            question = trimmed(QUESTIONS[n % len(QUESTIONS)])
            names = list(talkers) if n % 2 == 0 else list(reversed(talkers))
            for name in names:
                ws, rtc = talkers[name]
                shift = n % len(scenarios)
                for transport, detection in scenarios[shift:] + scenarios[:shift]:
                    if transport == "websocket":
                        await ws.detect(detection)
                        turn = await ws.turn(question, timeout)
                    else:
                        assert rtc is not None
                        turn = await rtc.turn(question, timeout)
                    if n:
                        results.setdefault((name, transport, detection, 1), []).append(turn)
                    print(f"round {n} {name} {transport} {detection}: {summary(turn)}", flush=True)
    finally:
        for ws, rtc in talkers.values():
            await ws.close()
            if rtc is not None:
                await rtc.close()
    return results


async def talkers_block(urls: dict[str, tuple[str, str]], turns: int, timeout: float) -> dict[tuple, list[Turn]]:
    """Block 2: per configuration four WebSocket sessions; each round one alone, two at once, four at once."""
    results: dict[tuple, list[Turn]] = {}
    sessions: dict[str, list[WsTalker]] = {}
    try:
        for name, (ws_url, _) in urls.items():
            sessions[name] = [WsTalker(ws_url) for _ in range(POOL)]
            for talker in sessions[name]:
                await talker.open()
        for n in range(turns + 1):
            names = list(sessions) if n % 2 == 0 else list(reversed(sessions))
            counts = list(TALKERS[n % 3 :] + TALKERS[: n % 3])
            for name in names:
                for count in counts:
                    questions = [trimmed(QUESTIONS[(n + i) % len(QUESTIONS)]) for i in range(count)]
                    turns_now = await asyncio.gather(
                        *(talker.turn(q, timeout) for talker, q in zip(sessions[name][:count], questions))
                    )
                    if n:  # named apart from block 1's lone WebSocket turns, which run in one longer session
                        results.setdefault((name, TALKERS_BLOCK, "server_vad", count), []).extend(turns_now)
                    print(f"round {n} {name} {count} talker(s): {[summary(t) for t in turns_now]}", flush=True)
    finally:
        for group in sessions.values():
            for talker in group:
                await talker.close()
    return results


async def capacity_block(url: str, counts: list[int], turns: int, timeout: float) -> dict[int, list[Turn]]:
    """``--capacity``: ``count`` WebSocket talkers at once, ``turns`` rounds each, for every count in turn."""
    results: dict[int, list[Turn]] = {}
    for count in counts:
        talkers = [WsTalker(url) for _ in range(count)]
        try:
            for talker in talkers:
                await talker.open()
            for n in range(turns + 1):
                questions = [trimmed(QUESTIONS[(n + i) % len(QUESTIONS)]) for i in range(count)]
                now = await asyncio.gather(*(t.turn(q, timeout) for t, q in zip(talkers, questions)))
                if n:
                    results.setdefault(count, []).extend(now)
                heard = sorted((t["audio"] - t["end"]) * 1000 for t in now if "audio" in t)
                print(f"{count} talkers, round {n}: {len(heard)} heard, p90 {pct(heard, 90):.0f} ms", flush=True)
        finally:
            for talker in talkers:
                await talker.close()
    return results


def capacity(env: dict[str, str], counts: list[int], turns: int, timeout: float, command: str) -> str:
    """How many sessions one server holds with first audio p90 under 1 s (``--capacity 4,8,16,...``)."""
    work = Path(tempfile.mkdtemp(prefix="s2s-capacity-"))
    server = LiveServer(
        work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(max(counts)), "S2S_LOG_LEVEL": "warning", **env}
    ).start(ready_timeout=1800)
    try:
        results = asyncio.run(capacity_block(server.ws, counts, turns, timeout))
    finally:
        server.stop()
    lines = [
        CAPACITY_BEGIN,
        "## Sessions per server at first audio p90 under 1 s (`bench/breakdown.py --capacity`)",
        "",
        f"`{command}` on {dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs; "
        f"`{' '.join(f'{k}={v}' for k, v in env.items()) or 'the defaults'}`; {machine_load(os.getloadavg()[0])}.",
        "",
        "| talkers at once | turns | heard | first audio p50 | p90 |",
        "|---:|---:|---:|---:|---:|",
    ]
    held = 0
    for count, turns_done in results.items():
        v2v = [(t["audio"] - t["end"]) * 1000 for t in turns_done if "audio" in t and "end" in t]
        if len(v2v) == len(turns_done) and pct(v2v, 90) < 1000:
            held = count
        lines.append(f"| {count} | {len(turns_done)} | {len(v2v)} | {pct(v2v, 50):.0f} ms | {pct(v2v, 90):.0f} ms |")
    lines += ["", f"Sessions held with every turn answered and p90 under 1 s: **{held}**.", CAPACITY_END]
    return "\n".join(lines)


def summary(turn: Turn) -> str:
    if "audio" not in turn or "end" not in turn:
        return f"no audio ({turn.get('status')})"
    return f"{(turn['audio'] - turn['end']) * 1000:.0f} ms"


def breakdowns(db: Path) -> dict[str, dict[str, float]]:
    """Each response's server breakdown, by response id (none from a version of the code that kept none)."""
    con = sqlite3.connect(db)
    columns = {row[1] for row in con.execute("PRAGMA table_info(realtime_responserecord)")}
    if "breakdown" not in columns:
        con.close()
        return {}
    rows = con.execute("SELECT response_id, breakdown FROM realtime_responserecord").fetchall()
    con.close()
    return {response_id: json.loads(value or "{}") for response_id, value in rows}


def turn_spans(turn: Turn, server: dict[str, float]) -> list[tuple[str, float]] | None:
    """The turn's spans, client to client: Silero's decay, the server's spans, then sent to received."""
    if "audio" not in turn or "end" not in turn or "speech_end_at" not in server or "sent" not in server:
        return None
    start = server["speech_end_at"]
    result = [(FIRST, start - turn["end"])]
    result += [(name, span) for name, span, _ in spans(server)]
    result.append((LAST, turn["audio"] - (start + server["sent"])))
    return result


def figures(results: dict[tuple, list[Turn]], records: dict[str, dict[str, dict[str, float]]]) -> list[dict]:
    rows = []
    for key, turns in results.items():
        name = key[0]
        heard = [t for t in turns if "audio" in t and "end" in t]
        v2v = [(t["audio"] - t["end"]) * 1000 for t in heard]
        after = [(t["audio"] - t["stopped"]) * 1000 for t in heard if "stopped" in t]
        stopped = [(t["stopped"] - t["end"]) * 1000 for t in heard if "stopped" in t]
        text_lead = [(t["audio"] - t["text"]) * 1000 for t in heard if "text" in t]
        stalls = [t.get("stall", 0.0) * 1000 for t in heard if "playing_until" in t]
        per_turn = [turn_spans(t, records[name].get(t.get("response_id", ""), {})) for t in heard]
        per_turn = [s for s in per_turn if s]
        mean_spans: dict[str, float] = {}
        for entry in per_turn:
            for span, seconds in entry:
                mean_spans[span] = mean_spans.get(span, 0.0) + seconds * 1000 / len(per_turn)
        core = [records[name].get(t.get("response_id", ""), {}).get("core_wait_s") for t in heard]
        rows.append(
            {
                "key": key,
                "turns": len(turns),
                "heard": len(heard),
                "v2v": v2v,
                "after": after,
                "stopped": stopped,
                "text_lead": text_lead,
                "stalls": stalls,
                "spans": mean_spans,
                "broken_down": len(per_turn),
                "core_wait": [c * 1000 for c in core if c is not None],
            }
        )
    return rows


def run(
    configs: dict[str, dict[str, str]],
    turns: int,
    timeout: float,
    pipeline: str,
    trees: dict[str, Path],
    scenarios: list[str] = SCENARIOS,
) -> tuple[list[dict], float, float]:
    servers: dict[str, LiveServer] = {}
    try:
        for name, env in configs.items():
            work = Path(tempfile.mkdtemp(prefix="s2s-breakdown-"))
            servers[name] = LiveServer(
                work,
                env={"S2S_PIPELINE": pipeline, "S2S_POOL_SIZE": str(POOL), "S2S_LOG_LEVEL": "warning", **env},
                root=trees.get(name, ROOT),
            ).start(ready_timeout=900)
        load_before = os.getloadavg()[0]
        urls = {name: (server.ws, server.http) for name, server in servers.items()}
        single = [pair for pair in SINGLE if "/".join(pair) in scenarios]
        results = asyncio.run(single_block(urls, turns, timeout, single)) if single else {}
        if "talkers" in scenarios:
            results |= asyncio.run(talkers_block(urls, turns, timeout))
        load_after = os.getloadavg()[0]
        time.sleep(3)  # the record writers catch up
        records = {name: breakdowns(server.tmp_dir / "server.sqlite3") for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    return figures(results, records), load_before, load_after


SPAN_LABELS = {
    FIRST: "Silero's decay",
    "speculation": "to speculation",
    "stt_start": "STT queue",
    "stt_end": "STT",
    "lm_start": "LM queue",
    "lm_first_token": "LM first token",
    "lm_first_piece": "LM first words",
    "tts_start": "TTS queue",
    "tts_first_audio": "TTS first audio",
    "decision": "wait for the decision",
    "emitted": "release",
    "sent": "session send",
    LAST: "wire and client",
}


def label(key: tuple) -> str:
    name, transport, detection, talkers = key
    return f"{name}: {transport}, {detection}, {talkers} talker{'s' if talkers > 1 else ''}"


def ms_at(values: list[float], q: float = 50) -> str:
    return f"{pct(values, q):.0f} ms" if values else "–"  # none: code that keeps no breakdown, or not measured


def section(rows: list[dict], command: str, load_before: float, load_after: float, configs: dict) -> str:
    lines = [
        BEGIN,
        "## Where a turn's time goes (`bench/breakdown.py`)",
        "",
        f"`{command}` on {dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs "
        f"({platform.processor() or platform.machine()}), one server per configuration (pool of {POOL}), "
        "all in one run, "
        f"rounds interleaved; load average {load_before:.1f} at the start; {machine_load(load_after)}. "
        "Configurations: "
        + "; ".join(
            f"**{n}**: `{' '.join(f'{k}={v}' for k, v in e.items()) or 'the defaults'}`" for n, e in configs.items()
        )
        + ". No GPU was used (the CUDA run: `--capacity`, in docs/benchmarks.md's GPU section).",
        "",
        "First audio: the client's end of speech to the first audible reply sample it receives (WebSocket: the first "
        "audio delta with sound, plus that sound's offset in it; WebRTC: the first loud frame off the track). "
        "After stopped: from the client's receipt of `speech_stopped`. Text lead: how long before the first audio the "
        "first transcript delta came. Longest stall: a client playing the reply from its first audible delta, the "
        "longest it would wait for the next (0: the reply came faster than it plays; WebSocket only).",
        "",
        "| configuration and scenario | turns | first audio p50 | p90 | speech_stopped p50 | first audio after "
        "stopped p50 | p90 | text lead p50 | longest stall p90 | threads waiting for a core p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {label(row['key'])} | {row['heard']}/{row['turns']} | {pct(row['v2v'], 50):.0f} ms | "
            f"{pct(row['v2v'], 90):.0f} ms | {pct(row['stopped'], 50):.0f} ms | {pct(row['after'], 50):.0f} ms | "
            f"{pct(row['after'], 90):.0f} ms | {pct(row['text_lead'], 50):.0f} ms | {ms_at(row['stalls'], 90)} | "
            f"{ms_at(row['core_wait'])} |"
        )
    names = [n for n in SPAN_LABELS if any(n in row["spans"] for row in rows)]
    lines += [
        "",
        "The breakdown, mean ms per span (means add up: each row's spans sum to its mean first audio); a span is "
        "named by the moment that ends it, in the order most turns pass them (a span a turn skipped counts 0); "
        "only for code that keeps the breakdown:",
        "",
        "| configuration and scenario | turns | " + " | ".join(SPAN_LABELS[n] for n in names) + " | sum |",
        "|---|---:|" + "---:|" * (len(names) + 1),
    ]
    for row in (r for r in rows if r["broken_down"]):  # the code before this breakdown kept none
        spans_ms = row["spans"]
        lines.append(
            f"| {label(row['key'])} | {row['broken_down']} | "
            + " | ".join(f"{spans_ms.get(n, 0.0):.0f}" for n in names)
            + f" | {sum(spans_ms.values()):.0f} |"
        )
    lines += ["", f"![the breakdown, mean ms per span]({PLOT})", END]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in SPAN_LABELS if any(n in row["spans"] for row in rows)]
    rows = [r for r in rows if r["broken_down"]]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 2.6))
    colours = plt.get_cmap("tab20")
    for y, row in enumerate(rows):
        left = 0.0
        for i, name in enumerate(names):
            width = row["spans"].get(name, 0.0)
            ax.barh(y, width, left=left, color=colours(i), label=SPAN_LABELS[name] if y == 0 else None)
            left += width
    ax.set_yticks(range(len(rows)), [label(r["key"]) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the end of speech (mean per span)")
    ax.set_title(f"Where a turn's time goes ({os.cpu_count()}-core CPU)")
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5, help="counted rounds per block")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one turn may take")
    parser.add_argument(
        "--compare", nargs="*", default=[], metavar="'ENV=VALUE ...'", help="configurations beside the defaults"
    )
    parser.add_argument("--pipeline", choices=("real", "loopback"), default="real", help="loopback: FAKE stages")
    parser.add_argument(
        "--capacity",
        default="",
        metavar="4,8,16",
        help="instead: these many talkers at once on one server (pool of the largest), with --env",
    )
    parser.add_argument("--env", default="", metavar="'ENV=VALUE ...'", help="with --capacity: the server's settings")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="also a server run from this checkout of the code (e.g. a git worktree of main), named 'before'",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=SCENARIOS,
        default=SCENARIOS,
        help="only these: a one-talker scenario (transport/detection), or the many-talkers block",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    command = "python bench/breakdown.py " + shlex.join(sys.argv[1:])
    if args.capacity:
        env = dict(p.split("=", 1) for p in shlex.split(args.env))
        counts = [int(c) for c in args.capacity.split(",") if c]
        text = capacity(env, counts, args.turns, args.timeout, command.strip())
        print(text)
        if not args.no_write:
            write_section(text, CAPACITY_BEGIN, CAPACITY_END)
        return
    configs = {"defaults": {}} | {text: dict(p.split("=", 1) for p in shlex.split(text)) for text in args.compare}
    trees = {}
    if args.baseline:
        configs["before"], trees["before"] = {}, args.baseline.resolve()
    rows, load_before, load_after = run(configs, args.turns, args.timeout, args.pipeline, trees, args.scenarios)
    described = {name: env for name, env in configs.items() if name not in trees}
    for name, tree in trees.items():
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        described[name] = {"checkout": rev.stdout.strip() or str(tree)}
    text = section(rows, command.strip(), load_before, load_after, described)
    print(text)
    if not args.no_write:
        plot(rows, ROOT / "docs" / PLOT)
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
