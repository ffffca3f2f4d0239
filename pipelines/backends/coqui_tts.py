"""Text to speech with a Coqui TTS model (VITS, XTTS, ... through ``TTS.api.TTS``)."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from pipelines.audio import time_stretch
from pipelines.interfaces import Cancel

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


class CoquiEngine:
    """One loaded Coqui model, shared by many units.

    Coqui models keep per-call state on the model object (XTTS's GPT, the
    vocoder), so synthesis is serialised by a lock, one sentence (or one XTTS
    stream chunk) at a time: sessions interleave at that granularity.
    """

    def __init__(
        self,
        model_path: str | None = None,
        config_path: str | None = None,
        model_name: str | None = None,
        device: str = "cpu",
        speaker: str | None = None,
        language: str | None = None,
    ) -> None:
        from TTS.api import TTS

        if not (model_path or model_name):
            raise ValueError("CoquiEngine needs a model_path (+ config_path) or a model_name")
        self._tts = TTS(
            model_name or "",
            model_path=model_path,
            config_path=config_path,
            progress_bar=False,
        ).to(device)
        synthesizer = self._tts.synthesizer
        if synthesizer is None or synthesizer.tts_model is None:
            raise ValueError(f"{model_name or model_path} is not a text-to-speech model")
        self._synthesizer = synthesizer
        self._model = synthesizer.tts_model
        self.sample_rate: int = int(synthesizer.output_sample_rate)
        self.speaker = speaker
        self.language = language
        # Coqui rejects a speaker/language for models that have none.
        self._speaker = speaker if self._tts.is_multi_speaker else None
        self._language = language if self._tts.is_multi_lingual else None
        if (speaker and not self._speaker) or (language and not self._language):
            logger.warning("Ignoring speaker/language: the model is single-speaker/language")
        self._lock = threading.Lock()
        self._padding_ids = self._tokenizer_padding_ids()
        self._xtts_latents: tuple[Any, Any] | None = None
        if self.is_xtts:
            self._xtts_latents = self._load_xtts_latents(speaker)
        logger.info(
            "Loaded Coqui %s from %s on %s (%d Hz)",
            type(self._model).__name__,
            model_name or model_path,
            device,
            self.sample_rate,
        )

    @property
    def is_xtts(self) -> bool:
        return type(self._model).__name__ == "Xtts"

    def _load_xtts_latents(self, speaker: str | None) -> tuple[Any, Any]:
        """Conditioning for XTTS: a named built-in speaker or a reference wav path."""
        manager = getattr(self._model, "speaker_manager", None)
        if manager is not None and speaker in manager.speakers:
            latent, embedding = manager.speakers[speaker].values()
            return latent, embedding
        if speaker is None:
            raise ValueError("XTTS needs speaker= (a built-in name or a reference .wav path)")
        latent, embedding = self._model.get_conditioning_latents(audio_path=[speaker])
        return latent, embedding

    def split_sentences(self, text: str) -> list[str]:
        """Sentences of ``text``, using Coqui's segmenter when the model has one."""
        try:
            sentences = self._synthesizer.split_into_sentences(text, self._language)
        except Exception:  # no language manager / segmenter for this model
            sentences = _SENTENCE_END.split(text)
        return [s.strip() for s in sentences if s.strip()]

    @property
    def speed_method(self) -> str:
        """How ``speed`` is applied: the model's own rate ("xtts", "length_scale") or a time stretch."""
        if self.is_xtts:
            return "xtts"
        if isinstance(getattr(self._model, "length_scale", None), (int, float)):
            return "length_scale"  # VITS: phoneme durations scale with it
        return "time_stretch"

    def synthesize(self, text: str, cancel: Cancel | None = None, speed: float = 1.0) -> Iterator[np.ndarray]:
        """Yield float32 mono audio at ``sample_rate``, per sentence (per chunk for XTTS).

        ``speed`` scales the speaking rate: XTTS's own ``speed``, VITS's length scale
        (durations divided by ``speed``), or for other models a phase-vocoder time
        stretch of the output (same pitch). A set ``cancel`` stops before the next
        sentence or chunk.
        """
        import torch

        method = self.speed_method if speed != 1.0 else ""
        for sentence in self.split_sentences(text):
            if cancel is not None and cancel.is_set():
                return
            if self.is_xtts:
                yield from self._xtts_stream(sentence, cancel, speed)
                continue
            if not self._speakable(sentence):
                # Coqui's VITS crashes on an input with no token it knows ("42" for a
                # voice without digits, an emoji): there is nothing in it to say.
                logger.info("Skipping %r: none of its characters are in the voice's vocabulary", sentence)
                continue
            with self._lock, torch.inference_mode(), self._length_scale(speed if method == "length_scale" else 1.0):
                wav = self._tts.tts(
                    sentence,
                    speaker=self._speaker,
                    language=self._language,
                    split_sentences=False,
                )
            audio = _as_float32(wav)
            if method == "time_stretch":
                audio = time_stretch(audio, speed)
            if audio.size:
                yield audio

    def _tokenizer_padding_ids(self) -> frozenset[int] | None:
        """The ids of the tokenizer's pad/blank/bos/eos tokens; None for a model without a tokenizer."""
        tokenizer = getattr(self._model, "tokenizer", None)
        if tokenizer is None:
            return None
        characters = tokenizer.characters
        return frozenset(
            characters.char_to_id(char)
            for char in (characters.pad, characters.blank, characters.bos, characters.eos)
            if char
        )

    def _speakable(self, sentence: str) -> bool:
        """Whether the model's tokenizer keeps anything of ``sentence`` beyond its padding tokens."""
        if self._padding_ids is None:
            return True
        with self._lock:  # the tokenizer's phonemizer is shared too
            ids = self._model.tokenizer.text_to_ids(sentence, language=self._language)
        return any(i not in self._padding_ids for i in ids)

    @contextlib.contextmanager
    def _length_scale(self, speed: float) -> Iterator[None]:
        """VITS reads its length scale from the model: set for one call, under the lock, then restored."""
        if speed == 1.0:
            yield
            return
        base = self._model.length_scale
        self._model.length_scale = base / speed
        try:
            yield
        finally:
            self._model.length_scale = base

    def _xtts_stream(self, sentence: str, cancel: Cancel | None, speed: float = 1.0) -> Iterator[np.ndarray]:
        if self._xtts_latents is None:  # loaded with every XTTS model
            raise RuntimeError("XTTS streaming without the speaker's latents")
        latent, embedding = self._xtts_latents
        chunks = self._model.inference_stream(sentence, self.language or "en", latent, embedding, speed=speed)
        while cancel is None or not cancel.is_set():
            with self._lock:  # never held across a yield
                chunk = next(chunks, None)
            if chunk is None:
                return
            audio = _as_float32(chunk)
            if audio.size:
                yield audio
        chunks.close()


def _as_float32(wav: Any) -> np.ndarray:
    if hasattr(wav, "detach"):
        wav = wav.detach().cpu().numpy()
    return np.asarray(wav, dtype=np.float32).reshape(-1)
