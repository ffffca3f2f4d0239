"""Loads the real engines once per process; every unit's stages share them."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from pipelines import cpu
from pipelines.backends import registry
from pipelines.config import EngineConfig
from pipelines.errors import ModelLoadError
from pipelines.interfaces import (
    DenoiserModel,
    LanguageModel,
    Synthesizer,
    TextTurnModel,
    Transcriber,
    TurnModel,
    VadModel,
)
from pipelines.speech_order import SpeechOrder
from pipelines.stages.base import SessionContext, Stage
from pipelines.stages.lm import LmStage
from pipelines.stages.stt import SttStage
from pipelines.stages.tts import TtsStage
from pipelines.stages.vad import VadStage
from pipelines.translation import TranslationEngines, Translator, target_languages
from pipelines.translation_targets import VOICES

if TYPE_CHECKING:
    from pipelines.backends.kokoro_tts import KokoroModel
    from pipelines.backends.transformers_lm import TransformersLM

logger = logging.getLogger(__name__)

E = TypeVar("E")


class Scheduler(Protocol):
    """A batch scheduler (LM batching, STT batching): a thread shared by the units, stopped by ``close()``."""

    def close(self) -> None: ...


def _torch() -> ModuleType | None:
    """PyTorch, or None where it is not installed: ``make run`` and the CPU container image leave it out, since
    none of the default engines (llama.cpp, CTranslate2, ONNX Runtime) needs it; Coqui TTS and the transformers LM
    do (requirements-torch.txt, ``make setup-torch``)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def resolve_device(requested: str) -> str:
    torch = _torch() if requested in ("auto", "cuda") else None
    if requested == "cuda" and torch is None:
        raise ModelLoadError(registry.torch_missing("S2S_DEVICE=cuda", ["torch"]))
    if requested == "cuda" and torch is not None and not torch.cuda.is_available():
        raise ModelLoadError("S2S_DEVICE=cuda but no CUDA device is available")
    if requested != "auto":
        return requested
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def compute_threads(config: EngineConfig, pool_size: int) -> int:
    """Threads per engine call, so that the units together do not oversubscribe the cores."""
    if config.torch_threads:
        return config.torch_threads
    cores = os.cpu_count() or 1
    return max(1, cores // max(1, min(pool_size, cores)))


@dataclass
class Engines:
    """The shared models, and per-load timings for the warm-up report."""

    vad: VadModel
    turn: TurnModel
    stt: Transcriber
    lm: LanguageModel
    voices: dict[str, Synthesizer]
    max_new_tokens: int
    partial_every_ms: int
    max_turn_s: float
    speculate_after_ms: int
    first_piece_words: int
    smart_turn_silence_ms: int
    min_interrupt_ms: int
    history_tokens: int = 0
    semantic_speculate_after_ms: int | None = None  # None: speculate_after_ms
    turn_text: TextTurnModel | None = None
    denoiser: DenoiserModel | None = None  # audio.input.noise_reduction (RNNoise)
    speech_order: SpeechOrder | None = None
    # Scheduler threads (LM batching, STT batching) stopped by close().
    schedulers: list[Scheduler] = field(default_factory=list)

    def close(self) -> None:
        """Stops the shared schedulers' threads (the models themselves need no closing)."""
        for scheduler in self.schedulers:
            scheduler.close()

    def build_stages(self, context: SessionContext) -> list[Stage]:
        """One unit's stages: per-session state only; the models are shared."""
        return [
            VadStage(
                context,
                self.vad,
                partial_every_ms=self.partial_every_ms,
                max_turn_ms=int(self.max_turn_s * 1000),
                speculate_after_ms=self.speculate_after_ms,
                semantic_speculate_after_ms=self.semantic_speculate_after_ms,
                turn_model=self.turn,
                check_after_ms=self.smart_turn_silence_ms,
                min_interrupt_ms=self.min_interrupt_ms,
                text_model=self.turn_text,
                denoiser=self.denoiser,
            ),
            SttStage(context, self.stt),
            LmStage(
                context,
                self.lm,
                max_new_tokens=self.max_new_tokens,
                first_piece_words=self.first_piece_words,
                max_history_tokens=self.history_tokens,
            ),
            TtsStage(context, self.voices, self.speech_order),
        ]


def _timed(name: str, load: Callable[[], E], timings: dict[str, float], progress: Callable[[str], None] | None) -> E:
    if progress:
        progress(f"loading {name}")
    started = time.perf_counter()
    try:
        engine = load()
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{name} failed to load: {type(exc).__name__}: {exc}") from exc
    timings[name] = time.perf_counter() - started
    logger.info("%s loaded in %.1fs", name, timings[name])
    return engine


def _tts(config: EngineConfig, device: str) -> Synthesizer:
    return registry.load(registry.TTS_BACKENDS, "TTS backend", config.tts_backend, config, registry.Needs(device))


def load_engines(config: EngineConfig, pool_size: int = 1, progress: Callable[[str], None] | None = None) -> Engines:
    """Loads VAD, STT, LM and TTS once. Raises ModelLoadError with a clear message when one is missing."""
    device = resolve_device(config.device)
    threads = compute_threads(config, pool_size)
    # A batch scheduler is the one caller of its model: it gets all the cores the units would have split.
    lm_threads = (config.torch_threads or os.cpu_count() or 1) if config.lm_batching else threads
    stt_threads = (config.torch_threads or os.cpu_count() or 1) if config.stt_batch_window_ms else threads
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(lm_threads)
    # A lone talker's LM takes every core while nothing else computes (pipelines.cpu); a fixed
    # S2S_TORCH_THREADS, or a batch scheduler that has them all already, keeps its count.
    # Steps in order of urgency, one per core: on the CPU, where the units' engines share the cores; a batch
    # scheduler's thread serves every unit's steps at once, which one unit's place in the order cannot stand for.
    ordered = config.compute_order and device == "cpu" and not config.lm_batching and not config.stt_batch_window_ms
    cpu.configure(share=lm_threads, adaptive=not config.torch_threads and not config.lm_batching, ordered=ordered)
    logger.info(
        "engines on %s with %s compute thread(s) per call (LM %s, STT %s); compute steps %s",
        device,
        threads,
        lm_threads,
        stt_threads,
        "in order of urgency, one per core" if ordered else "as the kernel schedules them",
    )
    logger.info("models: %s", config.describe())
    for setting in config.ignored():
        logger.warning("%s", setting)
    for line in config.voice_notes():
        logger.info("%s", line)
    timings: dict[str, float] = {}

    from pipelines.backends.batched_lm import BatchedLM
    from pipelines.backends.batched_stt import BatchedTranscriber
    from pipelines.backends.faster_whisper_stt import WhisperEngine
    from pipelines.backends.silero import SileroVadModel
    from pipelines.backends.smart_turn import SmartTurnModel

    vad = _timed("vad (silero)", lambda: SileroVadModel(config.vad_model), timings, progress)
    denoiser = _timed(f"noise reduction ({config.denoiser})", lambda: _denoiser(config), timings, progress)
    # One thread: a call on a turn's 8 s is about 30 ms on a free core, and a second thread would take
    # a core from the STT and the LM that run beside it.
    turn = _timed("turn (smart turn v3)", lambda: SmartTurnModel(config.smart_turn_model, threads=1), timings, progress)
    whisper = _timed(
        "stt (faster-whisper)",
        lambda: WhisperEngine(
            config.stt_model,
            device=device,
            cpu_threads=stt_threads,
            # Two calls per unit at once: a turn's final transcript beside a partial one still being made.
            num_workers=2 * max(1, pool_size),
            window_s=config.stt_window_s,
        ),
        timings,
        progress,
    )
    lm = _timed(f"lm ({config.lm_backend})", lambda: _lm(config, device, threads, pool_size), timings, progress)
    turn_text = _timed("turn words (LM)", lambda: _turn_text(config, threads), timings, progress)
    voices = _voices(config, device, timings, progress)
    schedulers: list[Scheduler] = []
    stt: Transcriber = whisper
    if config.stt_batch_window_ms:
        batched_stt = BatchedTranscriber(whisper, window_ms=config.stt_batch_window_ms, max_batch=pool_size)
        stt = batched_stt
        schedulers.append(batched_stt)
    if config.lm_batching and config.lm_backend == "transformers":
        # The transformers backend loads a TransformersLM, the one engine BatchedLM batches.
        batched_lm = BatchedLM(cast("TransformersLM", lm), max_batch=config.lm_max_batch or pool_size)
        lm = batched_lm
        schedulers.append(batched_lm)
    order = SpeechOrder(config.tts_slots) if config.tts_slots else None
    return Engines(
        vad=vad,
        turn=turn,
        stt=stt,
        lm=lm,
        voices=voices,
        max_new_tokens=config.lm_max_new_tokens,
        partial_every_ms=config.partial_every_ms,
        max_turn_s=config.max_turn_s,
        speculate_after_ms=config.speculate_after_ms,
        semantic_speculate_after_ms=config.semantic_speculate_after_ms,
        first_piece_words=config.first_piece_words,
        smart_turn_silence_ms=config.smart_turn_silence_ms,
        min_interrupt_ms=config.min_interrupt_ms,
        history_tokens=config.lm_history_tokens,
        turn_text=turn_text,
        denoiser=denoiser,
        speech_order=order,
        schedulers=schedulers,
    )


def _denoiser(config: EngineConfig) -> DenoiserModel:
    """audio.input.noise_reduction's denoiser, loaded once and shared by the units."""
    return registry.load(registry.DENOISERS, "denoiser", config.denoiser, config, registry.Needs("cpu"))


def _turn_text(config: EngineConfig, threads: int) -> TextTurnModel | None:
    """semantic_vad's reader of words: a small LM on llama.cpp (the packaged SmolLM2 by default)."""
    from pipelines.backends.turn_text import EndOfTurnLM

    if config.turn_text_model == "off":
        return None
    return EndOfTurnLM(None if config.turn_text_model == "default" else config.turn_text_model, threads=threads)


def _lm(config: EngineConfig, device: str, threads: int, pool_size: int) -> LanguageModel:
    """The model in this process (llama.cpp or transformers), or a client of an OpenAI-compatible serving engine."""
    needs = registry.Needs(device, threads, pool_size)
    return registry.load(registry.LM_BACKENDS, "LM backend", config.lm_backend, config, needs)


def _voices(
    config: EngineConfig, device: str, timings: dict[str, float], progress: Callable[[str], None] | None = None
) -> dict[str, Synthesizer]:
    """Every voice name -> its engine: the configured voice for the OpenAI names, an extra voice
    (``S2S_TTS_VOICES``) for its name, which may be an OpenAI one. Each model file loads once,
    whatever the number of names that play it."""
    tts = _timed(f"tts ({config.tts_backend})", lambda: _tts(config, device), timings, progress)
    voices: dict[str, Synthesizer] = {name: tts for name in config.voices}
    loaded: dict[str, Synthesizer] = {}
    for name, path in config.extra_voices:
        if path not in loaded:
            loaded[path] = _timed(f"voice {name}", functools.partial(_voice, config, path, device), timings, progress)
        voices[name] = loaded[path]
    kokoro = [name for name in config.kokoro_names if name not in voices]  # an OpenAI or extra name keeps its own
    if kokoro:
        model = _timed("tts (kokoro voices)", lambda: _kokoro_model(config), timings, progress)
        voices.update({name: model.voice(name) for name in kokoro})
    return voices


def _kokoro_model(config: EngineConfig) -> KokoroModel:
    """Kokoro-82M, loaded once for all its voices (each voice a file of style vectors read on first use)."""
    model = registry.kokoro_model(config.kokoro_model_dir, config.kokoro_voices_dir)
    model.load()
    return model


def _voice(config: EngineConfig, path: str, device: str) -> Synthesizer:
    """The configured TTS engine with the model file ``path``: an extra voice."""
    return _tts(_with_model(config, path), device)


def _with_model(config: EngineConfig, path: str) -> EngineConfig:
    from dataclasses import replace

    return replace(config, tts_model=path)


def translation_engines(engines: Engines, config: EngineConfig, pool_size: int) -> TranslationEngines:
    """The translation sessions' models: the pool's VAD, denoiser and first voice, and Whisper's translate task
    on the STT model when it is multilingual (``S2S_STT_MODEL=base``), else on the packaged multilingual
    ``base``, loaded here (once per process: ``pipelines.translation.Translations`` calls this on first use)."""
    from pipelines.backends.faster_whisper_stt import WhisperEngine

    translator: Translator
    if isinstance(engines.stt, WhisperEngine) and engines.stt.is_multilingual:
        translator = engines.stt
    else:
        started = time.perf_counter()
        translator = WhisperEngine(
            "base",
            device=resolve_device(config.device),
            cpu_threads=compute_threads(config, pool_size),
            num_workers=max(1, pool_size),
        )
        logger.info("translation: the multilingual Whisper base loaded in %.1fs", time.perf_counter() - started)
    voice = engines.voices.get(config.voices[0]) or next(iter(engines.voices.values()))
    targets = target_languages(config.kokoro_voices_dir)
    others = _target_voices(config, targets[1:])
    return TranslationEngines(engines.vad, translator, voice, engines.denoiser, engines.lm, others, targets)


def _target_voices(config: EngineConfig, languages: tuple[str, ...]) -> dict[str, Synthesizer]:
    """The Kokoro voice of each translation target other than English (the LM translates into them)."""
    if not languages:
        return {}
    model = _kokoro_model(config)
    return {language: model.voice(VOICES[language]) for language in languages}
