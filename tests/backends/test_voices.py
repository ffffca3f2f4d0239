"""Which voice each name plays, with the real Piper voice: one engine per model file, shared by its names."""

from __future__ import annotations

import numpy as np

from pipelines.backends.piper_tts import default_voice_path
from pipelines.config import EngineConfig
from pipelines.engines import _voices


def test_an_extra_voice_takes_its_name_and_each_model_loads_once():
    path = default_voice_path()
    config = EngineConfig(extra_voices=(("echo", path), ("narrator", path)))
    voices = _voices(config, "cpu", {})
    assert set(voices) == set(config.all_voices)
    assert voices["echo"] is voices["narrator"]  # one model file, one engine
    assert voices["echo"] is not voices["alloy"]
    assert all(voices[name] is voices["alloy"] for name in config.voices if name != "echo")
    table = config.voice_table()
    assert table["echo"] == table["narrator"] == "en_US-joe-medium.onnx"
    assert table["alloy"] == "Piper en_US-joe-medium"


def test_the_voice_table_says_when_the_openai_names_share_one_voice():
    notes = EngineConfig().voice_notes()
    assert notes[0].startswith("voice Piper en_US-joe-medium plays for alloy, ash, ballad")
    assert "10 OpenAI voice names play the same voice" in notes[1]


def test_a_speed_is_per_call_so_units_sharing_a_voice_do_not_disturb_each_other():
    voices = _voices(EngineConfig(), "cpu", {})
    voice = voices["alloy"]
    fast = np.concatenate(list(voice.synthesize("Good morning.", speed=1.5)))
    again = np.concatenate(list(voice.synthesize("Good morning.")))
    assert len(fast) < len(again)
    assert len(np.concatenate(list(voices["sage"].synthesize("Good morning.")))) > len(fast)
