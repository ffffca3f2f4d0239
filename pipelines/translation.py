"""Live translation (``/v1/realtime/translations``): speech in, translated speech and text out, phrase by phrase.

A phrase ends at a pause the VAD hears (``PAUSE_MS``), or after ``PHRASE_MAX_S`` of speech without one; it is
translated and spoken while the speaker goes on: one thread listens (VAD), another translates and speaks, so the
next phrase is being heard while the last one is translated. The models are the process's: the pool's VAD model,
denoiser and voice, and one multilingual Whisper (its translate task: any language it knows into English), loaded
once per process when the first translation session asks for it (:class:`Translations`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pipelines import audio, cpu
from pipelines.input_audio import InputAudio
from pipelines.interfaces import DenoiserModel, LanguageModel, Synthesizer, VadModel
from pipelines.translation_targets import kokoro_targets, translate_text

logger = logging.getLogger(__name__)

TARGETS = ("en",)  # what Whisper's translate task produces: the languages a session may ask for (target_languages)
FRAME = 512  # samples at 16 kHz, 32 ms: the frame the VAD scores
FRAME_MS = FRAME * 1000 // audio.PIPELINE_RATE
SPEECH_PROB = 0.5
PAUSE_MS = 400  # of silence after speech: the phrase ends
MIN_SPEECH_MS = 200  # a phrase with less speech than this is a click, not a phrase
PHRASE_MAX_S = 8.0  # of speech without a pause: the phrase is cut there all the same
LEAD_MS = 200  # of audio kept before a phrase's first speech frame (the onset the VAD hears late)
# A language detected with this probability is the session's from then on: a speaker rarely changes language,
# and Whisper base, asked again on each short phrase, now and then hears another one (Thai, Japanese for
# espeak-ng's Spanish) and translates or transcribes that phrase as if it were.
KEEP_LANGUAGE_PROBABILITY = 0.5


@dataclass(frozen=True)
class Heard:
    """One phrase translated: the language heard (and how sure the model was of it), its transcript when asked
    ("" otherwise), its translation."""

    language: str
    source: str
    text: str
    probability: float = 1.0


class Translator(Protocol):
    """Speech (16 kHz float32) of any language into English text."""

    def translate(self, audio: np.ndarray, with_source: bool = False, language: str | None = None) -> Heard:
        """``language`` None: detected in this phrase."""
        ...

    def hear(self, audio: np.ndarray, language: str | None = None) -> Heard:
        """The phrase's transcript in its own language (``Heard.source``; ``Heard.text`` empty): what the LM puts
        into a target other than English."""
        ...


def target_languages(voices_dir: str | None = None) -> tuple[str, ...]:
    """The output languages a translation session may ask for, the first the default: the one place that says
    (a client secret's settings are checked against it before any model loads). English, and each language whose
    Kokoro voice is installed in ``voices_dir`` (None: where make kokoro puts them; pipelines.translation_targets)."""
    return TARGETS + tuple(kokoro_targets(voices_dir))


@dataclass(frozen=True)
class TranslationEngines:
    vad: VadModel
    translator: Translator
    voice: Synthesizer  # speaks the translation (TARGETS' language)
    denoiser: DenoiserModel | None = None
    lm: LanguageModel | None = None  # translates into the other targets, which ``voices`` speak (by language)
    voices: Mapping[str, Synthesizer] = field(default_factory=dict)
    targets: tuple[str, ...] = field(default_factory=target_languages)


class Translations:
    """The process's translation engines, loaded on first use (once: a failure is tried again by the next)."""

    def __init__(self, load: Callable[[], TranslationEngines]) -> None:
        self._load = load
        self._engines: TranslationEngines | None = None
        self._lock = threading.Lock()

    def get(self) -> TranslationEngines:
        """Blocks while the models load (run it off the event loop)."""
        with self._lock:
            if self._engines is None:
                self._engines = self._load()
            return self._engines


# --- what a session hears back, from the translation's threads ---------------------------


@dataclass(frozen=True)
class SourceText:
    """A phrase's transcript in its own language (only when the session asks for it)."""

    text: str
    language: str
    elapsed_ms: int


@dataclass(frozen=True)
class TranslatedText:
    text: str
    elapsed_ms: int


@dataclass(frozen=True)
class TranslatedAudio:
    """A piece of the translation's speech: PCM16 mono at 24 kHz."""

    pcm16: bytes
    elapsed_ms: int


@dataclass(frozen=True)
class TranslationFailed:
    message: str


@dataclass(frozen=True)
class Flushed:
    """Everything heard before a flush has been translated and spoken."""


TranslationOutput = SourceText | TranslatedText | TranslatedAudio | TranslationFailed | Flushed
Sink = Callable[[TranslationOutput], None]


@dataclass(frozen=True)
class _Phrase:
    samples: np.ndarray
    elapsed_ms: int  # where it ended, in the session's input audio


_FLUSH = object()
_STOP = object()


class LiveTranslation:
    """One session's translation: :meth:`feed` its PCM16 24 kHz audio; what it makes goes to ``sink``, called
    from its threads. ``with_source`` and ``noise_reduction`` may change at any time (``session.update``)."""

    def __init__(self, engines: TranslationEngines, sink: Sink, name: str = "translation") -> None:
        self.engines = engines
        self.sink = sink
        self.with_source = False
        self.noise_reduction: str | None = None
        self.language: str | None = None  # the speaker's, once detected surely enough (KEEP_LANGUAGE_PROBABILITY)
        self.target = TARGETS[0]  # the language spoken (audio.output.language): one of the engines' targets
        self._stopped = threading.Event()
        self._audio: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._phrases: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._listen,), name=f"{name}-listen", daemon=True),
            threading.Thread(target=self._guarded, args=(self._speak,), name=f"{name}-speak", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def feed(self, pcm16: bytes) -> None:
        self._audio.put(pcm16)

    def flush(self) -> None:
        """Ends the phrase under way; :class:`Flushed` follows the last of its translation."""
        self._audio.put(_FLUSH)

    def close(self) -> None:
        """Stops both threads without waiting for them (what they still make is dropped)."""
        self._stopped.set()
        self._audio.put(_STOP)
        self._phrases.put(_STOP)

    def _guarded(self, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception as exc:
            logger.exception("translation thread failed")
            self._emit(TranslationFailed(f"{type(exc).__name__}: {exc}"))

    def _emit(self, out: TranslationOutput) -> None:
        if not self._stopped.is_set():
            self.sink(out)

    # --- listening: the VAD cuts the input into phrases -----------------------------------

    def _listen(self) -> None:
        state = self.engines.vad.new_state()
        source = InputAudio(self.engines.denoiser)
        pending = np.zeros(0, dtype=np.float32)
        phrase: list[np.ndarray] = []
        lead: list[np.ndarray] = []
        speech_ms = silence_ms = heard_ms = 0
        while (item := self._audio.get()) is not _STOP:
            if item is _FLUSH:
                if speech_ms >= MIN_SPEECH_MS:
                    self._phrases.put(_Phrase(np.concatenate(phrase), heard_ms))
                phrase, speech_ms, silence_ms = [], 0, 0
                self._phrases.put(_FLUSH)
                continue
            assert isinstance(item, bytes)
            pending = np.concatenate([pending, source.process(item, audio.PCM, self.noise_reduction)])
            while len(pending) >= FRAME:
                frame, pending = pending[:FRAME], pending[FRAME:]
                heard_ms += FRAME_MS
                speaking = state.prob(frame) >= SPEECH_PROB
                if not phrase and not speaking:
                    lead = [*lead, frame][-(LEAD_MS // FRAME_MS) :]
                    continue
                if not phrase:
                    phrase, lead = [*lead], []
                phrase.append(frame)
                if speaking:
                    speech_ms, silence_ms = speech_ms + FRAME_MS, 0
                else:
                    silence_ms += FRAME_MS
                ended = silence_ms >= PAUSE_MS or speech_ms >= PHRASE_MAX_S * 1000
                if ended and speech_ms >= MIN_SPEECH_MS:
                    self._phrases.put(_Phrase(np.concatenate(phrase), heard_ms))
                if ended:
                    phrase, speech_ms, silence_ms = [], 0, 0
        source.close()

    # --- speaking: each phrase translated, then synthesized -------------------------------

    def _speak(self) -> None:
        while (item := self._phrases.get()) is not _STOP:
            if item is _FLUSH:
                self._emit(Flushed())
                continue
            assert isinstance(item, _Phrase)
            try:
                self._translate(item)
            except Exception as exc:  # one phrase lost, the session goes on
                logger.exception("a phrase could not be translated")
                self._emit(TranslationFailed(f"{type(exc).__name__}: {exc}"))

    def _into(self, heard: Heard, target: str) -> str:
        """The phrase's transcript put into ``target`` by the LM."""
        if self.engines.lm is None:
            raise RuntimeError(f"no language model to translate into {target!r}")
        with cpu.current().busy():
            return translate_text(self.engines.lm, heard.source, heard.language, target, self._stopped)

    def _translate(self, phrase: _Phrase) -> None:
        target = self.target.split("-")[0]
        english = target == TARGETS[0]
        with cpu.current().busy(), cpu.current().core():
            translator = self.engines.translator
            if english:
                heard = translator.translate(phrase.samples, self.with_source, self.language)
            else:
                heard = translator.hear(phrase.samples, self.language)
        if self._stopped.is_set():
            return
        if self.language is None and heard.language and heard.probability >= KEEP_LANGUAGE_PROBABILITY:
            self.language = heard.language
        if self.with_source and heard.source:
            self._emit(SourceText(heard.source + " ", heard.language, phrase.elapsed_ms))
        text = heard.text if english else self._into(heard, target)
        if not text or self._stopped.is_set():
            return
        self._emit(TranslatedText(text + " ", phrase.elapsed_ms))
        voice = self.engines.voices.get(target, self.engines.voice)
        with cpu.current().busy():
            for chunk in voice.synthesize(text, self._stopped):
                if self._stopped.is_set():
                    return
                pcm = audio.encode(audio.resample(chunk, voice.sample_rate, audio.RATES[audio.PCM]), audio.PCM)
                self._emit(TranslatedAudio(pcm, phrase.elapsed_ms))
