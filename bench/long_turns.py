"""Long turns: the transcription time of 20-40 s of sound that repeats (a looping recording, a TV), decoded in one
window as before and cut at its pauses into window-long pieces as now, interleaved in one run.

In one long window Whisper loops on repeated sound, its greedy result is rejected (too repetitive) and
faster-whisper's temperature fallback then costs seconds a try; ``WhisperEngine._in_pieces`` cuts such a stretch
at its quietest moments (``quiet_cuts``) into pieces no longer than the encoder's window and decodes them as one
batch. The sound is a Piper sentence said over and over, as issue 50's looping WAV was.

Run: ``python bench/long_turns.py`` (``--runs N``); prints markdown and rewrites its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.backends.faster_whisper_stt import WhisperEngine  # noqa: E402
from tests.support.speech import spoken  # noqa: E402

BEGIN, END = "<!-- long_turns:begin -->", "<!-- long_turns:end -->"
SENTENCE = "The quick brown fox jumps over the lazy dog and then runs far away into the dark green forest"
LENGTHS_S = (20, 30, 40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    engine = WhisperEngine()
    said = audio.resample(spoken(SENTENCE), 24000, audio.PIPELINE_RATE)
    looped = np.concatenate([said] * 12)
    before = WhisperEngine()  # the code as it was: a rejected or long stretch went to faster-whisper's fallback
    before._in_pieces = before._full  # type: ignore[method-assign]
    ways = {"one window (before)": before, "in pieces (now)": engine}
    times: dict[tuple[int, str], list[float]] = {}
    words: dict[tuple[int, str], int] = {}
    for run in range(args.runs):
        for seconds in LENGTHS_S:
            sound = looped[: seconds * audio.PIPELINE_RATE]
            order = list(ways) if run % 2 == 0 else list(reversed(ways))  # interleaved, the order alternating
            for way in order:
                started = time.perf_counter()
                text = (
                    ways[way].transcribe_batch([sound], "en")[0]
                    if ways[way] is before
                    else engine.transcribe(sound, "en")
                )
                times.setdefault((seconds, way), []).append(time.perf_counter() - started)
                words[(seconds, way)] = len(text.split())
    words_per_s = len(SENTENCE.split()) / (len(said) / audio.PIPELINE_RATE)
    rows = [
        f"| {seconds} s | {way} | {pct(times[(seconds, way)], 50):.2f} s | {max(times[(seconds, way)]):.2f} s | "
        f"{words[(seconds, way)]} (about {seconds * words_per_s:.0f} said) |"
        for seconds in LENGTHS_S
        for way in ways
    ]
    text = "\n".join(
        [
            BEGIN,
            "## Long turns: repeated sound in one window or in pieces",
            "",
            f"`python bench/long_turns.py --runs {args.runs}`, {dt.date.today()}, {os.cpu_count()} cores, "
            f"{machine_load(os.getloadavg()[0])}; the packaged Whisper (`tiny.en`), a Piper sentence said over and "
            "over, each length decoded both ways in turn (interleaved, the order alternating).",
            "",
            "| sound | decoded | p50 | max | words |",
            "|---|---|---|---|---|",
            *rows,
            END,
        ]
    )
    print(text)
    write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
