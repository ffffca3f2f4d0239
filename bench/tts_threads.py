"""Piper's onnxruntime threads: first audio of a short piece with units speaking at once, in one run.

Piper's own session has a thread per core that spins between operators; ``PiperEngine(threads=N)``
gives it N threads that sleep when idle (``pipelines/backends/piper_tts.py``). This synthesizes the
first piece of an answer (a few words) from ``--units`` threads at once, each arm in turn, the order
alternating, and reports the time to the first audio chunk per arm.

Run: ``python bench/tts_threads.py`` (``--help``); prints markdown and rewrites its section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs import machine_load, write_section  # noqa: E402
from bench.voice_latency import pct  # noqa: E402
from pipelines.backends.piper_tts import PiperEngine  # noqa: E402

BEGIN, END = "<!-- tts_threads:begin -->", "<!-- tts_threads:end -->"
PIECES = ["Sure, the sky is", "The capital of France", "A spider has eight", "Bees make honey from", "Yes, the sun is"]


def first_audio(engine: PiperEngine, text: str) -> float:
    started = time.perf_counter()
    next(iter(engine.synthesize(text)))
    return (time.perf_counter() - started) * 1000


def at_once(engine: PiperEngine, units: int, n: int) -> list[float]:
    times: list[float] = [0.0] * units
    barrier = threading.Barrier(units)

    def speak(i: int) -> None:
        barrier.wait(timeout=60)
        times[i] = first_audio(engine, PIECES[(n + i) % len(PIECES)])

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(units)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--units", type=int, default=2, help="synthesizing at once")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    arms = {
        "Piper's own session (a spinning thread per core)": PiperEngine(),
        "1 thread, no spinning": PiperEngine(threads=1),
        f"{cores} threads, no spinning": PiperEngine(threads=cores),
    }
    results: dict[str, list[float]] = {name: [] for name in arms}
    for engine in arms.values():
        first_audio(engine, "Hello.")
    for n in range(args.rounds):
        for name in list(arms) if n % 2 == 0 else list(reversed(arms)):
            results[name] += at_once(arms[name], args.units, n)
    base = pct(results[next(iter(arms))], 50)
    rows = ["| session | samples | first audio p50 | p90 | against Piper's own (p50) |", "|---|---:|---:|---:|---:|"]
    for name, values in results.items():
        p50 = pct(values, 50)
        rows.append(f"| {name} | {len(values)} | {p50:.0f} ms | {pct(values, 90):.0f} ms | {p50 / base:.2f} |")
    command = "python bench/tts_threads.py " + shlex.join(sys.argv[1:])
    text = f"""{BEGIN}
## Piper's threads (`bench/tts_threads.py`)

`{command.strip()}` on {dt.date.today().isoformat()}, {cores} CPUs; {args.units} units synthesizing the first
piece of an answer (four words) at once, {args.rounds} rounds, arms alternating; {machine_load(os.getloadavg()[0])}.

{chr(10).join(rows)}
{END}"""
    print(text)
    if not args.no_write:
        write_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
