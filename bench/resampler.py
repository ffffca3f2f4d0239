"""The microphone path's streaming resampler (24 kHz -> 16 kHz in 20 ms chunks): aliasing and cost.

Compares soxr's streaming resampler (``pipelines.audio.StreamResampler``) with plain linear
interpolation (what the pipeline used before), in one run:

    .venv/bin/python bench/resampler.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines import audio  # noqa: E402

CHUNK = 480  # 20 ms at 24 kHz


class LinearResampler:
    """Linear interpolation keeping phase between chunks, without a low-pass filter (the old way)."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self._step, self._pos, self._tail = from_rate / to_rate, 0.0, np.zeros(0, dtype=np.float32)

    def process(self, chunk: np.ndarray) -> np.ndarray:
        data = np.concatenate([self._tail, chunk])
        last = len(data) - 1
        count = int(np.floor((last - self._pos) / self._step)) + 1 if self._pos <= last else 0
        out = np.interp(self._pos + self._step * np.arange(count), np.arange(len(data)), data).astype(np.float32)
        next_pos = self._pos + self._step * count
        keep = min(int(np.floor(next_pos)), last)
        self._tail, self._pos = data[keep:], next_pos - keep
        return out


def tone_rms(make: type, freq: float) -> float:
    t = np.arange(24000 * 2) / 24000
    tone = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    resampler = make(24000, 16000)
    out = np.concatenate([resampler.process(tone[at : at + CHUNK]) for at in range(0, len(tone), CHUNK)])
    return float(np.sqrt(np.mean(out[4000:] ** 2)))


def chunk_cost_us(make: type, rounds: int = 5000) -> tuple[float, float]:
    resampler = make(24000, 16000)
    chunk = (np.random.default_rng(0).standard_normal(CHUNK) * 0.1).astype(np.float32)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        resampler.process(chunk)
        times.append(time.perf_counter() - started)
    micro = np.array(times[100:]) * 1e6
    return float(np.percentile(micro, 50)), float(np.percentile(micro, 99))


def main() -> None:
    print(f"{'resampler':<10} {'10 kHz folded to 6 kHz (dB)':>28} {'1 kHz kept (dB)':>16} {'p50 us':>8} {'p99 us':>8}")
    for name, make in (("linear", LinearResampler), ("soxr", audio.StreamResampler)):
        folded = 20 * np.log10(tone_rms(make, 10_000) / (0.5 / np.sqrt(2)))
        kept = 20 * np.log10(tone_rms(make, 1_000) / (0.5 / np.sqrt(2)))
        p50, p99 = chunk_cost_us(make)
        print(f"{name:<10} {folded:>28.1f} {kept:>16.2f} {p50:>8.1f} {p99:>8.1f}")


if __name__ == "__main__":
    main()
