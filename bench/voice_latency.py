"""Voice-to-voice latency with the real default models, and memory per unit.

Starts ``manage.py serve`` with the real pipeline, streams spoken questions
(Piper speech, silence trimmed) at real-time pace in 20 ms chunks, and times the
end of the user's speech (the last speech chunk sent) to the first response
audio delta received. Runs with 1 and with 2 concurrent sessions, reads the
per-stage latencies the server recorded (STT, LM to first token, TTS to first
audio), and measures the server's RSS with pool sizes 1, 2 and 4.

Run: ``python bench/voice_latency.py`` (``--help`` for options). Prints markdown
and rewrites the voice section of docs/benchmarks.md and docs/voice_latency.png.

``--batching`` runs the sessions sweep (e.g. ``--sessions 1,2,4,8``) twice on a
pool of the largest count, without and with the shared schedulers (LM
continuous batching, batched STT, TTS first sentences first), and reports
first-audio p50/p90 per concurrency, the LM's output tokens/s over each phase
and the server's RSS; it rewrites the batching section and docs/batching.png.

``--compare 'ENV=VALUE ...'`` puts the defaults beside other settings, a server each, their turns interleaved
(prints only); ``--talkers 2`` has two sessions on each server ask their questions at once.
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

from bench.docs import write_section  # noqa: E402
from pipelines.config import DEFAULT_LM_BACKEND, LM_ENGINE_NAMES  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence, spoken  # noqa: E402

PLOT = ROOT / "docs" / "voice_latency.png"
BEGIN, END = "<!-- voice:begin -->", "<!-- voice:end -->"
BATCH_BEGIN, BATCH_END = "<!-- batching:begin -->", "<!-- batching:end -->"
OTHER_WORK = "**other work shared the machine** when the run began, so absolute figures are noisy"
NO_OTHER_WORK = "nothing else ran on the machine"
BATCHED_ENV = {"S2S_LM_BATCHING": "1", "S2S_STT_BATCH_WINDOW_MS": "30", "S2S_TTS_SLOTS": str(os.cpu_count() or 1)}
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
    samples = spoken(text, steady=False)
    loud = np.flatnonzero(np.abs(samples) > 0.02)
    return samples[loud[0] : loud[-1] + 1] if len(loud) else samples


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
    return {
        "text": text,
        "status": status,
        "v2v_s": times["response.output_audio.delta"] - speech_end,
        "stopped_s": times.get("input_audio_buffer.speech_stopped", float("nan")) - speech_end,
    }


async def opened(url: str):
    ws = await websockets.connect(url, max_size=None, open_timeout=30)
    created = json.loads(await ws.recv())
    assert created["type"] == "session.created", created
    return ws


async def one_session(url: str, turns: int, offset: int, results: list[dict]) -> None:
    ws = await opened(url)
    try:
        for n in range(turns):
            try:
                result = await one_turn(ws, QUESTIONS[(offset + n) % len(QUESTIONS)])
            except TimeoutError:
                results.append({"timeout": True})  # 120 s without an event: the session is abandoned
                break
            if result is not None:
                results.append(result)
    finally:
        await ws.close()


async def all_sessions(server: LiveServer, sessions: int, turns: int) -> list[dict]:
    """Every turn of ``sessions`` concurrent sessions, timed-out ones (``{"timeout": True}``) included."""
    results: list[dict] = []
    await asyncio.gather(*(one_session(server.ws, turns, i * 3, results) for i in range(sessions)))
    return results


async def run_latency(server: LiveServer, sessions: int, turns: int) -> list[dict]:
    return [r for r in await all_sessions(server, sessions, turns) if not r.get("timeout")]


async def compare_turns(urls: dict[str, str], turns: int, talkers: int = 1) -> dict[str, list[dict]]:
    """``talkers`` sessions on each server; each question goes to every server in turn, the order alternating,
    so that the machine's drifting load falls on all alike. With more than one talker, a server's sessions
    ask their questions at once (each its own question), as people talking to it at the same time."""
    sockets = {name: [await opened(url) for _ in range(talkers)] for name, url in urls.items()}
    results: dict[str, list[dict]] = {name: [] for name in urls}
    try:
        for n in range(turns):
            names = list(sockets) if n % 2 == 0 else list(reversed(sockets))
            for name in names:
                asked = [
                    one_turn(ws, QUESTIONS[(n + 3 * talker) % len(QUESTIONS)])
                    for talker, ws in enumerate(sockets[name])
                ]
                results[name] += [result for result in await asyncio.gather(*asked) if result is not None]
    finally:
        for opened_here in sockets.values():
            for ws in opened_here:
                await ws.close()
    return results


def compare(variants: list[str], turns: int, talkers: int = 1) -> None:
    """``--compare``: the defaults against each ENV=VALUE variant, one server each (a unit per talker), in one
    run."""
    configs = {"defaults": {}} | {text: dict(pair.split("=", 1) for pair in shlex.split(text)) for text in variants}
    results, load_before, load_after = compare_configs(configs, turns, talkers)
    print(
        f"`python bench/voice_latency.py --compare ... --turns {turns} --talkers {talkers}` on "
        f"{dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs, load average {load_before:.1f} before / "
        f"{load_after:.1f} after; {talkers} session(s) per configuration, turns interleaved.\n"
    )
    print("\n".join(compare_table(results)))


def compare_configs(
    configs: dict[str, dict[str, str]], turns: int, talkers: int = 1
) -> tuple[dict[str, list[dict]], float, float]:
    """Each configuration (a name and its environment) on its own server (a unit per talker), their turns
    interleaved; the turns per configuration and the load average before and after."""
    servers = {}
    try:
        for name, env in configs.items():
            work = Path(tempfile.mkdtemp(prefix="s2s-voice-compare-"))
            servers[name] = LiveServer(
                work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(talkers), "S2S_LOG_LEVEL": "warning", **env}
            ).start(ready_timeout=900)
        load_before = os.getloadavg()[0]
        results = asyncio.run(compare_turns({name: server.ws for name, server in servers.items()}, turns, talkers))
        load_after = os.getloadavg()[0]
    finally:
        for server in servers.values():
            server.stop()
    return results, load_before, load_after


def compare_table(results: dict[str, list[dict]]) -> list[str]:
    """End of speech to first reply audio per configuration, as Markdown table lines."""
    lines = [
        "| configuration | turns | v2v p50 | v2v p90 | v2v max | speech_stopped after end of speech p50 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows in results.items():
        v2v = [r["v2v_s"] * 1000 for r in rows]
        stopped = [r["stopped_s"] * 1000 for r in rows]
        lines.append(
            f"| {name} | {len(rows)} | {pct(v2v, 50):.0f} ms | {pct(v2v, 90):.0f} ms | "
            f"{max(v2v, default=float('nan')):.0f} ms | {pct(stopped, 50):.0f} ms |"
        )
    return lines


def recorded(db: Path, since: float) -> dict[str, list[float]]:
    """Per-stage latencies the server wrote for the responses finished after ``since`` (epoch)."""
    stamp = dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT stt_s, lm_first_token_s, tts_first_audio_s, voice_to_voice_s FROM realtime_responserecord "
        "WHERE finished_at >= ? AND status != 'cancelled'",
        (stamp,),
    ).fetchall()
    con.close()
    names = ("stt", "lm_first_token", "tts_first_audio", "voice_to_voice")
    return {name: [r[i] for r in rows if r[i] is not None] for i, name in enumerate(names)}


def output_tokens(db: Path, since: float) -> int:
    stamp = dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    con = sqlite3.connect(db)
    (total,) = con.execute(
        "SELECT COALESCE(SUM(output_tokens), 0) FROM realtime_responserecord WHERE finished_at >= ?", (stamp,)
    ).fetchone()
    con.close()
    return int(total)


def sweep(env: dict[str, str], sessions_list: list[int], pool: int, turns: int) -> list[dict]:
    """One server of ``pool`` units; each concurrency in turn: first-audio latencies, LM tokens/s, RSS."""
    work = Path(tempfile.mkdtemp(prefix="s2s-batching-bench-"))
    server = LiveServer(
        work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(pool), "S2S_LOG_LEVEL": "warning", **env}
    ).start(ready_timeout=900)
    rows = []
    try:
        process = psutil.Process(server.process.pid)
        for sessions in sessions_list:
            since, started = time.time(), time.monotonic()
            results = asyncio.run(all_sessions(server, sessions, turns))
            elapsed = time.monotonic() - started
            time.sleep(3)  # let the record writer catch up
            rows.append(
                {
                    "sessions": sessions,
                    "v2v": [r["v2v_s"] for r in results if not r.get("timeout")],
                    "timeouts": sum(1 for r in results if r.get("timeout")),
                    "tokens_per_s": output_tokens(work / "server.sqlite3", since) / elapsed,
                    "rss_mib": process.memory_info().rss / 2**20,
                }
            )
            print(json.dumps({"env": env, **rows[-1]}), flush=True)  # partial results survive a later failure
    finally:
        server.stop()
    return rows


def batching(sessions_list: list[int], pool: int, turns: int, write: bool, backend: str) -> None:
    """Batched against unbatched on the LM engine ``backend``; each engine has its own section and plot."""
    load_before = os.getloadavg()[0]
    engine = {"S2S_LM_BACKEND": backend}
    modes = {
        "batched": sweep({**BATCHED_ENV, **engine}, sessions_list, pool, turns),
        "unbatched": sweep(engine, sessions_list, pool, turns),
    }
    begin, end, plot = batching_markers(backend)
    lm_note = (
        ""
        if backend == "transformers"
        else f" The LM engine here is {LM_ENGINE_NAMES[backend]}, which batches nothing (one generation per unit): "
        "the batched mode batches STT and orders TTS only; `--lm-backend transformers` has the LM batched."
    )
    load_after = os.getloadavg()[0]
    command = " ".join(shlex.quote(a) for a in ["python", "bench/voice_latency.py", *sys.argv[1:]])
    lines = [
        begin,
        f"## Many talkers at once: batched vs unbatched ({LM_ENGINE_NAMES[backend]})",
        "",
        f"`{command}` on {dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs "
        f"({platform.processor() or platform.machine()}), pool of {pool}, {turns} turns per session, "
        f"load average {load_before:.1f} before / {load_after:.1f} after (the bench's own server counts in "
        f"the second); {OTHER_WORK if load_before > (os.cpu_count() or 1) / 2 else NO_OTHER_WORK}; both "
        "modes ran in the same run, one after the other. Batched: "
        f"`{' '.join(f'{k}={v}' for k, v in BATCHED_ENV.items())}`. No CUDA GPU was available in this session: "
        f"the GPU measurement (sessions per GPU under 1 s first-audio p90) was not possible.{lm_note}",
        "",
        "First audio = end of the user's speech to the first `response.output_audio.delta`, measured by the "
        "client. LM tokens/s = output tokens of all responses finished in the phase / the phase's wall time. "
        "RSS of the server process after the phase. A session that waits 120 s for an event is abandoned "
        "and its turn counted as timed out.",
        "",
        "| mode | sessions | turns | timed out | first audio p50 | first audio p90 | p50 / 1-session p50 "
        "| LM tokens/s | RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, rows in modes.items():
        single = pct(rows[0]["v2v"], 50)
        for row in rows:
            p50 = pct(row["v2v"], 50)
            lines.append(
                f"| {mode} | {row['sessions']} | {len(row['v2v'])} | {row['timeouts']} | "
                f"{p50 * 1000:.0f} ms | "
                f"{pct(row['v2v'], 90) * 1000:.0f} ms | {p50 / single:.2f} | {row['tokens_per_s']:.1f} | "
                f"{row['rss_mib']:.0f} MiB |"
            )
    lines += ["", f"![first audio by concurrency, batched and unbatched]({plot})", end]
    text = "\n".join(lines)
    print(text)
    if write:
        plot_batching(modes, plot)
        write_section(text, begin, end)


def batching_markers(backend: str) -> tuple[str, str, str]:
    """The section markers and plot file of one LM engine's batching run (the default engine's are unmarked)."""
    if backend == DEFAULT_LM_BACKEND:
        return BATCH_BEGIN, BATCH_END, "batching.png"
    return f"<!-- batching-{backend}:begin -->", f"<!-- batching-{backend}:end -->", f"batching-{backend}.png"


def plot_batching(modes: dict[str, list[dict]], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, tokens) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, rows in modes.items():
        xs = [r["sessions"] for r in rows]
        (line,) = ax.plot(xs, [pct(r["v2v"], 50) * 1000 for r in rows], marker="o", label=f"{mode} p50")
        ax.plot(
            xs,
            [pct(r["v2v"], 90) * 1000 for r in rows],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{mode} p90",
        )
        tokens.plot(xs, [r["tokens_per_s"] for r in rows], marker="o", label=mode)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("end of speech -> first audio (ms)")
    ax.set_title(f"First audio ({os.cpu_count()}-core CPU)")
    tokens.set_xlabel("concurrent sessions")
    tokens.set_ylabel("LM output tokens/s")
    tokens.set_title("LM throughput")
    for axis in (ax, tokens):
        axis.set_xscale("log", base=2)
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / name, dpi=110)


def session_counts(values: list[str]) -> list[int]:
    """``--sessions 1,2,4,8`` or ``--sessions 1 2 4 8``."""
    return [int(v) for value in values for v in value.split(",") if v]


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
    parser.add_argument("--sessions", nargs="+", default=["1", "2"], help="e.g. 1,2,4,8")
    parser.add_argument(
        "--batching",
        action="store_true",
        help="the sweep without and with the shared schedulers, on a pool of the largest count",
    )
    parser.add_argument("--rss-sizes", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--lm-backend",
        default=DEFAULT_LM_BACKEND,
        choices=["llama_cpp", "transformers"],
        help="with --batching: the LM engine both modes run (LM batching needs transformers)",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="'ENV=VALUE ...'",
        help="compare the defaults with these settings, turn by turn in one run (prints only)",
    )
    parser.add_argument("--talkers", type=int, default=1, help="with --compare: sessions talking at once")
    args = parser.parse_args()
    args.sessions = session_counts(args.sessions)
    if args.batching:
        batching(args.sessions, max(args.sessions), args.turns, not args.no_write, args.lm_backend)
        return
    if args.compare:
        compare(args.compare, args.turns, args.talkers)
        return

    work = Path(tempfile.mkdtemp(prefix="s2s-voice-bench-"))
    load_before = os.getloadavg()[0]
    server = LiveServer(
        work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": str(max(args.sessions)), "S2S_LOG_LEVEL": "warning"}
    )
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

    lines = [
        BEGIN,
        "## Voice to voice (real default models)",
        "",
        f"`{' '.join(shlex.quote(a) for a in ['python', 'bench/voice_latency.py', *sys.argv[1:]])}` on "
        f"{dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"load average {load_before:.1f} before / {load_after:.1f} after. Models: Silero VAD, faster-whisper tiny.en "
        "(int8), SmolLM2-135M-Instruct (float32), Piper en_US-joe-medium. Silence window 500 ms; speculation after "
        f"{settings_value('S2S_SPECULATE_AFTER_MS')} ms of silence.",
        "",
        "Voice-to-voice is measured by the client: from the last speech chunk sent (speech trimmed of silence, "
        "streamed at real-time pace in 20 ms chunks) to the first `response.output_audio.delta` received. The "
        "stage figures are what the server recorded per response (ResponseRecord).",
        "",
        "| sessions | turns | v2v p50 | v2v p90 | v2v max | speech_stopped after end of speech p50 | STT p50 | LM first token p50 | TTS first audio p50 | server-side v2v p50 |",  # noqa: E501
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sessions, results in by_sessions.items():
        v2v = [r["v2v_s"] for r in results]
        st = stages[sessions]
        lines.append(
            f"| {sessions} | {len(results)} | {pct(v2v, 50) * 1000:.0f} ms | {pct(v2v, 90) * 1000:.0f} ms | "
            f"{max(v2v) * 1000:.0f} ms | {pct([r['stopped_s'] for r in results], 50) * 1000:.0f} ms | "
            f"{pct(st['stt'], 50) * 1000:.0f} ms | {pct(st['lm_first_token'], 50) * 1000:.0f} ms | "
            f"{pct(st['tts_first_audio'], 50) * 1000:.0f} ms | {pct(st['voice_to_voice'], 50) * 1000:.0f} ms |"
        )
    if rss:
        lines += [
            "",
            "Memory of the server process once the pool is warm (one copy of each model, shared by the units):",
            "",
            "| pool size | RSS | USS | RSS per extra unit |",
            "|---:|---:|---:|---:|",
        ]
        base = rss[0]
        for size, r, u in rss:
            extra = (r - base[1]) / (size - base[0]) if size != base[0] else float("nan")
            lines.append(f"| {size} | {r:.0f} MiB | {u:.0f} MiB | {'-' if size == base[0] else f'{extra:.0f} MiB'} |")
    lines += ["", "![voice-to-voice distribution](voice_latency.png)", END]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        plot({s: [r["v2v_s"] for r in res] for s, res in by_sessions.items()}, 500)
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
