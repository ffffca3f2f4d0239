"""The words' check of semantic_vad: how its floor trades complete questions kept waiting for mid-sentence cuts.

A finished-sounding pause ends the turn unless the text turn model reads its words as unfinished
(below ``vad.SEMANTIC_TEXT_FLOOR``, lower for a transcript ending in a question mark: ``vad.words_floor``);
then the turn waits for more speech, up to half the longest wait (2 s with ``auto``). This renders
complete questions and sentences cut mid-way (bench/turn_taking.py's sets and bench/voice_latency.py's
questions, Piper with its random variation), scores each with Smart
Turn (as the VAD hears it: 0.3 s before, 0.2 s of silence after) and its Whisper transcript with the
text turn model, and for the utterances that sound finished (Smart Turn at or above 0.5) counts, per
floor: the complete questions that would wait, and the cut sentences that would end the turn. Of the
utterances that sound unfinished it counts those whose words end the turn at once (at or above
``vad.SEMANTIC_TEXT_SURE``) and after half the longest wait (over the floor, under that mark).

Run: ``python bench/turn_words.py --renderings 3`` (``--model`` another GGUF language model as the reader);
prints markdown and rewrites its section of docs/benchmarks.md. Piper's renderings vary from run to run:
``--transcripts FILE`` keeps them (each one's kind, Smart Turn's probability and Whisper's transcript) in FILE
the first time and reads them from it after, so that two readers, or two checkouts' readers and floors, are
compared on the same renderings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from bench.turn_taking import COMPLETE, MID_SENTENCE, NEW_COMPLETE, NEW_MID_SENTENCE  # noqa: E402
from bench.voice_latency import QUESTIONS  # noqa: E402
from pipelines import audio  # noqa: E402
from pipelines.backends.faster_whisper_stt import WhisperEngine  # noqa: E402
from pipelines.backends.smart_turn import SmartTurnModel  # noqa: E402
from pipelines.backends.turn_text import EndOfTurnLM  # noqa: E402
from pipelines.stages.vad import (  # noqa: E402
    QUESTION_MARK_WEIGHT,
    SEMANTIC_TEXT_FLOOR,
    SEMANTIC_TEXT_SURE,
    SEMANTIC_THRESHOLD,
    weighed,
    words_floor,
    words_sure,
)
from tests.support import speech  # noqa: E402

BEGIN, END = "<!-- turn_words:begin -->", "<!-- turn_words:end -->"
FLOORS = (0.2, 0.15, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002)
BEFORE, AFTER = np.zeros(4800, np.float32), np.zeros(3200, np.float32)  # 16 kHz: 0.3 s and 0.2 s of silence


def rendered(renderings: int) -> list[tuple[str, float, str]]:
    """(kind, Smart Turn's probability, the transcript) of every rendering."""
    turn, whisper = SmartTurnModel(), WhisperEngine()
    rows = []
    kinds = (("complete", COMPLETE + NEW_COMPLETE + QUESTIONS), ("cut", MID_SENTENCE + NEW_MID_SENTENCE))
    for kind, texts in kinds:
        for text in texts:
            for _ in range(renderings):
                speech.spoken.cache_clear()
                speech.spoken_halves.cache_clear()
                said = speech.spoken(text, steady=False) if kind == "complete" else speech.spoken_halves(text)[0]
                heard = audio.resample(said, 24000, 16000)
                sound = turn.probability(np.concatenate([BEFORE, heard, AFTER]))
                rows.append((kind, sound, whisper.transcribe(heard)))
    return rows


def scored(
    renderings: list[tuple[str, float, str]], reader: EndOfTurnLM
) -> tuple[list[tuple[str, float, float, str]], list[float]]:
    """(kind, Smart Turn's probability, the reader's, the transcript) of every rendering; the reader's times."""
    rows, times = [], []
    for kind, sound, words in renderings:
        started = time.perf_counter()
        rows.append((kind, sound, reader.finished_probability(words), words))
        times.append((time.perf_counter() - started) * 1000)
    return rows, times


def section(rows: list[tuple[str, float, float, str]], times: list[float], args: argparse.Namespace) -> str:
    finished = SEMANTIC_THRESHOLD["auto"]
    sounding = [r for r in rows if r[1] >= finished]
    complete = [r for r in sounding if r[0] == "complete"]
    cut = [r for r in sounding if r[0] == "cut"]
    lines = [
        BEGIN,
        "## The words' check of semantic_vad (`bench/turn_words.py`)",
        "",
        f"`python bench/turn_words.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` on "
        f"{dt.date.today().isoformat()}, {psutil.cpu_count()} CPUs; {machine_load(os.getloadavg()[0])}. Reader: "
        f"`{Path(args.model).name if args.model else 'the default (SmolLM2-135M-Instruct)'}`, "
        f"{pct(times, 50):.0f} ms a reading p50 ({pct(times, 90):.0f} ms p90). "
        f"{len(rows)} renderings; {len(complete)} complete questions and {len(cut)} cut sentences sound finished "
        f"to Smart Turn (at or above {finished}). Per floor, of those: the complete questions whose words "
        "read as unfinished (they wait up to 2 s more), and the cut sentences whose words read as finished "
        "(the turn is cut in the pause); by the floor alone, and by the floor as the server applies it, "
        f"{QUESTION_MARK_WEIGHT} times lower for a transcript Whisper ends with a question mark. "
        f"The server's floor is {SEMANTIC_TEXT_FLOOR['auto']}.",
        "",
        "| floor | complete questions that wait | cut sentences answered in the pause "
        "| with the question mark: complete questions that wait | cut sentences answered |",
        "|---:|---:|---:|---:|---:|",
    ]

    for floor in FLOORS:
        waiting = sum(r[2] < floor for r in complete)
        answered = sum(r[2] >= floor for r in cut)
        asked = sum(r[2] < weighed(floor, r[3]) for r in complete)
        cut_asked = sum(r[2] >= weighed(floor, r[3]) for r in cut)
        lines.append(
            f"| {floor} | {waiting} of {len(complete)} | {answered} of {len(cut)} "
            f"| {asked} of {len(complete)} | {cut_asked} of {len(cut)} |"
        )
    lowest = sorted(complete, key=lambda r: r[2])[:5]
    lines += [
        "",
        "The complete questions read as least finished: "
        + "; ".join(f'"{r[3]}" {r[2]:.4f}' for r in lowest)
        + ". The cut sentences read as most finished: "
        + "; ".join(f'"{r[3]}" {r[2]:.4f}' for r in sorted(cut, key=lambda r: -r[2])[:3])
        + ".",
    ]
    going_on = [r for r in rows if r[1] < finished]
    ended = [r for r in going_on if r[2] >= words_sure("auto", r[3])]
    halved = [r for r in going_on if words_floor("auto", r[3]) <= r[2] < words_sure("auto", r[3])]

    def of(kind: str, subset: list[tuple[str, float, float, str]]) -> str:
        return f"{sum(r[0] == kind for r in subset)} of {sum(r[0] == kind for r in going_on)}"

    lines += [
        "",
        f"Of the {len(going_on)} renderings that sound unfinished (they would wait 4 s), the words end the turn "
        f"(at or above {SEMANTIC_TEXT_SURE['auto']}, with the question mark's weight) for "
        f"{of('complete', ended)} complete questions and {of('cut', ended)} cut sentences; they read at or above "
        f"the floor, under that mark, for {of('complete', halved)} complete questions and {of('cut', halved)} cut "
        "sentences (the sound and the words disagree: the turn ends after 2 s of silence, as a finished-sounding "
        "pause whose words read under the floor does). "
        + "; ".join(f'"{r[3]}" {r[0]} {r[2]:.3f}' for r in sorted(halved, key=lambda r: -r[2])[:8])
        + ".",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renderings", type=int, default=3, help="renderings of each utterance")
    parser.add_argument("--model", default="", help="a GGUF language model as the reader (default: the server's)")
    parser.add_argument(
        "--transcripts", type=Path, help="keep the renderings in this JSON file, or read them from it if it exists"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.transcripts and args.transcripts.exists():
        renderings = [tuple(row) for row in json.loads(args.transcripts.read_text())]
    else:
        renderings = rendered(args.renderings)
        if args.transcripts:
            args.transcripts.write_text(json.dumps(renderings))
    rows, times = scored(renderings, EndOfTurnLM(args.model or None))
    text = section(rows, times, args)
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
