from __future__ import annotations

import json

import pytest

from pipelines.backends.coqui_tts import CoquiEngine


def test_it_loads_a_checkpoint_and_config_from_disk(coqui_engine, tiny_vits_files):
    _, config_path = tiny_vits_files
    rate = json.loads(config_path.read_text())["audio"]["sample_rate"]
    assert coqui_engine.sample_rate == rate
    assert not coqui_engine.is_xtts


def test_a_sentence_with_nothing_the_voice_can_say_is_skipped_not_fatal(coqui_engine):
    # The tiny test voice has no digits and no emoji: VITS itself raises on such input.
    assert coqui_engine.split_sentences("Good morning. 42") == ["Good morning.", "42"]
    chunks = list(coqui_engine.synthesize("Good morning. 42"))
    assert len(chunks) == 1 and len(chunks[0]) > 0
    assert list(coqui_engine.synthesize("\U0001F600")) == []


def test_it_needs_a_model():
    with pytest.raises(ValueError):
        CoquiEngine()
