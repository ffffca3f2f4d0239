"""The session's input audio on its way to turn detection and STT: decoded, denoised when the
session asks for it (``audio.input.noise_reduction``), resampled to ``PIPELINE_RATE``, chunk by chunk."""

from __future__ import annotations

import numpy as np

from pipelines import audio
from pipelines.interfaces import Denoiser, DenoiserModel

# How much each ``noise_reduction`` type may take away from a frequency band, in dB (None: no limit).
# Both types get the same light touch: with RNNoise (the default) a 6 dB cap gave Whisper the fewest word
# errors in white and pink noise; a stronger cap (the idea was a stronger far_field) did worse, most of all in
# babble, and with none the denoisers took speech away too (the figures: docs/benchmarks.md, "Noise reduction
# of the input audio", bench/noise_reduction.py).
ATTENUATION_LIMIT_DB: dict[str, float | None] = {"near_field": 6.0, "far_field": 6.0}


class InputAudio:
    """Streams one session's input: ``process`` takes the client's chunks, returns ``PIPELINE_RATE`` samples.

    Without noise reduction: one streaming resampler (input rate -> 16 kHz). With it: input rate ->
    the denoiser's rate -> denoiser -> 16 kHz, each keeping its state between chunks. A change of the
    input format or of the noise reduction flushes the old chain into the output and builds a new one.
    """

    def __init__(self, model: DenoiserModel | None = None) -> None:
        self.model = model
        self._key: tuple[int, str | None] | None = None
        self._stages: list[audio.StreamResampler | Denoiser] = []

    def process(self, data: bytes, audio_format: str, noise_reduction: str | None) -> np.ndarray:
        rate = audio.RATES[audio_format]
        mode = noise_reduction if self.model is not None else None
        head = np.zeros(0, dtype=np.float32)
        if self._key != (rate, mode):
            if self._stages:
                head = self.flush()
            self._stages = self._build(rate, mode)
            self._key = (rate, mode)
        samples = audio.decode(data, audio_format)
        for stage in self._stages:
            samples = stage.process(samples)
        return np.concatenate([head, samples]) if len(head) else samples

    def flush(self) -> np.ndarray:
        """Everything still inside the chain (filters, the denoiser's frame), at ``PIPELINE_RATE``; the chain
        starts afresh after it (a manual commit takes the whole turn)."""
        out = np.zeros(0, dtype=np.float32)
        for stage in self._stages:
            out = np.concatenate([stage.process(out), stage.flush()]) if len(out) else stage.flush()
        return out

    def close(self) -> None:
        for stage in self._stages:
            if not isinstance(stage, audio.StreamResampler):
                stage.close()
        self._stages = []
        self._key = None

    def _build(self, rate: int, mode: str | None) -> list[audio.StreamResampler | Denoiser]:
        self.close()
        if mode is None or self.model is None:
            return [audio.StreamResampler(rate, audio.PIPELINE_RATE)]
        return [
            audio.StreamResampler(rate, self.model.rate),
            self.model.new_state(ATTENUATION_LIMIT_DB[mode]),
            audio.StreamResampler(self.model.rate, audio.PIPELINE_RATE),
        ]
