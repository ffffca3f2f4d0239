"""Test speech made at test time, and audio helpers for the tests."""

from __future__ import annotations

import base64
import functools

import numpy as np

from pipelines import audio


def tone(seconds: float, rate: int = 24000, freq: float = 220.0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float, rate: int = 24000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def pcm16_chunks(samples: np.ndarray, chunk_ms: int = 20, rate: int = 24000) -> list[str]:
    """24 kHz float samples -> base64 PCM16 chunks, as ``input_audio_buffer.append`` carries them."""
    data = audio.encode(samples, audio.PCM)
    step = rate * chunk_ms // 1000 * 2
    return [base64.b64encode(data[i:i + step]).decode() for i in range(0, len(data), step)]


@functools.lru_cache(maxsize=16)
def spoken(text: str, rate: int = 24000) -> np.ndarray:
    """``text`` spoken by the packaged Piper voice, as float32 at ``rate``."""
    engine = _piper()
    voice = np.concatenate(list(engine.synthesize(text)))
    return audio.resample(voice, engine.sample_rate, rate)


@functools.lru_cache(maxsize=1)
def _piper():
    from pipelines.backends.piper_tts import PiperEngine

    return PiperEngine()
