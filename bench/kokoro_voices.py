"""Kokoro's voices against Piper's: time to the first audio of the same sentences, interleaved in one run.

A voice-agent session that asks for a Kokoro voice (``af_heart``, ``am_michael``: ``make kokoro``) is answered by
Kokoro-82M instead of the packaged Piper voice. This synthesizes first pieces of answers (as the TTS stage sends
them) and whole sentences with each voice as the server loads it (``pipelines/backends/registry.py``: a thread per
core that sleeps when idle), the arms taking turns text by text, their order alternating, and reports the time to
the first audio chunk (p50, p95), and the seconds of speech made per second of synthesis of the whole text.

Run: ``python bench/kokoro_voices.py`` (``--help``); prints markdown and rewrites its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, pct, write_section  # noqa: E402
from pipelines.backends.registry import kokoro_model  # noqa: E402
from pipelines.config import EngineConfig  # noqa: E402
from pipelines.interfaces import Synthesizer  # noqa: E402

BEGIN, END = "<!-- kokoro_voices:begin -->", "<!-- kokoro_voices:end -->"
# The first piece of an answer, as the TTS stage sends it (its first clause, or after a few words), and whole
# sentences, as the rest of an answer and a translated phrase come.
PIECES = ["Sure, the sky is", "The capital of France", "A spider has eight", "Bees make honey from", "Yes, the sun is"]
SENTENCES = [
    "Sure, the sky is blue.",
    "The capital of France is Paris.",
    "A spider has eight legs.",
    "Bees make honey from the nectar of flowers.",
    "Yes, the sun is a star at the centre of our solar system.",
    "Water boils at one hundred degrees.",
]


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (the machine's architecture where it gives none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def timed(voice: Synthesizer, text: str) -> tuple[float, float]:
    """(ms to the first chunk, seconds of speech per second of synthesis of the whole text)."""
    started = time.perf_counter()
    chunks = iter(voice.synthesize(text))
    first = next(chunks)
    first_ms = (time.perf_counter() - started) * 1000
    samples = len(first) + sum(len(c) for c in chunks)
    return first_ms, samples / voice.sample_rate / (time.perf_counter() - started)


def arms(kokoro_voices: list[str]) -> dict[str, Synthesizer]:
    from pipelines.backends.piper_tts import PiperEngine

    cores = os.cpu_count() or 1
    config = EngineConfig()
    voices: dict[str, Synthesizer] = {"Piper en_US-joe-medium (the default)": PiperEngine(threads=cores)}
    model = kokoro_model(config.kokoro_model_dir, config.kokoro_voices_dir)
    model.load()
    voices.update({f"Kokoro-82M int8, {name}": model.voice(name) for name in kokoro_voices})
    return voices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="times through the texts")
    parser.add_argument("--voices", default="af_heart,am_michael", help="Kokoro voices, comma-separated")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    voices = arms(args.voices.split(","))
    sets = {"first piece (four words)": PIECES, "sentence (4 to 13 words)": SENTENCES}
    first: dict[tuple[str, str], list[float]] = {(kind, name): [] for kind in sets for name in voices}
    speed: dict[tuple[str, str], list[float]] = {key: [] for key in first}
    for voice in voices.values():
        timed(voice, "Hello there.")  # warm: the first run of a session allocates
    turn = 0
    for _ in range(args.rounds):
        for kind, texts in sets.items():
            for text in texts:
                order = list(voices) if turn % 2 == 0 else list(reversed(voices))
                turn += 1
                for name in order:
                    ms, rate = timed(voices[name], text)
                    first[kind, name].append(ms)
                    speed[kind, name].append(rate)
    rows = [
        "| text | voice | samples | first audio p50 | p95 | against Piper (p50) | speech per second of synthesis |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in sets:
        piper = pct(first[kind, next(iter(voices))], 50)
        for name in voices:
            values = first[kind, name]
            p50 = pct(values, 50)
            rows.append(
                f"| {kind} | {name} | {len(values)} | {p50:.0f} ms | {pct(values, 95):.0f} ms | {p50 / piper:.2f} "
                f"| {pct(speed[kind, name], 50):.1f} s |"
            )
    command = "python bench/kokoro_voices.py " + shlex.join(sys.argv[1:])
    cores = os.cpu_count() or 1
    text = f"""{BEGIN}
## Kokoro voices against Piper (`bench/kokoro_voices.py`)

`{command.strip()}` on {dt.date.today().isoformat()}: {cpu_name()}, {cores} CPUs, no GPU; {len(PIECES)} first
pieces of an answer (as the TTS stage sends them) and {len(SENTENCES)} whole sentences, each voice as the server
loads it (a thread per core that sleeps when idle), {args.rounds} rounds, the voices taking turns text by text in
alternating order; first audio: the text's first chunk (both engines make a sentence at a time);
{machine_load(os.getloadavg()[0])}.

{chr(10).join(rows)}
{END}"""
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
