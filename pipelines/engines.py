"""Loads the real engines once per process; every unit's stages share them."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipelines.config import EngineConfig
from pipelines.errors import ModelLoadError
from pipelines.stages.base import SessionContext, Stage
from pipelines.stages.lm import LanguageModel, LmStage
from pipelines.stages.stt import SttStage, Transcriber
from pipelines.stages.tts import Synthesizer, TtsStage
from pipelines.stages.vad import VadModel, VadStage

logger = logging.getLogger(__name__)


def resolve_device(requested: str) -> str:
    if requested != "auto":
        if requested == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ModelLoadError("S2S_DEVICE=cuda but no CUDA device is available")
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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
    stt: Transcriber
    lm: LanguageModel
    voices: dict[str, Synthesizer]
    max_new_tokens: int
    partial_every_ms: int
    speculate_after_ms: int
    first_piece_words: int
    load_seconds: dict[str, float] = field(default_factory=dict)

    def build_stages(self, context: SessionContext) -> list[Stage]:
        """One unit's stages: per-session state only; the models are shared."""
        return [
            VadStage(context, self.vad, partial_every_ms=self.partial_every_ms, speculate_after_ms=self.speculate_after_ms),
            SttStage(context, self.stt),
            LmStage(context, self.lm, max_new_tokens=self.max_new_tokens, first_piece_words=self.first_piece_words),
            TtsStage(context, self.voices),
        ]


def _timed(name: str, load: Callable[[], object], timings: dict[str, float],
            progress: Callable[[str], None] | None) -> object:
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
    if config.tts_backend == "coqui":
        from pipelines.backends.coqui_tts import CoquiEngine

        if not (config.tts_model or config.tts_model_name):
            raise ModelLoadError("S2S_TTS_BACKEND=coqui needs S2S_TTS_MODEL (+ S2S_TTS_CONFIG) or S2S_TTS_MODEL_NAME")
        return CoquiEngine(model_path=config.tts_model, config_path=config.tts_config,
                           model_name=config.tts_model_name, device=device,
                           speaker=config.tts_speaker, language=config.tts_language)
    from pipelines.backends.piper_tts import PiperEngine

    return PiperEngine(voice_path=config.tts_model, use_cuda=device == "cuda" and config.tts_piper_cuda)


def load_engines(config: EngineConfig, pool_size: int = 1, progress: Callable[[str], None] | None = None) -> Engines:
    """Loads VAD, STT, LM and TTS once. Raises ModelLoadError with a clear message when one is missing."""
    device = resolve_device(config.device)
    threads = compute_threads(config, pool_size)
    import torch

    torch.set_num_threads(threads)
    logger.info("engines on %s with %s compute thread(s) per call", device, threads)
    timings: dict[str, float] = {}

    from pipelines.backends.faster_whisper_stt import WhisperEngine
    from pipelines.backends.silero import SileroVadModel
    from pipelines.backends.transformers_lm import TransformersLM

    vad = _timed("vad (silero)", lambda: SileroVadModel(config.vad_model), timings, progress)
    stt = _timed("stt (faster-whisper)", lambda: WhisperEngine(config.stt_model, device=device, cpu_threads=threads,
                                                                 num_workers=max(1, pool_size)), timings, progress)
    lm = _timed("lm (transformers)", lambda: TransformersLM(config.lm_model, gguf_file=config.lm_gguf_file, device=device,
                                                              cache_dir=config.lm_cache_dir), timings, progress)
    tts = _timed(f"tts ({config.tts_backend})", lambda: _tts(config, device), timings, progress)
    voices = {name: tts for name in config.voices}  # type: ignore[misc]
    for name, path in config.extra_voices:
        voices[name] = _timed(f"voice {name}", lambda path=path: _tts(_with_model(config, path), device), timings, progress)  # type: ignore[misc]
    return Engines(vad=vad, stt=stt, lm=lm, voices=voices, max_new_tokens=config.lm_max_new_tokens,  # type: ignore[arg-type]
                   partial_every_ms=config.partial_every_ms, speculate_after_ms=config.speculate_after_ms,
                   first_piece_words=config.first_piece_words, load_seconds=timings)


def _with_model(config: EngineConfig, path: str) -> EngineConfig:
    from dataclasses import replace

    return replace(config, tts_model=path)
