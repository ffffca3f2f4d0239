"""Whisper's encoder window: transcription time and word errors of short questions, per window, in one run.

faster-whisper pads every utterance to Whisper's 30 s window, so a 2.6 s question costs the
encoder as much as 30 s of speech. ``WhisperEngine(window_s=...)`` encodes shorter utterances in
a shorter window (see ``pipelines/backends/faster_whisper_stt.py``). This renders questions with
Piper (steady, the same audio every run), and for each question runs every window in turn (the
order rotating, so the machine's load falls on all alike): the time of one ``transcribe`` call and
the word error rate against the text spoken.

Run: ``python bench/stt_window.py`` (``--help``); prints markdown and rewrites its section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from bench.turn_taking import COMPLETE, NEW_COMPLETE  # noqa: E402
from bench.voice_latency import QUESTIONS, pct  # noqa: E402
from pipelines.backends.faster_whisper_stt import FULL_FRAMES, WhisperEngine  # noqa: E402
from tests.support.speech import spoken  # noqa: E402

BEGIN, END = "<!-- stt_window:begin -->", "<!-- stt_window:end -->"


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()


def errors(reference: str, heard: str) -> int:
    """Word-level edit distance (substitutions, insertions, deletions)."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            above = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diagonal + (ref[i - 1] != hyp[j - 1]))
            diagonal = above
    return row[len(hyp)]


class _Counted(WhisperEngine):
    """The engine, counting the utterances its short window gave up on (faster-whisper's 30 s, with its
    fallback, transcribed them again): the cost a short window risks. The 30 s window itself gives up on
    nothing: it is faster-whisper's own transcription for every utterance."""

    fallbacks = 0

    def _full(self, audio: np.ndarray, language: str | None, prompt: str | None) -> str:
        if self.window_frames < FULL_FRAMES:
            self.fallbacks += 1
        return super()._full(audio, language, prompt)


def measure(windows: list[float], threads: int, renderings: int) -> dict[float, dict[str, list[float]]]:
    engines = {w: _Counted(cpu_threads=threads, window_s=w) for w in windows}
    sentences = list(dict.fromkeys(["What color is the sky on a clear day?", *QUESTIONS, *COMPLETE, *NEW_COMPLETE]))
    results: dict[float, dict[str, list[float]]] = {
        w: {"ms": [], "errors": [], "words": [], "fallbacks": []} for w in windows
    }
    for engine in engines.values():
        engine.transcribe(spoken("Hello there.", 16000))  # first-call costs
    n = 0
    for _ in range(renderings):
        spoken.cache_clear()  # a new rendering of each sentence (steady: the same one)
        for sentence in sentences:
            said = spoken(sentence, 16000, steady=renderings == 1)
            speech = np.concatenate([np.zeros(4800, np.float32), said, np.zeros(1600, np.float32)])
            order = windows[n % len(windows) :] + windows[: n % len(windows)]
            n += 1
            for window in order:
                engine = engines[window]
                before = engine.fallbacks
                started = time.perf_counter()
                heard = engine.transcribe(speech)
                results[window]["ms"].append((time.perf_counter() - started) * 1000)
                results[window]["errors"].append(errors(sentence, heard))
                results[window]["words"].append(len(words(sentence)))
                results[window]["fallbacks"].append(engine.fallbacks - before)
    return results


def section(
    results: dict[float, dict[str, list[float]]], command: str, threads: int, load: float, renderings: int
) -> str:
    rows = [
        "| encoder window | questions | transcribe p50 | p90 | max | word error rate | given up (30 s again) "
        f"| against {max(results):g} s (p50) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    full = pct(results[max(results)]["ms"], 50)
    for window, r in sorted(results.items(), reverse=True):
        rate = sum(r["errors"]) / sum(r["words"])
        p50 = pct(r["ms"], 50)
        rows.append(
            f"| {window:g} s | {len(r['ms'])} | {p50:.0f} ms | {pct(r['ms'], 90):.0f} ms | {max(r['ms']):.0f} ms "
            f"| {rate:.3f} | {int(sum(r['fallbacks']))} | {p50 / full:.2f} |"
        )
    voice = "steady" if renderings == 1 else f"{renderings} varied renderings of each"
    return f"""{BEGIN}
## Whisper's encoder window (`bench/stt_window.py`)

`{command}` on {dt.date.today().isoformat()}, {os.cpu_count()} CPUs, Whisper tiny.en int8 with {threads} thread(s);
{machine_load(load)}. Questions spoken by Piper ({voice}), 0.3 s of silence before and 0.1 s after, each
transcribed with every window in turn (order rotating). An utterance shorter than the window less 1 s is
encoded in the window, a longer one in itself and 1 s more; 30 s is faster-whisper as it is. Given up: the
short window's transcript was too unlikely or repetitive, so faster-whisper transcribed the utterance again
in 30 s (with its temperature fallback): a transcription's worst case.

{chr(10).join(rows)}
{END}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=float, nargs="+", default=[30.0, 10.0, 5.0, 3.0])
    parser.add_argument("--threads", type=int, default=1, help="Whisper's threads (a pool of 2 on 2 cores: 1)")
    parser.add_argument("--renderings", type=int, default=1, help="1: Piper's steady rendering; more: varied ones")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    renderings = max(1, args.renderings)
    results = measure(sorted(set(args.windows), reverse=True), args.threads, renderings)
    command = "python bench/stt_window.py " + shlex.join(sys.argv[1:])
    text = section(results, command.strip(), args.threads, os.getloadavg()[0], renderings)
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
