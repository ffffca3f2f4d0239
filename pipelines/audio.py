"""Audio formats of the Realtime API and conversions between sample rates.

``audio/pcm`` is 24 kHz mono little-endian PCM16; ``audio/pcmu`` and ``audio/pcma``
are 8 kHz G.711 mu-law and A-law. Inside the pipeline audio is float32 in [-1, 1].
"""

from __future__ import annotations

import numpy as np
import soxr

PCM = "audio/pcm"
PCMU = "audio/pcmu"
PCMA = "audio/pcma"
FORMATS = (PCM, PCMU, PCMA)
RATES = {PCM: 24000, PCMU: 8000, PCMA: 8000}
BYTES_PER_SAMPLE = {PCM: 2, PCMU: 1, PCMA: 1}

PIPELINE_RATE = 16000  # what the VAD and the STT work at


def _ulaw_decode_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _alaw_decode_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << (exponent - 1))
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


_ULAW_DECODE = _ulaw_decode_table()
_ALAW_DECODE = _alaw_decode_table()


def _nearest_code_table(decode: np.ndarray) -> np.ndarray:
    """For every int16 value, the G.711 code whose decoded value is nearest."""
    order = np.argsort(decode, kind="stable")
    values = decode[order].astype(np.int32)
    grid = np.arange(-32768, 32768, dtype=np.int32)
    pos = np.clip(np.searchsorted(values, grid), 1, len(values) - 1)
    lower, upper = values[pos - 1], values[pos]
    pick = np.where(grid - lower <= upper - grid, pos - 1, pos)
    return order[pick].astype(np.uint8)


_ULAW_ENCODE = _nearest_code_table(_ULAW_DECODE)
_ALAW_ENCODE = _nearest_code_table(_ALAW_DECODE)


def decode(data: bytes, audio_format: str) -> np.ndarray:
    """Bytes of ``audio_format`` -> float32 samples at that format's rate."""
    if audio_format == PCM:
        usable = len(data) - len(data) % 2
        pcm = np.frombuffer(data[:usable], dtype="<i2")
    elif audio_format == PCMU:
        pcm = _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]
    elif audio_format == PCMA:
        pcm = _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]
    else:
        raise ValueError(f"unknown audio format {audio_format!r}")
    return pcm.astype(np.float32) / 32768.0


def encode(samples: np.ndarray, audio_format: str) -> bytes:
    """float32 samples at the format's rate -> bytes of ``audio_format``."""
    pcm = np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)
    if audio_format == PCM:
        return pcm.astype("<i2").tobytes()
    if audio_format == PCMU:
        return _ULAW_ENCODE[pcm.astype(np.int32) + 32768].tobytes()
    if audio_format == PCMA:
        return _ALAW_ENCODE[pcm.astype(np.int32) + 32768].tobytes()
    raise ValueError(f"unknown audio format {audio_format!r}")


def from_pipeline(samples: bytes, audio_format: str) -> bytes:
    """16 kHz float32 pipeline samples (as bytes) -> bytes of ``audio_format`` at its rate."""
    floats = np.frombuffer(samples[: len(samples) - len(samples) % 4], dtype=np.float32)
    return encode(resample(floats, PIPELINE_RATE, RATES[audio_format]), audio_format)


def duration_ms(num_bytes: int, audio_format: str) -> int:
    samples = num_bytes // BYTES_PER_SAMPLE[audio_format]
    return samples * 1000 // RATES[audio_format]


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample a whole block (a sentence of speech, an utterance) with a polyphase filter."""
    if from_rate == to_rate or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(from_rate, to_rate)
    return resample_poly(samples, to_rate // g, from_rate // g).astype(np.float32)


class StreamResampler:
    """Resamples a stream of small chunks (20 ms of microphone audio) with soxr's streaming resampler.

    Unlike interpolation it low-passes before decimating, so 24 kHz input does not fold its 8-12 kHz
    content into the band the VAD and the STT hear (-119 dB at 10 kHz, bench/resampler.py). soxr keeps
    the filter state between chunks; "MQ" holds back 15 ms at 24 kHz (26 ms at 8 kHz), which
    :meth:`flush` hands out when a turn is committed by hand.
    """

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self.from_rate = from_rate
        self.to_rate = to_rate
        self._stream = soxr.ResampleStream(from_rate, to_rate, 1, dtype="float32", quality="MQ")

    def process(self, chunk: np.ndarray) -> np.ndarray:
        if self.from_rate == self.to_rate:
            return chunk.astype(np.float32, copy=False)
        return self._stream.resample_chunk(chunk.astype(np.float32, copy=False))

    def flush(self) -> np.ndarray:
        """The samples still inside the filter; the stream starts afresh after them."""
        if self.from_rate == self.to_rate:
            return np.zeros(0, dtype=np.float32)
        tail = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._stream.clear()
        return tail


def time_stretch(samples: np.ndarray, speed: float) -> np.ndarray:
    """``samples`` played ``speed`` times as fast at the same pitch (a phase vocoder, librosa's).

    For engines that cannot change their own speaking rate; a voice's own rate (Piper's
    length scale) sounds better and is used where there is one.
    """
    if speed == 1.0 or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    import librosa

    return librosa.effects.time_stretch(samples.astype(np.float32, copy=False), rate=speed).astype(np.float32)
