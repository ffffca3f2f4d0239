"""Voice-to-voice latency with the real default models, and memory per unit.

Starts ``manage.py serve`` with the real pipeline, streams spoken questions
(Piper speech, silence trimmed) at real-time pace in 20 ms chunks, and times the
end of the user's speech (the last speech chunk sent) to the first response
audio delta received. Runs with 1 and with 2 concurrent sessions, reads the
per-stage latencies the server recorded (STT, LM to first token, TTS to first
audio), and measures the server's RSS with pool sizes 1, 2 and 4.

Run: ``python bench/voice_latency.py`` (``--help`` for options). Prints markdown
and rewrites the voice section of docs/benchmarks.md and docs/voice_latency.png.
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

from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "voice_latency.png"
BEGIN, END = "<!-- voice:begin -->", "<!-- voice:end -->"
QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What color is the sky?",
    "Who wrote Romeo and Juliet?",
    "What is two plus two?",
    "Name a fruit that is yellow.",
    "What do bees make?",
    "Is the sun a star?",
]


def trimmed(text: str) -> np.ndarray:
    """Speech without leading or trailing silence, so 'end of speech' is the last chunk sent."""
    samples = spoken(text)
    loud = np.flatnonzero(np.abs(samples) > 0.02)
    return samples[loud[0]: loud[-1] + 1] if len(loud) else samples


def settings_value(name: str) -> str:
    """The server's setting, as the environment or the default in settings.py gives it."""
    import re

    if name in os.environ:
        return os.environ[name]
    match = re.search(rf'"{name}", (\d+)', (ROOT / "s2s_project" / "settings.py").read_text())
    return match.group(1) if match else "?"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def one_turn(ws, text: str) -> dict | None:
    """Speaks ``text`` (trimmed, between silences) and times the answer; None when no audio came."""
    chunks_speech = pcm16_chunks(trimmed(text))
    chunks = pcm16_chunks(silence(0.3)) + chunks_speech + pcm16_chunks(silence(1.5))
    speech_end = 0.0
    times: dict[str, float] = {}

    async def send() -> None:
        nonlocal speech_end
        start = time.monotonic()
        for i, chunk in enumerate(chunks, start=1):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            if i == 15 + len(chunks_speech):
                speech_end = time.monotonic()
            await asyncio.sleep(max(0.0, start + i * 0.02 - time.monotonic()))

    sender = asyncio.create_task(send())
    status = "timeout"
    try:
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 120))
            kind = event["type"]
            times.setdefault(kind, time.monotonic())
            if kind == "response.done":
                status = event["response"]["status"]
                break
    finally:
        await sender
    await asyncio.sleep(0.5)
    if "response.output_audio.delta" not in times:
        return None
    return {"text": text, "status": status, "v2v_s": times["response.output_audio.delta"] - speech_end,
            "stopped_s": times.get("input_audio_buffer.speech_stopped", float("nan")) - speech_end}


async def opened(url: str):
    ws = await websockets.connect(url, max_size=None, open_timeout=30)
    created = json.loads(await ws.recv())
    assert created["type"] == "session.created", created
    return ws


async def one_session(url: str, turns: int, offset: int, results: list[dict]) -> None:
    ws = await opened(url)
    try:
        for n in range(turns):
            if (result := await one_turn(ws, QUESTIONS[(offset + n) % len(QUESTIONS)])) is not None:
                results.append(result)
    finally:
        await ws.close()


async def run_latency(server: LiveServer, sessions: int, turns: int) -> list[dict]:
    results: list[dict] = []
    await asyncio.gather(*(one_session(server.ws, turns, i * 3, results) for i in range(sessions)))
    return results


async def compare_turns(urls: dict[str, str], turns: int) -> dict[str, list[dict]]:
    """One session on each server; each question goes to every server in turn, the order alternating,
    so that the machine's drifting load falls on all alike."""
    sockets = {name: await opened(url) for name, url in urls.items()}
    results: dict[str, list[dict]] = {name: [] for name in urls}
    try:
        for n in range(turns):
            names = list(sockets) if n % 2 == 0 else list(reversed(sockets))
            for name in names:
                if (result := await one_turn(sockets[name], QUESTIONS[n % len(QUESTIONS)])) is not None:
                    results[name].append(result)
    finally:
        for ws in sockets.values():
            await ws.close()
    return results


def compare(variants: list[str], turns: int) -> None:
    """``--compare``: the defaults against each ENV=VALUE variant, one server (pool of 1) each, in one run."""
    configs = {"defaults": {}} | {text: dict(pair.split("=", 1) for pair in shlex.split(text)) for text in variants}
    servers = {}
    try:
        for name, env in configs.items():
            work = Path(tempfile.mkdtemp(prefix="s2s-voice-compare-"))
            servers[name] = LiveServer(work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1",
                                                  "S2S_LOG_LEVEL": "warning", **env}).start(ready_timeout=900)
        load_before = os.getloadavg()[0]
        results = asyncio.run(compare_turns({name: server.ws for name, server in servers.items()}, turns))
        load_after = os.getloadavg()[0]
    finally:
        for server in servers.values():
            server.stop()
    print(f"`python bench/voice_latency.py --compare ... --turns {turns}` on {dt.date.today().isoformat()}, "
          f"{psutil.cpu_count()} CPUs, load average {load_before:.1f} before / {load_after:.1f} after; "
          "1 session per configuration, turns interleaved.\n")
    print("| configuration | turns | v2v p50 | v2v p90 | v2v max | speech_stopped after end of speech p50 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        v2v = [r["v2v_s"] * 1000 for r in rows]
        print(f"| {name} | {len(rows)} | {pct(v2v, 50):.0f} ms | {pct(v2v, 90):.0f} ms | "
              f"{max(v2v, default=float('nan')):.0f} ms | {pct([r['stopped_s'] * 1000 for r in rows], 50):.0f} ms |")


def recorded(db: Path, since: float) -> dict[str, list[float]]:
    """Per-stage latencies the server wrote for the responses finished after ``since`` (epoch)."""
    stamp = dt.datetime.fromtimestamp(since, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    con = sqlite3.connect(db)
    rows = con.execute("SELECT stt_s, lm_first_token_s, tts_first_audio_s, voice_to_voice_s FROM realtime_responserecord "
                       "WHERE finished_at >= ? AND status != 'cancelled'", (stamp,)).fetchall()
    con.close()
    names = ("stt", "lm_first_token", "tts_first_audio", "voice_to_voice")
    return {name: [r[i] for r in rows if r[i] is not None] for i, name in enumerate(names)}


def measure_rss(work: Path, sizes: list[int]) -> list[tuple[int, float, float]]:
    out = []
    for size in sizes:
        server = LiveServer(work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(size), "S2S_LOG_LEVEL": "warning"})
        server.start(ready_timeout=900)
        try:
            time.sleep(2)
            info = psutil.Process(server.process.pid).memory_full_info()
            out.append((size, info.rss / 2**20, info.uss / 2**20))
        finally:
            server.stop()
    return out


def plot(samples: dict[int, list[float]], silence_ms: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for sessions, values in samples.items():
        xs = np.sort(np.array(values) * 1000)
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=f"{sessions} session(s), n={len(xs)}")
    ax.axvline(silence_ms + 300, color="grey", linestyle="--", label="aim: silence window + 300 ms")
    ax.set_xlabel("end of user speech -> first response audio (ms)")
    ax.set_ylabel("fraction of turns")
    ax.set_title("Voice-to-voice latency, real default models, 2-core CPU")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rss-sizes", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--compare", nargs="+", metavar="'ENV=VALUE ...'",
                        help="compare the defaults with these settings, turn by turn in one run (prints only)")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args.turns)
        return

    work = Path(tempfile.mkdtemp(prefix="s2s-voice-bench-"))
    load_before = os.getloadavg()[0]
    server = LiveServer(work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(max(args.sessions)),
                                   "S2S_LOG_LEVEL": "warning"})
    server.start(ready_timeout=900)
    by_sessions: dict[int, list[dict]] = {}
    stages: dict[int, dict[str, list[float]]] = {}
    try:
        for sessions in args.sessions:
            since = time.time()
            by_sessions[sessions] = asyncio.run(run_latency(server, sessions, args.turns))
            time.sleep(3)  # let the record writer catch up
            stages[sessions] = recorded(work / "server.sqlite3", since)
    finally:
        server.stop()
    rss = measure_rss(work, args.rss_sizes) if args.rss_sizes else []
    load_after = os.getloadavg()[0]

    lines = [BEGIN, "## Voice to voice (real default models)", "",
             f"`{' '.join(shlex.quote(a) for a in ['python', 'bench/voice_latency.py', *sys.argv[1:]])}` on "
             f"{dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
             f"load average {load_before:.1f} before / {load_after:.1f} after. Models: Silero VAD, faster-whisper tiny.en "
             "(int8), SmolLM2-135M-Instruct (float32), Piper en_US-joe-medium. Silence window 500 ms; speculation after "
             f"{settings_value('S2S_SPECULATE_AFTER_MS')} ms of silence.", "",
             "Voice-to-voice is measured by the client: from the last speech chunk sent (speech trimmed of silence, "
             "streamed at real-time pace in 20 ms chunks) to the first `response.output_audio.delta` received. The "
             "stage figures are what the server recorded per response (ResponseRecord).", "",
             "| sessions | turns | v2v p50 | v2v p90 | v2v max | speech_stopped after end of speech p50 | STT p50 | LM first token p50 | TTS first audio p50 | server-side v2v p50 |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for sessions, results in by_sessions.items():
        v2v = [r["v2v_s"] for r in results]
        st = stages[sessions]
        lines.append(
            f"| {sessions} | {len(results)} | {pct(v2v, 50) * 1000:.0f} ms | {pct(v2v, 90) * 1000:.0f} ms | "
            f"{max(v2v) * 1000:.0f} ms | {pct([r['stopped_s'] for r in results], 50) * 1000:.0f} ms | "
            f"{pct(st['stt'], 50) * 1000:.0f} ms | {pct(st['lm_first_token'], 50) * 1000:.0f} ms | "
            f"{pct(st['tts_first_audio'], 50) * 1000:.0f} ms | {pct(st['voice_to_voice'], 50) * 1000:.0f} ms |")
    if rss:
        lines += ["", "Memory of the server process once the pool is warm (one copy of each model, shared by the units):", "",
                  "| pool size | RSS | USS | RSS per extra unit |", "|---:|---:|---:|---:|"]
        base = rss[0]
        for size, r, u in rss:
            extra = (r - base[1]) / (size - base[0]) if size != base[0] else float("nan")
            lines.append(f"| {size} | {r:.0f} MiB | {u:.0f} MiB | {'-' if size == base[0] else f'{extra:.0f} MiB'} |")
    lines += ["", "![voice-to-voice distribution](voice_latency.png)", END]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        plot({s: [r["v2v_s"] for r in res] for s, res in by_sessions.items()}, 500)
        doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
        if BEGIN in doc:
            doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip() + "\n\n" + text + "\n"
        DOC.write_text(doc)


if __name__ == "__main__":
    main()
