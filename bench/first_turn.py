"""The first answer after a server start against the later ones, with the real default models.

Starts ``manage.py serve`` (real pipeline, a pool of 1) ``--starts`` times; after each start one
session speaks ``--turns`` questions (Piper speech, silence trimmed, streamed at real-time pace in
20 ms chunks, server VAD). Per turn it times, from the end of the user's speech: the first
transcript delta of the user's words (what fills the page's "You ..." entry), the completed
transcript, and the first answer audio; and it reads the server's own STT and end-of-speech-to-audio
figures. Turn 1 of every start is set against turns 2.. of the same start (medians).

``--transport webrtc`` speaks over a WebRTC call instead (aiortc: Opus microphone track, events on the data
channel, first audio = ``output_audio_buffer.started``), as the page does by default.

Run: ``python bench/first_turn.py [--starts 2] [--turns 4] [--transport webrtc]``; prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.voice_latency import QUESTIONS, trimmed  # noqa: E402
from tests.support.server import LiveServer  # noqa: E402
from tests.support.speech import pcm16_chunks, silence  # noqa: E402
from tests.support.webrtc_client import WebRTCClient  # noqa: E402

TRANSCRIPT_DELTA = "conversation.item.input_audio_transcription.delta"
TRANSCRIPT_DONE = "conversation.item.input_audio_transcription.completed"


async def one_turn(ws, text: str) -> dict[str, float]:
    """Speaks ``text`` and returns seconds from the end of speech to each event of the turn."""
    speech = pcm16_chunks(trimmed(text))
    lead = pcm16_chunks(silence(0.3))
    chunks = lead + speech + pcm16_chunks(silence(1.5))
    marks: dict[str, float] = {}

    async def send() -> None:
        start = time.monotonic()
        for i, chunk in enumerate(chunks, start=1):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            if i == len(lead) + len(speech):
                marks["speech_end"] = time.monotonic()
            await asyncio.sleep(max(0.0, start + i * 0.02 - time.monotonic()))

    sender = asyncio.create_task(send())
    try:
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 120))
            marks.setdefault(event["type"], time.monotonic())
            if event["type"] == "response.done":
                break
    finally:
        await sender
    await asyncio.sleep(0.5)
    end = marks["speech_end"]
    return {
        "first_words_s": marks.get(TRANSCRIPT_DELTA, marks.get(TRANSCRIPT_DONE, float("nan"))) - end,
        "transcript_s": marks.get(TRANSCRIPT_DONE, float("nan")) - end,
        "audio_s": marks.get("response.output_audio.delta", float("nan")) - end,
    }


async def session(url: str, turns: int) -> list[dict[str, float]]:
    async with websockets.connect(url, max_size=None, open_timeout=30) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        return [await one_turn(ws, QUESTIONS[n % len(QUESTIONS)]) for n in range(turns)]


async def call(base_url: str, turns: int) -> list[dict[str, float]]:
    client = WebRTCClient(base_url)
    try:
        assert (await client.connect()).status == 201
        await client.events.until("session.created")
        results = []
        for n in range(turns):
            end = client.microphone.say(trimmed(QUESTIONS[n % len(QUESTIONS)]))
            marks: dict[str, float] = {}
            while "response.done" not in marks or "output_audio_buffer.stopped" not in marks:
                event = await client.events.recv(120)
                assert event is not None, "no event for 120 s"
                marks.setdefault(event["type"], time.monotonic())
            await asyncio.sleep(1.0)
            first = marks.get(TRANSCRIPT_DELTA, marks.get(TRANSCRIPT_DONE, float("nan")))
            results.append(
                {
                    "first_words_s": first - end,
                    "transcript_s": marks.get(TRANSCRIPT_DONE, float("nan")) - end,
                    "audio_s": marks.get("output_audio_buffer.started", float("nan")) - end,
                }
            )
        return results
    finally:
        await client.close()


SERVER = ("stt_s", "lm_first_token_s", "tts_first_audio_s", "voice_to_voice_s")


def server_figures(db: Path) -> list[tuple[float | None, ...]]:
    """The server's per-stage figures (``SERVER``) of each response, in order."""
    con = sqlite3.connect(db)
    rows = con.execute(f"SELECT {', '.join(SERVER)} FROM realtime_responserecord ORDER BY finished_at").fetchall()
    con.close()
    return rows


def one_start(turns: int, transport: str) -> list[dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="s2s-first-turn-"))
    server = LiveServer(work, env={"S2S_PIPELINE": "real", "S2S_POOL_SIZE": "1", "S2S_LOG_LEVEL": "warning"})
    started = time.monotonic()
    server.start(ready_timeout=900)
    ready_s = time.monotonic() - started
    try:
        results = asyncio.run(session(server.ws, turns) if transport == "websocket" else call(server.http, turns))
    finally:
        server.stop()
    for result, row in zip(results, server_figures(work / "server.sqlite3"), strict=False):
        for name, value in zip(SERVER, row, strict=True):
            result[f"server_{name}"] = float("nan") if value is None else value
        result["ready_s"] = ready_s
    return results


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=2)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--transport", choices=("websocket", "webrtc"), default="websocket")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs = [one_start(args.turns, args.transport) for _ in range(args.starts)]
    load_after = os.getloadavg()[0]
    keys = ("first_words_s", "transcript_s", "audio_s", *(f"server_{name}" for name in SERVER))
    print(
        f"`python bench/first_turn.py --starts {args.starts} --turns {args.turns} --transport {args.transport}`: "
        f"{platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before / {load_after:.1f} after.\n"
    )
    columns = "first words | transcript | first audio | server STT | server LM first token | server TTS | server v2v"
    print(f"| start | turn | {columns} |")
    print("| --- " * 9 + "|")
    for n, run in enumerate(runs, 1):
        for t, turn in enumerate(run, 1):
            cells = " | ".join(f"{turn[k] * 1000:.0f} ms" for k in keys)
            print(f"| {n} | {t} | {cells} |")
    first = [run[0] for run in runs if run]
    later = [turn for run in runs for turn in run[1:]]
    print(f"\n| median of | {columns} |")
    print("| --- " * 8 + "|")
    for name, turns in (("turn 1", first), ("turns 2..", later)):
        print(f"| {name} | " + " | ".join(f"{median([t[k] for t in turns]) * 1000:.0f} ms" for k in keys) + " |")


if __name__ == "__main__":
    main()
