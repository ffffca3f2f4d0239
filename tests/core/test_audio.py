"""The streaming resampler the VAD and STT hear through."""

from __future__ import annotations

import numpy as np

from pipelines import audio


def stream(freq: float, chunk: int = 480, flush: bool = False) -> np.ndarray:
    """Two seconds of a 24 kHz tone, resampled to 16 kHz in 20 ms chunks (as a microphone sends it)."""
    t = np.arange(24000 * 2) / 24000
    tone = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    resampler = audio.StreamResampler(24000, audio.PIPELINE_RATE)
    pieces = [resampler.process(tone[at : at + chunk]) for at in range(0, len(tone), chunk)]
    return np.concatenate(pieces + ([resampler.flush()] if flush else []))


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples[4000:] ** 2)))  # past the filter's start-up


def test_content_above_the_new_nyquist_is_filtered_out_not_folded_into_speech_band():
    assert rms(stream(10_000)) < 0.5 / np.sqrt(2) / 1000  # a 10 kHz tone would alias to 6 kHz: below -60 dB


def test_speech_band_passes_at_full_level_and_no_samples_are_lost_between_chunks():
    out = stream(1_000)
    assert abs(rms(out) - 0.5 / np.sqrt(2)) < 0.01
    assert 0 <= 2 * audio.PIPELINE_RATE - len(out) <= 30 * 16  # only the filter's delay (<= 30 ms) is inside
    assert abs(len(stream(1_000, flush=True)) - 2 * audio.PIPELINE_RATE) <= 1  # a commit gets all of it
