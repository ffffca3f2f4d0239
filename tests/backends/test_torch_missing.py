"""An engine on PyTorch chosen where `make run` left PyTorch out (requirements-torch.txt) stops the start with a
message naming the command that installs it, not an ImportError from inside the engine. PyTorch's absence is
FAKE here: the import system is told that its packages are not installed; no model loads."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipelines import engines, factory
from pipelines.backends import registry
from pipelines.config import EngineConfig, PoolConfig
from pipelines.errors import ModelLoadError
from pipelines.factory import build_pool, stage_factory

TORCH_PACKAGES = {"torch", "torchaudio", "TTS", "librosa", "gguf", "xgrammar"}
CHECK_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_engines.py"


@pytest.fixture
def fake_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """FAKE: requirements-torch.txt's packages are not installed (``find_spec`` finds none, ``import`` fails)."""
    real_find_spec = importlib.util.find_spec

    def find_spec_without_torch(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in TORCH_PACKAGES:
            return None
        return real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec_without_torch)
    for name in TORCH_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: `import name` raises ImportError


@pytest.mark.parametrize(
    ("backends", "kind", "name", "choice", "module"),
    [
        (registry.LM_BACKENDS, "LM backend", "transformers", "S2S_LM_BACKEND=transformers", "transformers_lm"),
        (registry.TTS_BACKENDS, "TTS backend", "coqui", "S2S_TTS_BACKEND=coqui", "coqui_tts"),
    ],
)
def test_an_engine_on_torch_without_it_stops_with_the_command(
    fake_without_torch, monkeypatch, backends, kind, name, choice, module
):
    monkeypatch.delitem(sys.modules, f"pipelines.backends.{module}", raising=False)
    with pytest.raises(ModelLoadError) as raised:
        registry.load(backends, kind, name, EngineConfig(), registry.Needs("cpu"))
    message = str(raised.value)
    assert message.startswith(f"{choice} needs PyTorch, which is not installed here (torch")
    assert "`make setup-torch` (requirements-torch.txt)" in message
    # Stopped before the engine's module was imported: no ImportError from inside it.
    assert f"pipelines.backends.{module}" not in sys.modules


def test_the_defaults_need_no_torch(fake_without_torch):
    assert registry.unmet(EngineConfig()) == []


def test_every_engine_on_torch_chosen_is_named(fake_without_torch):
    config = replace(EngineConfig(), lm_backend="transformers", tts_backend="coqui", device="cuda")
    unmet = registry.unmet(config)
    assert [message.split(" ")[0] for message in unmet] == [
        "S2S_LM_BACKEND=transformers",
        "S2S_TTS_BACKEND=coqui",
        "S2S_DEVICE=cuda",
    ]
    assert all("make setup-torch" in message for message in unmet)


def test_cuda_without_torch_names_the_command(fake_without_torch):
    with pytest.raises(ModelLoadError, match=r"S2S_DEVICE=cuda needs PyTorch.*`make setup-torch`"):
        engines.resolve_device("cuda")
    assert engines.resolve_device("auto") == "cpu"


def test_make_runs_check_stops_with_the_message_and_no_traceback(fake_without_torch, settings, capsys):
    settings.S2S_POOL = replace(settings.S2S_POOL, engines=replace(EngineConfig(), tts_backend="coqui"))
    main = runpy.run_path(str(CHECK_SCRIPT))["main"]
    assert main() == 1
    err = capsys.readouterr().err
    assert err.startswith("S2S_TTS_BACKEND=coqui needs PyTorch") and "make setup-torch" in err
    assert "Traceback" not in err

    settings.S2S_POOL = replace(settings.S2S_POOL, engines=EngineConfig())
    assert main() == 0


@pytest.mark.parametrize("build", [stage_factory, build_pool], ids=["stage_factory", "build_pool"])
def test_the_pool_says_it_before_any_model_loads(fake_without_torch, monkeypatch, build):
    """build_pool is what manage.py serve and warmup_pool call (it loaded Silero, RNNoise and Whisper before the
    LM's ImportError said it, once it built the translation sessions' engines beside the units')."""

    def fake_load_engines(*args: object, **kwargs: object) -> None:
        raise AssertionError("FAKE load_engines: no model may load before the check")

    monkeypatch.setattr(factory, "load_engines", fake_load_engines)
    config = PoolConfig(engines=replace(EngineConfig(), lm_backend="transformers"))
    with pytest.raises(ModelLoadError, match=r"^S2S_LM_BACKEND=transformers needs PyTorch.*`make setup-torch`"):
        build(config)
