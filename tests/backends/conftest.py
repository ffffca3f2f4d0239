"""Session-wide real models for the backend tests: each loads once per run."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub here: never download
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

QUESTION = "What is the capital of France?"


def resample(audio: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """Linear-interpolation resampling; good enough to feed test speech to Whisper."""
    duration = len(audio) / src_rate
    n_out = int(round(duration * dst_rate))
    t_out = np.arange(n_out) / dst_rate
    t_in = np.arange(len(audio)) / src_rate
    return np.interp(t_out, t_in, audio).astype(np.float32)


@pytest.fixture(scope="session")
def piper_engine():
    from pipelines.backends.piper_tts import PiperEngine

    return PiperEngine()


@pytest.fixture(scope="session")
def question_audio_16k(piper_engine) -> np.ndarray:
    """The question spoken by the packaged Piper voice, as 16 kHz float32 mono."""
    audio = np.concatenate(list(piper_engine.synthesize(QUESTION)))
    return resample(audio, piper_engine.sample_rate, 16000)


@pytest.fixture(scope="session")
def whisper_engine():
    from pipelines.backends.faster_whisper_stt import WhisperEngine

    return WhisperEngine(cpu_threads=2)


@pytest.fixture(scope="session")
def silero_model():
    from pipelines.backends.silero import SileroVadModel

    return SileroVadModel()


@pytest.fixture(scope="session")
def lm_cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lm_cache")


@pytest.fixture(scope="session")
def lm(lm_cache_dir):
    """The packaged SmolLM2 GGUF; the first load fills ``lm_cache_dir``."""
    from pipelines.backends.transformers_lm import TransformersLM

    return TransformersLM(cache_dir=str(lm_cache_dir))


@pytest.fixture(scope="session")
def tiny_vits_files(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny randomly initialised VITS checkpoint + config, as an operator would ship one."""
    from tests.support.coqui import build_tiny_vits

    return build_tiny_vits(tmp_path_factory.mktemp("tiny_vits"))


@pytest.fixture(scope="session")
def coqui_engine(tiny_vits_files):
    from pipelines.backends.coqui_tts import CoquiEngine

    checkpoint, config_path = tiny_vits_files
    return CoquiEngine(model_path=str(checkpoint), config_path=str(config_path))


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """``python -m llama_cpp.server`` on the packaged SmolLM2 GGUF; yields the base URL."""
    from tests.support.llama_server import llama_server as start

    with start(tmp_path_factory.mktemp("llama_server") / "server.log") as url:
        yield url
