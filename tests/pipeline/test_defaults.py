"""Each default is written once, in a config dataclass, and each backend once, in its registry: the
settings and the constructors read them there."""

from __future__ import annotations

import importlib.util
import inspect
import os
import runpy
from dataclasses import fields

import pytest
from django.core.exceptions import ImproperlyConfigured

from pipelines import engines
from pipelines.backends import registry
from pipelines.backends.faster_whisper_stt import WhisperEngine
from pipelines.backends.llama_cpp_lm import LlamaCppLM
from pipelines.backends.openai_lm import OpenAIChatLM
from pipelines.config import LM_ENGINE_NAMES, EngineConfig, PoolConfig
from pipelines.errors import ModelLoadError
from pipelines.stages.lm import LmStage
from pipelines.stages.vad import VadStage
from pipelines.text import SentenceSplitter


def settings_without_environment(monkeypatch: pytest.MonkeyPatch, **environment: str) -> dict[str, object]:
    """The settings module's names as a start with no ``S2S_`` variable set (but ``environment``) would see them."""
    for name in list(os.environ):
        if name.startswith("S2S_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.find_spec("s2s_project.settings")
    assert spec is not None and spec.origin is not None
    return runpy.run_path(spec.origin)


def differences(built: object, default: object) -> dict[str, tuple[object, object]]:
    return {
        f.name: (getattr(built, f.name), getattr(default, f.name))
        for f in fields(default)  # type: ignore[arg-type]
        if getattr(built, f.name) != getattr(default, f.name)
    }


def test_the_settings_build_the_engine_config_of_the_dataclass_defaults(monkeypatch):
    pool = settings_without_environment(monkeypatch)["S2S_POOL"]
    assert isinstance(pool, PoolConfig)
    assert differences(pool.engines, EngineConfig()) == {}
    assert differences(pool, PoolConfig()) == {}


# (constructor, its parameter, the EngineConfig field of the same quantity)
SAME_QUANTITY = [
    (LmStage, "max_new_tokens", "lm_max_new_tokens"),
    (LmStage, "first_piece_words", "first_piece_words"),
    (SentenceSplitter, "first_words", "first_piece_words"),
    (VadStage, "partial_every_ms", "partial_every_ms"),
    (VadStage, "speculate_after_ms", "speculate_after_ms"),
    (VadStage, "check_after_ms", "smart_turn_silence_ms"),
    (VadStage, "min_interrupt_ms", "min_interrupt_ms"),
    (LlamaCppLM, "n_ctx", "lm_context"),
    (OpenAIChatLM, "context_length", "lm_context_length"),
    (OpenAIChatLM, "timeout_s", "lm_timeout_s"),
    (WhisperEngine, "window_s", "stt_window_s"),
]


@pytest.mark.parametrize(("constructor", "parameter", "setting"), SAME_QUANTITY)
def test_a_constructor_defaults_to_the_config_default_of_the_same_quantity(constructor, parameter, setting):
    default = inspect.signature(constructor).parameters[parameter].default
    assert default == getattr(EngineConfig(), setting), f"{constructor.__name__}({parameter}=...)"


@pytest.mark.parametrize(
    ("variable", "backends", "field"),
    [
        ("S2S_LM_BACKEND", registry.LM_BACKENDS, "lm_backend"),
        ("S2S_TTS_BACKEND", registry.TTS_BACKENDS, "tts_backend"),
        ("S2S_DENOISER", registry.DENOISERS, "denoiser"),
    ],
)
def test_the_settings_offer_exactly_the_registered_backends(monkeypatch, variable, backends, field):
    for name in backends:
        pool = settings_without_environment(monkeypatch, **{variable: name, "S2S_LM_BASE_URL": "http://lm/v1"})
        assert getattr(pool["S2S_POOL"].engines, field) == name  # type: ignore[attr-defined]
    with pytest.raises(ImproperlyConfigured, match=", ".join(backends)):
        settings_without_environment(monkeypatch, **{variable: "unregistered"})


def test_an_lm_backend_is_one_registration_which_loading_uses(monkeypatch):
    model = object()
    monkeypatch.setitem(registry.LM_BACKENDS, "fake", lambda config, needs: model)
    assert engines._lm(EngineConfig(lm_backend="fake"), "cpu", threads=1, pool_size=1) is model
    with pytest.raises(ModelLoadError, match="unknown LM backend 'gone'"):
        engines._lm(EngineConfig(lm_backend="gone"), "cpu", threads=1, pool_size=1)


def test_every_registered_lm_backend_has_its_name_in_words():
    assert set(LM_ENGINE_NAMES) == set(registry.LM_BACKENDS)
